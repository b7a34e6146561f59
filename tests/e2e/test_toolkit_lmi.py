"""The toolkit on Lambda Managed Instances (issue 22 item 3), under real concurrency: one
emulated LMI environment of three runtime processes (awslambdaric's LMI worker) serves three
requests of a toolkit agent at once.

Each process runs its own init with ``AWS_LAMBDA_INITIALIZATION_TYPE=lambda-managed-instances``
(before the fix the toolkit refused that value with a RuntimeConfigError and every init failed): the
init is pre-paid, so the web stack and the model are loaded before traffic and every request is
served locally, none as a cold start.
"""

from __future__ import annotations

import json
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from infra.local.emulator import ManagedInstancesConfig
from infra.local.errors import TooManyRequestsException
from infra.local.spec import AliasSpec, FunctionSpec

pytestmark = pytest.mark.slow
ROOT = Path(__file__).parents[2]


def http_get(path: str) -> bytes:
    return json.dumps({
        "version": "2.0", "routeKey": "$default", "rawPath": path.split("?")[0],
        "rawQueryString": path.partition("?")[2], "headers": {},
        "requestContext": {"http": {"method": "GET", "path": path.split("?")[0],
                                    "protocol": "HTTP/1.1", "sourceIp": "127.0.0.1",
                                    "userAgent": "test"},
                           "requestId": "r", "routeKey": "$default", "stage": "$default",
                           "timeEpoch": int(time.time() * 1000)},
        "isBase64Encoded": False}).encode()


def answer(result: Any) -> tuple[int, dict[str, Any], dict[str, str]]:
    payload = json.loads(result.payload)
    return payload["statusCode"], json.loads(payload["body"]), payload.get("headers", {})


def test_three_processes_of_one_lmi_environment_serve_a_toolkit_agent_at_once(
        make_emulator: Any, tmp_path: Path) -> None:
    # GIVEN a toolkit agent on one LMI environment of three runtime processes
    code = tmp_path / "code"
    code.mkdir()
    (code / "functions").symlink_to(ROOT / "functions")
    shutil.copy(Path(__file__).with_name("lmi_agent_app.py"), code / "lmi_agent.py")
    emu = make_emulator()
    emu.add_function(FunctionSpec(
        name="lmiagent", handler="lmi_agent.handler", code_dir=code, memory_mb=2048,
        timeout_s=30.0, runtime="python3.13", aliases=(AliasSpec("live", "1"),),
        environment={"WARMSTART_SLA_MS": "2000", "POWERTOOLS_SERVICE_NAME": "lmiagent"}),
        managed_instances=ManagedInstancesConfig(per_environment_max_concurrency=3,
                                                 min_execution_environments=1,
                                                 max_execution_environments=1,
                                                 scale_interval_s=3600.0))
    assert {e["state"] for e in emu.environments("lmiagent")} == {"idle"}  # all three inited
    status, first, headers = answer(emu.invoke("lmiagent", http_get("/v1/whoami"),
                                               qualifier="live"))
    assert status == 200 and headers.get("x-warmstart-path") == "local"
    assert first["init_type"] == "lambda-managed-instances" and first["model_state"] == "ready"
    # WHEN three requests are held in its three processes at once
    with ThreadPoolExecutor(3) as pool:
        futures = [pool.submit(emu.invoke, "lmiagent", http_get("/v1/whoami?hold=1"),
                               qualifier="live") for _ in range(3)]
        deadline = time.monotonic() + 60
        while sum(e["state"] == "busy" for e in emu.environments("lmiagent")) < 3:
            assert time.monotonic() < deadline, "the three requests never ran at once"
            time.sleep(0.02)
        # THEN a fourth is throttled (no cold start on LMI)
        with pytest.raises(TooManyRequestsException):
            emu.invoke("lmiagent", http_get("/v1/whoami"), qualifier="live")
        lmi = emu.function_state("lmiagent").lmi  # the environment's shared TMPDIR
        assert lmi is not None and len(lmi.environments) == 1
        tmp = Path(lmi.environments[0].tmp_dir)
        (tmp / "release").write_text("go")
        results = [f.result(timeout=60) for f in futures]
    answers = [answer(r) for r in results]
    # AND each was served locally, in its own process, by the model its own init loaded
    assert [status for status, _, _ in answers] == [200, 200, 200]
    assert {h.get("x-warmstart-path") for _, _, h in answers} == {"local"}
    assert len({body["pid"] for _, body, _ in answers}) == 3
    assert all(body["loaded_by"] == body["pid"] for _, body, _ in answers)
    assert {body["model_state"] for _, body, _ in answers} == {"ready"}
    assert {body["tmp"] for _, body, _ in answers} == {str(tmp)}
    assert not any(r.cold_start for r in results)
    # AND each process is its own toolkit environment (its own id and counters)
    assert len({body["environment_id"] for _, body, _ in answers}) == 3
    assert {body["init_type"] for _, body, _ in answers} == {"lambda-managed-instances"}
