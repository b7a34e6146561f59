"""The local stack's GPU endpoint and warmer services, end to end.

Real processes throughout: the GPU endpoint server (``python -m functions.gpu_endpoint``, the
real ONNX model), a moto server, the emulator's execution environments, the warmer's
``run_once`` on its schedule against them, and the real boto3 clients (sagemaker-runtime,
lambda, cloudwatch, ssm). The probe function is written by the test; it reads its environment
the way the agent's toolkit does (``boto3.client("ssm")``, the overflow endpoint variables).
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from infra.local.services import (
    DEFAULT_ENDPOINT_NAME,
    GpuEndpointService,
    ServiceStartError,
    gpu_endpoint_factory,
    warmer_factory,
)
from infra.local.spec import AliasSpec, FunctionSpec, LocalApp
from infra.local.stack import LocalStack, LocalStackConfig
from tests.e2e.conftest import alive, assert_gone

REPO = Path(__file__).resolve().parents[2]
PARAMETER = "/warmstart/probe/degradation-level"
TIME_SCALE = 60.0  # one real second is one clock minute: the warmer runs every real second
HOLD_S = 1.2  # real seconds an invocation holds its environment: 72 clock s, over a minute

pytestmark = pytest.mark.timeout(90)

PROBE = '''
import json
import os
import time

INIT_TYPE = os.environ.get("AWS_LAMBDA_INITIALIZATION_TYPE")
KEYS = ("WARMSTART_OVERFLOW_ENDPOINT_NAME", "WARMSTART_OVERFLOW_ENDPOINT_URL",
        "WARMSTART_DEGRADATION_PARAMETER", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_SSM")


def handler(event, context):
    out = {"init_type": INIT_TYPE, "pid": os.getpid(), "env": {k: os.environ.get(k) for k in KEYS}}
    if event.get("sleep_s"):
        time.sleep(float(event["sleep_s"]))
    if event.get("level"):
        from functions.runtime.degradation_level import DegradationLevelReader

        reader = DegradationLevelReader(os.environ["WARMSTART_DEGRADATION_PARAMETER"], ttl_s=0)
        out["level"] = str(reader.level())
    if event.get("overflow"):
        import boto3

        client = boto3.client("sagemaker-runtime",
                              endpoint_url=os.environ["WARMSTART_OVERFLOW_ENDPOINT_URL"])
        resp = client.invoke_endpoint(EndpointName=os.environ["WARMSTART_OVERFLOW_ENDPOINT_NAME"],
                                      Body=json.dumps({"text": event["overflow"]}),
                                      ContentType="application/json")
        out["overflow"] = json.loads(resp["Body"].read())
    return out
'''


def _probe_app(tmp_path: Path, *, provisioned: int = 0, reserved: int | None = None) -> LocalApp:
    code = tmp_path / "probe"
    code.mkdir()
    (code / "probe.py").write_text(PROBE)
    spec = FunctionSpec(
        name="probe", handler="probe.handler", code_dir=code, timeout_s=10,
        reserved_concurrency=reserved,
        environment={"PYTHONPATH": str(REPO), "WARMSTART_DEGRADATION_PARAMETER": PARAMETER,
                     "WARMSTART_OVERFLOW_ENDPOINT_NAME": "from-the-template"},
        aliases=(AliasSpec("live", "1", provisioned),))
    return LocalApp((spec,), None, (), {PARAMETER: "L0"})


def _invoke(lam: Any, payload: dict[str, Any]) -> tuple[dict[str, Any], str]:
    out = lam.invoke(FunctionName="probe", Qualifier="live", LogType="Tail",
                     Payload=json.dumps(payload).encode())
    assert "FunctionError" not in out, out["Payload"].read()
    return json.loads(out["Payload"].read()), base64.b64decode(out["LogResult"]).decode()


def test_gpu_endpoint_runs_in_the_stack_and_the_function_reaches_it(tmp_path: Path) -> None:
    # GIVEN the local stack with the GPU endpoint as a backing service of the probe function
    app = _probe_app(tmp_path)
    with open(tmp_path / "stack.log", "w") as log, LocalStack(
            app, LocalStackConfig(), backing_services=[gpu_endpoint_factory(functions=["probe"])],
            log_stream=log) as stack:
        gpu = next(s for s in stack.services if isinstance(s, GpuEndpointService))
        # the server answers the endpoint name the template gives the function
        assert gpu.endpoint_name == "from-the-template"
        assert stack.endpoints()["gpu-endpoint"] == gpu.endpoint
        pid = gpu.pid
        print(f"\ngpu endpoint: /ping 200 after {gpu.start_s:.2f} s (process start, model load)")
        assert pid is not None and alive(pid)
        # WHEN the real boto3 sagemaker-runtime client invokes the endpoint
        runtime = stack.client("sagemaker-runtime")
        resp = runtime.invoke_endpoint(EndpointName=gpu.endpoint_name, ContentType="application/json",
                                       Body=json.dumps({"text": "I want a refund for my order"}))
        body = json.loads(resp["Body"].read())
        # THEN the model answers in the agent's format
        assert body["intent"] == "refund_request" and body["model"] == "all-MiniLM-L6-v2-int8"
        assert body["degraded"] is False
        # an unknown endpoint name is refused as SageMaker does
        with pytest.raises(runtime.exceptions.ValidationError):
            runtime.invoke_endpoint(EndpointName="other", Body=b'{"text": "hi"}',
                                    ContentType="application/json")
        # AND the function's environment points at it (and at moto, never at AWS)
        out, _ = _invoke(stack.lambda_client(), {"overflow": "where is my parcel"})
        assert out["env"]["WARMSTART_OVERFLOW_ENDPOINT_URL"] == gpu.endpoint
        assert out["env"]["WARMSTART_OVERFLOW_ENDPOINT_NAME"] == "from-the-template"
        assert out["env"]["AWS_ENDPOINT_URL_SSM"] == stack.endpoints()["moto"]
        assert out["overflow"]["intent"] == "check_order_status"
        # the degradation parameter of the template exists in moto for the toolkit's reader
        level, _ = _invoke(stack.lambda_client(), {"level": True})
        assert level["level"] == "L0"
        env_pids = stack.emulator.process_ids()
    # WHEN the stack stops THEN the server and the environments are gone
    assert_gone([pid, *env_pids])


def test_gpu_endpoint_that_cannot_start_says_why_and_leaves_nothing(tmp_path: Path) -> None:
    service = GpuEndpointService(model_dir=tmp_path / "no-model", start_timeout_s=30)
    with pytest.raises(ServiceStartError, match="no model.onnx in"):
        service.start()
    assert service.pid is None
    with pytest.raises(RuntimeError, match="not started"):
        _ = service.endpoint
    assert service.function_environment(_probe_app(tmp_path).functions[0]) == {}
    with pytest.raises(ValueError, match="endpoint_name"):
        GpuEndpointService("")
    assert GpuEndpointService().endpoint_name == DEFAULT_ENDPOINT_NAME


def _publish_history(cloudwatch: Any, *, end_s: float, minutes: int, concurrency: float) -> None:
    """``minutes`` of steady load before ``end_s`` as AWS/Lambda metrics of probe:live."""
    data = []
    for k in range(minutes):
        stamp = dt.datetime.fromtimestamp(end_s - (minutes - k) * 60.0, tz=dt.UTC)
        for dims in ([{"Name": "FunctionName", "Value": "probe"}],
                     [{"Name": "FunctionName", "Value": "probe"},
                      {"Name": "Resource", "Value": "probe:live"}]):
            for name, value, n, unit in (("ConcurrentExecutions", concurrency, 1, "Count"),
                                         ("Invocations", 1.0, 120, "Count"),
                                         ("Duration", 900.0, 120, "Milliseconds")):
                data.append({"MetricName": name, "Dimensions": dims, "Timestamp": stamp,
                             "Unit": unit, "StatisticValues": {
                                 "SampleCount": n, "Sum": value * n, "Minimum": value,
                                 "Maximum": value}})
    for start in range(0, len(data), 20):
        cloudwatch.put_metric_data(Namespace="AWS/Lambda", MetricData=data[start:start + 20])


def _until(predicate: Any, timeout_s: float, what: str) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if predicate():
            return time.monotonic()
        time.sleep(0.02)
    raise AssertionError(f"{what} not within {timeout_s} s")


def test_warmer_plans_provisioned_concurrency_from_load_and_publishes_the_level(tmp_path: Path) -> None:
    # GIVEN the stack at 60x with the warmer every clock minute; probe:live has PC 1 from the
    # template (the floor) and reserved concurrency 2 (its available concurrency)
    app = _probe_app(tmp_path, provisioned=1, reserved=2)
    config = LocalStackConfig(time_scale=TIME_SCALE, pc_allocation_delay_s=60.0,
                              metrics_flush_interval_s=0.25)
    with open(tmp_path / "stack.log", "w") as log, LocalStack(
            app, config, extra_services=[warmer_factory(history_days=1 / 24)],
            log_stream=log) as stack:
        lam, ssm = stack.lambda_client(), stack.client("ssm")
        warmer = next(s for s in stack.services if s.name == "warmer")
        assert stack.endpoints()["warmer"].startswith("schedule:")

        def pc() -> dict[str, Any]:
            return lam.get_provisioned_concurrency_config(FunctionName="probe", Qualifier="live")

        _until(lambda: warmer.runs >= 1, 10, "a first warmer run")
        assert pc()["RequestedProvisionedConcurrentExecutions"] == 1  # no metrics yet: the floor
        # WHEN an hour of load at concurrency 2 is in CloudWatch
        published = time.monotonic()
        _publish_history(stack.client("cloudwatch"), end_s=stack.clock.time(), minutes=60,
                         concurrency=2.0)
        # THEN the warmer's plan raises provisioned concurrency on the alias, and it allocates
        planned = _until(lambda: pc()["RequestedProvisionedConcurrentExecutions"] == 2, 20,
                         "PC 2 requested by the warmer")
        runs = warmer.runs  # the plan is applied inside a run; read it once that run is over
        _until(lambda: warmer.runs > runs, 10, "the warmer run to finish")
        plan = next(p for p in warmer.last_plans if p.key == "probe:live")
        assert plan.action == "provisioned" and plan.provisioned_concurrency == 2, plan.reason
        ready = _until(lambda: pc()["Status"] == "READY"
                       and pc()["AllocatedProvisionedConcurrentExecutions"] == 2, 20, "PC READY")
        print(f"\nwarmer: load published -> PC requested {planned - published:.2f} s, "
              f"requested -> READY {ready - planned:.2f} s (allocation delay 60 clock s = "
              f"{60 / TIME_SCALE:.2f} s); plan: {plan.reason}")
        # the history's use (mean 1.8 of 2, peak 2) is below every level's threshold
        assert ssm.get_parameter(Name=PARAMETER)["Parameter"]["Value"] == "L0"
        # AND two concurrent requests are served by pre-initialized environments, no init
        with ThreadPoolExecutor(2) as pool:
            answers = list(pool.map(lambda _: _invoke(lam, {"sleep_s": 0.5}), range(2)))
        assert {a["init_type"] for a, _ in answers} == {"provisioned-concurrency"}
        assert len({a["pid"] for a, _ in answers}) == 2
        assert all("REPORT" in tail and "Init Duration" not in tail for _, tail in answers)
        # WHEN the alias runs at its available concurrency (2 of 2): rounds of two concurrent
        # invocations, each longer than a clock minute (HOLD_S), so that a minute's Invocations x
        # Duration (Little's law: the warmer's proof that the use was sustained) shows the full
        # use its ConcurrentExecutions Maximum shows. Short invocations cannot show it at 60x:
        # the client's gap between two invocations (tens of real ms) is seconds of clock time
        # there, and the minute's mean depends on how many invocations happen to end in it.
        # Each invocation reads the level through the function's toolkit after its sleep.
        levels: list[str] = []

        def at_full_use() -> bool:
            with ThreadPoolExecutor(2) as pool:
                outs = list(pool.map(lambda _: _invoke(lam, {"sleep_s": HOLD_S, "level": True}),
                                     range(2)))
            levels.extend(out["level"] for out, _ in outs)
            return "L3" in levels[-2:]

        _until(at_full_use, 45, "degradation level L3 read by the function")
        # THEN the warmer wrote L3 to moto's SSM (nothing else writes it; it was L0 before the
        # load) and the function's toolkit read it from there. The first round may already
        # read L3: a minute holding the two short requests above and the first round's starts
        # shows full use by Little's law too (4 starts x 30 clock s of Duration in 60 s).
        print(f"levels read by the function, round by round: {levels}")
        assert "L3" in levels[-2:], levels
        assert warmer.errors == 0


def test_the_warmer_sizes_a_planned_gpu_endpoint_and_publishes_what_serves(tmp_path: Path) -> None:
    """The local chain of a planned overflow endpoint: the warmer's plan (its floor: 1 copy)
    goes to the GPU endpoint server through SageMaker's API (the real boto3 ``sagemaker``
    client), the copy is provisioning for the provisioning delay and then in service, the
    warmer publishes each state to moto's SSM, and the function gets the variables its
    toolkit reads; the server bills the copy from the request."""
    from infra.local.endpoint_capacity import (
        INITIAL_CAPACITY,
        PlannedEndpoint,
        create_capacity_parameter,
    )
    from infra.local.services import warmer_document, warmer_service

    app = _probe_app(tmp_path)
    # 120 clock s at 60x: the copy is in service 2 real s after the warmer asks for it
    planned = PlannedEndpoint(floor=1, cap=1, provisioning_delay_s=120.0,
                              concurrent_requests_per_copy=2)
    config = LocalStackConfig(time_scale=TIME_SCALE, metrics_flush_interval_s=0.25)
    with open(tmp_path / "stack.log", "w") as log, LocalStack(
            app, config, log_stream=log, backing_services=[gpu_endpoint_factory(
                functions=["probe"], planned=planned, time_scale=TIME_SCALE)]) as stack:
        gpu = next(s for s in stack.services if isinstance(s, GpuEndpointService))
        ssm = stack.client("ssm")
        assert create_capacity_parameter(ssm, planned)
        assert not create_capacity_parameter(ssm, planned)  # it exists: kept

        def published() -> dict[str, Any]:
            raw = ssm.get_parameter(Name=planned.capacity_parameter)["Parameter"]["Value"]
            return dict(json.loads(raw))

        assert published() == json.loads(INITIAL_CAPACITY)
        doc = warmer_document(app, history_days=1 / 24,
                              endpoints=[planned.warmer_entry(gpu.endpoint_name, ["probe:live"])])
        warmer = warmer_service(stack, document=doc, period_s=60.0)
        # WHEN the warmer runs: the floor asks for a copy, which is still provisioning
        warmer.run_now()
        assert gpu.capacity()["desired"] == 1 and gpu.capacity()["in_service"] == 0
        assert published()["state"] == "provisioning"
        out, _ = _invoke(stack.lambda_client(), {})
        assert out["env"]["WARMSTART_OVERFLOW_ENDPOINT_NAME"] == gpu.endpoint_name
        # THEN after the provisioning delay the next run publishes it in service
        _until(lambda: gpu.capacity()["in_service"] == 1, 10, "the copy in service")
        warmer.run_now()
        assert published()["state"] == "in_service" and published()["capacity"] == 1
        assert gpu.capacity()["billed_copy_s"] >= 2.0 * 0.9  # billed from the request
