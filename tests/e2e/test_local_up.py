"""`warmstart local up` as a real subprocess: read a template, serve, stop cleanly on Ctrl-C."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import boto3
import httpx
from botocore.config import Config

from infra.local.stack import LOCAL_CREDENTIALS, LocalStack, LocalStackConfig
from infra.local.template import read_template
from tests.e2e.conftest import alive, assert_gone

ROOT = Path(__file__).parents[2]
TEMPLATE = Path(__file__).parent / "templates" / "local_app.template.json"


def descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    ppid = int(stat.read().rsplit(")", 1)[1].split()[1])
            except (FileNotFoundError, ProcessLookupError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.add(child)
            todo.append(child)
    return out


def _pids_with_environ(entry: bytes) -> list[int]:
    """Processes whose environment holds ``entry`` (KEY=VALUE): what a run started, orphans too."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/environ", "rb") as env:
                    if entry in env.read().split(b"\0"):
                        found.append(int(name))
            except OSError:
                continue
    return found


def _start(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "infra.cli", "local", "up", *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})


def test_local_up_serves_the_template_and_stops_everything_on_ctrl_c(tmp_path):
    endpoints_file = tmp_path / "endpoints.json"
    proc = _start("--template", str(TEMPLATE), "--endpoints-file", str(endpoints_file),
                  "--metrics-flush-interval-s", "0.3", "--time-scale", "30")
    try:
        lines = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            assert line, f"local up exited early: {proc.stderr.read()}"
            lines.append(line)
            if "ready" in line:
                break
        endpoints = json.loads(endpoints_file.read_text())
        assert set(endpoints) == {"moto", "gpu-endpoint", "tool-stub", "lambda", "gateway", "warmer", "agents"}
        printed = "".join(lines)
        for name in ("moto", "gpu-endpoint", "lambda", "gateway"):
            assert f"{name} " in printed and endpoints[name] in printed
        # the time scale shortens the warmer's period; it manages echo-fn's PC (floor 1)
        assert "every 60 clock s (2 real s)" in printed and "echo-fn:live (provisioned, PC 1..10)" in printed
        # the GPU endpoint is healthy and answers the SageMaker runtime API
        assert httpx.get(f"{endpoints['gpu-endpoint']}/ping").status_code == 200
        runtime = boto3.client("sagemaker-runtime", endpoint_url=endpoints["gpu-endpoint"],
                               region_name="us-east-1", **LOCAL_CREDENTIALS)
        answer = json.loads(runtime.invoke_endpoint(
            EndpointName="warmstart-local-gpu", ContentType="application/json",
            Body=json.dumps({"text": "I want a refund"}))["Body"].read())
        assert answer["intent"] == "refund_request"
        # the template's SSM parameter exists in moto
        ssm = boto3.client("ssm", endpoint_url=endpoints["moto"], region_name="us-east-1",
                           **LOCAL_CREDENTIALS)
        assert ssm.get_parameter(Name="/warmstart/echo/degradation-level")["Parameter"]["Value"] == "L0"
        assert any("echo-fn" in ln and "(PC 1)" in ln for ln in lines)
        assert any("SnapFunction" in ln and "strategy=snapstart" in ln for ln in lines)
        # the gateway invokes the alias the template's integration names
        resp = httpx.get(f"{endpoints['gateway']}/x?y=1", headers={"Cookie": "a=b"})
        assert resp.status_code == 201 and resp.json()["event"]["cookies"] == ["a=b"]
        client = boto3.client("lambda", endpoint_url=endpoints["lambda"], region_name="us-east-1",
                              config=Config(retries={"total_max_attempts": 1}), **LOCAL_CREDENTIALS)
        echo = json.loads(client.invoke(FunctionName="echo-fn", Qualifier="live")["Payload"].read())
        assert echo["init_type"] == "provisioned-concurrency"  # allocated at deploy
        assert echo["env"]["GREETING"] == "hello"
        snap = json.loads(client.invoke(FunctionName="SnapFunction", Qualifier="live")["Payload"].read())
        assert snap["init_type"] == "snap-start" and snap["after_restore"] == 1
        # metrics reach the moto server
        cw = boto3.client("cloudwatch", endpoint_url=endpoints["moto"], region_name="us-east-1",
                          **LOCAL_CREDENTIALS)
        now = dt.datetime.now(dt.UTC)
        values: list[float] = []
        deadline = time.monotonic() + 10
        while not values and time.monotonic() < deadline:
            time.sleep(0.2)
            values = cw.get_metric_data(
                MetricDataQueries=[{"Id": "i", "MetricStat": {"Metric": {
                    "Namespace": "AWS/Lambda", "MetricName": "Invocations",
                    "Dimensions": [{"Name": "FunctionName", "Value": "echo-fn"}]},
                    "Period": 60, "Stat": "Sum"}}],
                StartTime=now - dt.timedelta(minutes=5),
                EndTime=now + dt.timedelta(minutes=60))["MetricDataResults"][0]["Values"]  # 30x clock
        assert sum(values) == 1
        # WHEN Ctrl-C arrives
        children = descendants(proc.pid)
        assert len(children) >= 5  # moto, GPU endpoint, PC environment, SnapStart template + fork
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
        # THEN every process it started is gone
        assert_gone(sorted(children), timeout_s=10)
        assert "stopping" in proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()


def test_local_up_rejects_bad_input_with_a_clear_message(tmp_path):
    missing = _start("--template", str(tmp_path / "nope.json"), "--no-moto")
    _out, err = missing.communicate(timeout=30)
    assert missing.returncode == 2 and f"--template is not a file, got {tmp_path / 'nope.json'}" in err
    bad_env = _start("--template", str(TEMPLATE), "--env", "NOEQUALS", "--no-moto")
    _out, err = bad_env.communicate(timeout=30)
    assert bad_env.returncode == 2 and "is not KEY=VALUE" in err
    bad_period = _start("--template", str(TEMPLATE), "--warmer-period-s", "0", "--no-moto")
    _out, err = bad_period.communicate(timeout=30)
    assert bad_period.returncode == 2 and "--warmer-period-s must be a positive number, got 0" in err
    # a GPU endpoint that cannot load its model: the stack does not start, nothing is left over
    no_model = _start("--template", str(TEMPLATE), "--no-warmer",
                      env={"WARMSTART_MODEL_DIR": str(tmp_path / "no-model")})
    _out, err = no_model.communicate(timeout=60)
    assert no_model.returncode == 1 and "no model.onnx in" in err and "--no-gpu-endpoint" in err
    marker = f"WARMSTART_MODEL_DIR={tmp_path / 'no-model'}".encode()
    assert_gone([pid for pid in _pids_with_environ(marker) if pid != os.getpid()])
    empty = tmp_path / "cdk.out"
    empty.mkdir()
    no_templates = _start("--cdk-out", str(empty), "--no-moto")
    _out, err = no_templates.communicate(timeout=30)
    assert no_templates.returncode == 2 and "run `make synth` first" in err


def test_local_stack_python_api_with_an_extra_service(tmp_path):
    class Recorder:
        name = "recorder"
        endpoint = "memory://recorder"

        def __init__(self, stack):
            self.stack = stack
            self.events = []

        def start(self):
            self.events.append(("start", self.stack.endpoints()["lambda"]))

        def stop(self):
            self.events.append(("stop", None))

    made = []

    def factory(stack):
        made.append(Recorder(stack))
        return made[0]

    app = read_template(TEMPLATE)
    with open(tmp_path / "stack.log", "w") as log, LocalStack(
            app, LocalStackConfig(moto=False), extra_services=[factory], log_stream=log) as stack:
        assert set(stack.endpoints()) == {"lambda", "gateway", "recorder"}
        out = stack.lambda_client().invoke(FunctionName="http-fn", Qualifier="live",
                                           Payload=json.dumps({"rawPath": "/plain"}).encode())
        assert json.loads(out["Payload"].read()) == {"hello": "world"}
        pids = stack.emulator.process_ids()
        assert pids and all(alive(p) for p in pids)
    assert made[0].events[0][0] == "start" and made[0].events[-1] == ("stop", None)
    assert_gone(pids)


def test_local_up_json_prints_the_endpoints_document_on_stdout(tmp_path):
    endpoints_file = tmp_path / "endpoints.json"
    proc = _start("--template", str(TEMPLATE), "--no-moto", "--no-gpu-endpoint", "--no-tool-stub",
                  "--json", "--endpoints-file", str(endpoints_file))
    try:
        line = proc.stdout.readline()  # the only stdout line: the document, once ready
        assert line, f"local up exited early: {proc.stderr.read()}"
        document = json.loads(line)
        assert document == json.loads(endpoints_file.read_text())
        assert {"lambda", "gateway", "agents"} <= set(document)
        assert document["gateway"].startswith("http://127.0.0.1:")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0 and out == ""  # the status lines went to stderr
        assert "warmstart local: ready (Ctrl-C to stop)" in err and "stopping" in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
