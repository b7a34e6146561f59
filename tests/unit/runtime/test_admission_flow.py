"""serve_paths(): decide, run the path, fall back inside the SLA when LOCAL fails."""

from __future__ import annotations

import pytest

from functions.runtime.admission import EnvState, ModelState, Path, Reason, RequestInfo
from functions.runtime.admission.flow import LocalUnavailable
from functions.runtime.degradation import DegradationResponse
from tests.unit.runtime.admission_paths import serve_calls as serve

T0 = 1_700_000_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def _req(degradable: bool = True, tier: str = "P0") -> RequestInfo:
    return RequestInfo("/v1/intent", tier, 2000.0, T0, degradable)  # type: ignore[arg-type]


def test_local_ready_is_served_locally_with_timings() -> None:
    clock = Clock()

    def local(wait_ms: float) -> dict:
        assert wait_ms == 0  # model ready: no wait
        clock.now += 40
        return {"intent": "x"}

    out = serve(_req(), env=lambda: EnvState(ModelState.READY), level="L0", clock_ms=clock,
                run_local=local, run_degraded=lambda: pytest.fail("not degraded"))
    assert (out.path, out.response, out.failures) == (Path.LOCAL, {"intent": "x"}, ())
    assert out.timings_ms["local"] == 40
    assert out.headers()["X-Warmstart-Path"] == "local"
    assert "local;dur=40.0" in out.headers()["Server-Timing"]
    assert out.failure_tag is None


def test_local_not_ready_in_time_falls_back_to_degraded_within_budget() -> None:
    """GIVEN the estimate said the preload would finish, WHEN it does not (LocalUnavailable
    after waiting), THEN the request is answered degraded, tagged timeout_resource."""
    clock = Clock()

    def local(wait_ms: float) -> dict:
        assert wait_ms == 2000 - 50 - 10  # the degrade reserve is kept
        clock.now += wait_ms  # waited the whole allowance: the model is still not ready
        raise LocalUnavailable("model not ready after waiting")

    out = serve(_req(), env=lambda: EnvState(ModelState.LOADING, 1000.0, 50.0, 10.0),
                level="L0", clock_ms=clock, run_local=local,
                run_degraded=lambda: {"intent": "x", "degraded": True})
    assert out.path is Path.DEGRADE
    assert [d.path for d in out.decisions] == [Path.LOCAL, Path.DEGRADE]
    assert out.decisions[1].reason is Reason.NO_FULL_PATH_FITS
    assert out.failure_tag == "timeout_resource"
    assert clock.now - T0 <= 2000


def test_local_failure_without_degraded_answer_sheds_with_retry_after() -> None:
    clock = Clock()

    def local(wait_ms: float) -> dict:
        assert wait_ms == 2000 - 50  # nothing to fall back to: no reserve
        clock.now += wait_ms
        raise LocalUnavailable("no")

    out = serve(_req(degradable=False), env=lambda: EnvState(ModelState.LOADING, 500.0, 50.0),
                level="L0", clock_ms=clock, run_local=local, request_id="rid")
    assert out.path is Path.SHED
    assert isinstance(out.response, DegradationResponse)
    assert out.response.status_code == 503 and out.response.headers["Retry-After"] == "1"
    assert out.response.body["request_id"] == "rid"
    assert out.failure_tag == "timeout_resource"


def test_level_outcomes_do_not_run_any_path() -> None:
    clock = Clock()
    out = serve(_req(tier="P2"), env=lambda: EnvState(ModelState.READY), level="L1",
                clock_ms=clock, run_local=lambda b: pytest.fail("P2 is off at L1"),
                run_degraded=lambda: pytest.fail("no"), feature="report")
    assert out.path is Path.SHED and out.response.body["error"] == "feature_disabled"
    out = serve(_req(), env=lambda: EnvState(ModelState.READY), level="L2", clock_ms=clock,
                run_local=lambda b: pytest.fail("L2 degrades"),
                run_degraded=lambda: {"degraded": True})
    assert out.path is Path.DEGRADE and out.header_path == "degraded"


def test_admission_modules_import_only_the_standard_library() -> None:
    """The request path's decision code must not drag boto3/numpy/fastapi into the init phase."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "import functions.runtime.admission.flow, functions.runtime.overflow\n"
        "import functions.gpu_endpoint.server\n"
        "heavy = ('boto3', 'botocore', 'numpy', 'onnxruntime', 'fastapi', 'aws_cdk', 'infra')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.strip() == "[]"
