"""Services of the local stack besides moto, the emulator and the gateway: the GPU endpoint
server and the warmer schedule. One place for ``warmstart local up``, replays and tests.

- :class:`GpuEndpointService` runs ``python -m infra.local.gpu_endpoint_main`` (the overflow
  model server ``python -m functions.gpu_endpoint``, SageMaker container contract, with
  SageMaker's ``InvokeEndpointWithResponseStream`` front end) on 127.0.0.1 with an ephemeral
  port, waits until ``GET /ping`` answers 200, and stops the process (and its process group) cleanly. As a
  *backing* service of :class:`~infra.local.stack.LocalStack` it adds
  ``WARMSTART_OVERFLOW_ENDPOINT_NAME`` and ``WARMSTART_OVERFLOW_ENDPOINT_URL`` to the agent's
  environment, so the handler's ``sagemaker-runtime`` client reaches it.
- :class:`ToolStubService` and :class:`LLMStubService` are the agents' local downstreams (the
  order service, the LLM): each fills the empty ``*_TOOL_URL`` / ``*_LLM_URLS`` variables of the
  functions with its URL.
- :func:`warmer_document` derives the warmer's configuration (``WARMSTART_WARMER_CONFIG``'s
  JSON) from the template: the warmer function's own config when the stack has one, else the
  managed aliases, strategies, provisioned-concurrency bounds and degradation parameters of
  its functions (every agent's alias), with ``cdk.json``'s ``warmstart`` config for each
  agent's bounds (matched by ``WARMSTART_AGENT_NAME``).
- :func:`warmer_service` builds :class:`warmers.schedule.WarmerSchedule` (the warmer's
  ``run_once`` every ``period_s`` seconds of the stack's clock, so a time scale shortens the
  period too) with boto3 clients pointed at the moto server and the emulator's Lambda API.

Locally the warmer uses the Lambda provisioned-concurrency actuator: moto's Application Auto
Scaling records scalable targets but does not drive Lambda, whereas the emulator's Lambda API
allocates the provisioned environments the plan asks for.

Example
-------
>>> app = read_template(Path("cdk.out/Warmstart.template.json"))             # doctest: +SKIP
>>> with LocalStack(app, LocalStackConfig(time_scale=60),
...                 backing_services=[gpu_endpoint_factory()],
...                 extra_services=[warmer_factory()]) as stack:                # doctest: +SKIP
...     stack.endpoints()   # moto, gpu-endpoint, lambda, gateway, warmer
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from functions.runtime.contract import environment as names
from functions.runtime.contract.warmer_document import (
    AliasEntry,
    DocumentError,
    EndpointEntry,
    WarmerDocument,
    read_entry,
)
from infra.local.spec import FunctionSpec, LocalApp

if TYPE_CHECKING:
    from infra.config import AgentConfig, WarmstartConfig
    from infra.local.endpoint_capacity import PlannedEndpoint
    from infra.local.stack import LocalStack
    from warmers.schedule import WarmerSchedule

REPO_ROOT = Path(__file__).resolve().parents[2]
AGENT_HANDLER = "functions.agent.handler.handler"
WARMER_HANDLER = "warmers.handler.handler"
DEFAULT_ENDPOINT_NAME = "warmstart-local-gpu"
#: The GPU endpoint's entry point: ``functions.gpu_endpoint``'s with the streaming front end
#: (`infra.local.gpu_endpoint_main`)
GPU_ENDPOINT_MODULE = "infra.local.gpu_endpoint_main"
#: first stdout line of ``python -m functions.gpu_endpoint``
GPU_URL_PREFIX = names.ENV_GPU_ENDPOINT_URL + "="
#: the warmer's defaults where neither the template nor cdk.json says (infra/constructs/warmer.py)
DEFAULT_CAP = 10
DEFAULT_BUDGET_USD_PER_HOUR = 1.0
#: metric history the local warmer reads (the moto server holds only this session's metrics)
DEFAULT_HISTORY_DAYS = 1.0


class ServiceStartError(RuntimeError):
    """A local service could not start or be configured; the message says which and why."""


# ---- GPU endpoint ------------------------------------------------------------------------------


def overflow_target(spec: FunctionSpec) -> bool:
    """True for functions that call the overflow endpoint: the reference agent's handler, or a
    function whose template environment names an overflow endpoint."""
    return spec.handler == AGENT_HANDLER or names.ENV_OVERFLOW_ENDPOINT_NAME in spec.environment


class GpuEndpointService:
    """The local GPU (overflow) endpoint server in its own process.

    Parameters
    ----------
    endpoint_name : str
        The SageMaker endpoint name answered on ``POST /endpoints/{name}/invocations``.
    model_dir : Path, optional
        Folder with ``model.onnx`` (default: the server's, ``WARMSTART_MODEL_DIR`` or
        ``layers/model/artifact``).
    functions : collection of str or callable, optional
        Function names (or a predicate on :class:`FunctionSpec`) whose environment gets the
        endpoint's name and URL; default :func:`overflow_target`.
    env : Mapping[str, str], optional
        Extra environment of the server process (e.g. ``WARMSTART_GPU_PROVIDERS``).
    enable_fault_api : bool
        Serve ``/_faults`` (tests and benchmarks only).
    start_timeout_s : float
        Real seconds to wait for the server (model load included) to answer ``/ping``.
    port : int
        0: a free port at the first start; a later ``start()`` (after ``stop()`` or ``kill()``)
        binds the same one, so the functions' ``WARMSTART_OVERFLOW_ENDPOINT_URL`` still holds.
    log_stream : file, optional
        Where the server's stderr goes (default: a temporary file, quoted on a failed start).
    python : str
        Interpreter (default: this one).
    planned : infra.local.endpoint_capacity.PlannedEndpoint, optional
        Serve as an inference component with planned capacity (0 copies at start; the
        warmer's plan sets them through SageMaker's API, ``warmers.actuators.SageMakerCapacityActuator``);
        its functions also get ``WARMSTART_OVERFLOW_INFERENCE_COMPONENT`` and
        ``WARMSTART_OVERFLOW_CAPACITY_PARAMETER``. None: always on, unlimited (as before).
    time_scale : float
        Clock seconds per real second of the stack: the planned provisioning delay is in clock
        seconds, the server waits ``delay / time_scale`` real seconds.

    Raises
    ------
    ValueError
        For an empty endpoint name, a non-positive timeout or time scale.
    """

    name = "gpu-endpoint"

    def __init__(self, endpoint_name: str = DEFAULT_ENDPOINT_NAME, *, model_dir: Path | None = None,
                 functions: Collection[str] | Callable[[FunctionSpec], bool] | None = None,
                 env: Mapping[str, str] | None = None, enable_fault_api: bool = False,
                 start_timeout_s: float = 60.0, log_stream: IO[str] | None = None,
                 python: str = sys.executable, port: int = 0,
                 planned: PlannedEndpoint | None = None, time_scale: float = 1.0) -> None:
        if not endpoint_name:
            raise ValueError("endpoint_name must be a non-empty string")
        if not time_scale > 0:
            raise ValueError(f"time_scale must be > 0, got {time_scale}")
        self.planned = planned
        self.time_scale = float(time_scale)
        if not start_timeout_s > 0:
            raise ValueError(f"start_timeout_s must be > 0, got {start_timeout_s}")
        self.endpoint_name = endpoint_name
        self.model_dir = model_dir
        if functions is None:
            self._targets: Callable[[FunctionSpec], bool] = overflow_target
        elif callable(functions):
            self._targets = functions
        else:
            names = frozenset(functions)
            self._targets = lambda spec: spec.name in names or spec.logical_id in names
        self._env = dict(env or {})
        self._faults = enable_fault_api
        self._timeout_s = start_timeout_s
        self._log = log_stream
        self._python = python
        self._port = port
        self._proc: subprocess.Popen[str] | None = None
        self._stderr: IO[Any] | None = None
        self._url: str | None = None
        #: real seconds from process start to the first ``/ping`` 200
        self.start_s: float | None = None

    @property
    def endpoint(self) -> str:
        if self._url is None:
            raise RuntimeError("the GPU endpoint is not started")
        return self._url

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def function_environment(self, spec: FunctionSpec) -> dict[str, str]:
        """``WARMSTART_OVERFLOW_ENDPOINT_NAME``/``_URL`` for the functions that overflow."""
        if self._url is None or not self._targets(spec):
            return {}
        env = {names.ENV_OVERFLOW_ENDPOINT_NAME: self.endpoint_name, names.ENV_OVERFLOW_ENDPOINT_URL: self._url}
        if self.planned is not None:
            env[names.ENV_OVERFLOW_INFERENCE_COMPONENT] = self.planned.inference_component
            env[names.ENV_OVERFLOW_CAPACITY_PARAMETER] = self.planned.capacity_parameter
        return env

    def targets(self, spec: FunctionSpec) -> bool:
        """Whether ``spec`` overflows to this endpoint."""
        return self._targets(spec)

    def capacity(self) -> dict[str, Any]:
        """The planned endpoint's ``GET /_capacity`` (copies, billed copy-seconds, history).

        Raises
        ------
        RuntimeError
            When the server is not planned or not started.
        OSError, ValueError
            When it does not answer a JSON object (:func:`~infra.local.endpoint_capacity.read_capacity`).
        """
        from infra.local.endpoint_capacity import read_capacity

        if self.planned is None:
            raise RuntimeError("the GPU endpoint has no planned capacity (always on)")
        return read_capacity(self.endpoint)

    def _command(self) -> list[str]:
        cmd = [self._python, "-m", GPU_ENDPOINT_MODULE, "--host", "127.0.0.1", "--port", str(self._port),
               "--endpoint-name", self.endpoint_name]
        if self.model_dir is not None:
            cmd += ["--model-dir", str(self.model_dir)]
        if self._faults:
            cmd.append("--enable-fault-api")
        if self.planned is not None:
            cmd += ["--inference-component", self.planned.inference_component, "--copies", "0",
                    "--concurrent-requests-per-copy", str(self.planned.concurrent_requests_per_copy),
                    "--provisioning-delay-s", f"{self.planned.real_delay_s(self.time_scale):g}"]
        return cmd

    def start(self) -> None:
        """Start the server and wait for ``GET /ping`` 200.

        Raises
        ------
        ServiceStartError
            If it exits, prints no URL or does not become healthy within ``start_timeout_s``
            (the message quotes its stderr); the process is stopped first.
        """
        if self._proc is not None:
            raise RuntimeError("the GPU endpoint is already started")
        env = dict(os.environ)
        env.update(self._env)
        env.setdefault("ORT_DISABLE_TELEMETRY", "1")
        env["PYTHONUNBUFFERED"] = "1"
        self._stderr = self._log or tempfile.TemporaryFile("w+", encoding="utf-8")  # noqa: SIM115
        started = time.monotonic()
        self._proc = subprocess.Popen(
            self._command(), cwd=str(REPO_ROOT), env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=self._stderr, text=True, start_new_session=True)
        try:
            url = self._read_url(started + self._timeout_s)
            self._wait_healthy(url, started + self._timeout_s)
        except ServiceStartError:
            self.stop()
            raise
        self._url = url
        self._port = int(url.rsplit(":", 1)[1])
        self.start_s = time.monotonic() - started

    def kill(self) -> None:
        """SIGKILL the server's process group, as a crash (fault injection); ``start()``
        brings it back on the same port. The endpoint URL is kept (nothing answers there)."""
        self._end(graceful=False)

    def _failure(self, what: str) -> ServiceStartError:
        code = self._proc.poll() if self._proc else None
        detail = ""
        if self._stderr is not None and self._log is None:
            try:
                self._stderr.seek(0)
                detail = self._stderr.read()[-800:].strip()
            except (OSError, ValueError):
                detail = ""
        status = f" (exited with status {code})" if code is not None else ""
        return ServiceStartError(
            f"the GPU endpoint (python -m {GPU_ENDPOINT_MODULE}) {what}{status}"
            + (f": {detail}" if detail else ""))

    def _read_url(self, deadline: float) -> str:
        assert self._proc is not None and self._proc.stdout is not None
        stdout = self._proc.stdout
        line: list[str] = []
        reader = threading.Thread(target=lambda: line.append(stdout.readline()), daemon=True)
        reader.start()
        reader.join(max(0.0, deadline - time.monotonic()))
        text = line[0].strip() if line else ""
        if not text.startswith(GPU_URL_PREFIX):
            raise self._failure(f"printed no URL within {self._timeout_s:g} s"
                                + (f" (got {text!r})" if text else ""))
        return text[len(GPU_URL_PREFIX):]

    def _wait_healthy(self, url: str, deadline: float) -> None:
        while True:
            if self._proc is not None and self._proc.poll() is not None:
                raise self._failure("exited before it was healthy")
            try:
                with urllib.request.urlopen(f"{url}/ping", timeout=2.0) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise self._failure(f"did not answer GET /ping with 200 within {self._timeout_s:g} s")
            time.sleep(0.05)

    def stop(self) -> None:
        """SIGTERM to its process group, SIGKILL after 5 s; idempotent."""
        self._url = None
        self._end(graceful=True)

    def _end(self, *, graceful: bool) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                _signal_group(proc, signal.SIGTERM if graceful else signal.SIGKILL)
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    _signal_group(proc, signal.SIGKILL)
                    proc.wait(timeout=5)
            if proc.stdout:
                proc.stdout.close()
        if self._stderr is not None and self._log is None:
            self._stderr.close()
        self._stderr = None


def _signal_group(proc: subprocess.Popen[str], sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)  # start_new_session: its pid is its process group
    except (ProcessLookupError, PermissionError):
        try:
            proc.send_signal(sig)
        except ProcessLookupError:
            pass


def gpu_endpoint_service(app: LocalApp, **kwargs: Any) -> GpuEndpointService:
    """A :class:`GpuEndpointService` for ``app``: the endpoint name the template's agent
    environment names (so the server answers the name the handler calls), else
    ``warmstart-local-gpu``; the model folder of the agent's ``WARMSTART_MODEL_DIR`` when it
    holds ``model.onnx``. ``kwargs`` go to :class:`GpuEndpointService` and win."""
    targets = [f for f in app.functions if overflow_target(f)]
    name = next((f.environment[names.ENV_OVERFLOW_ENDPOINT_NAME] for f in targets
                 if f.environment.get(names.ENV_OVERFLOW_ENDPOINT_NAME)), DEFAULT_ENDPOINT_NAME)
    model_dir = None
    for spec in targets:
        candidate = spec.environment.get(names.ENV_MODEL_DIR)
        if candidate and (Path(candidate) / "model.onnx").is_file():
            model_dir = Path(candidate)
            break
    kwargs.setdefault("endpoint_name", name)
    kwargs.setdefault("model_dir", model_dir)
    return GpuEndpointService(**kwargs)


def gpu_endpoint_factory(**kwargs: Any) -> Callable[[LocalStack], GpuEndpointService]:
    """A backing-service factory for :class:`~infra.local.stack.LocalStack`."""
    return lambda stack: gpu_endpoint_service(stack.app, **kwargs)


# ---- downstream stubs: the tool and the LLM ---------------------------------------------------

#: Function environment variables named ``*_TOOL_URL`` left empty by the deploy (the tool a
#: tool-calling agent calls, e.g. the lookup agent's ``LOOKUP_TOOL_URL``) get the local tool
#: stub's URL under ``warmstart local up``: the agent runs locally with a real HTTP tool.
TOOL_URL_SUFFIX = "_TOOL_URL"
#: Function environment variables named ``*_LLM_URLS`` (or ``*_LLM_URL``) left empty by the
#: deploy (the chat agent's ``CHAT_LLM_URLS``) get the local LLM stub's base URL under
#: ``warmstart local up``: the agent streams from a real OpenAI-compatible server.
LLM_URL_SUFFIXES = ("_LLM_URLS", "_LLM_URL")


def _empty(spec: FunctionSpec, suffixes: tuple[str, ...]) -> list[str]:
    """The names of ``spec``'s environment variables ending with one of ``suffixes`` that are
    empty."""
    return [key for key, value in spec.environment.items()
            if key.endswith(suffixes) and not str(value).strip()]


def wants_llm_stub(spec: FunctionSpec) -> bool:
    """Whether ``spec`` has an empty ``*_LLM_URLS`` / ``*_LLM_URL`` variable (local up starts
    the LLM stub only then)."""
    return bool(_empty(spec, LLM_URL_SUFFIXES))


class _StubService:
    """A local downstream stub (``start``/``stop``/``url``) as a backing service whose URL
    fills the functions' empty variables named ``*<suffix>``."""

    name: str
    suffixes: tuple[str, ...]

    def __init__(self, stub: Any) -> None:
        self.stub = stub
        self._started = False

    @property
    def endpoint(self) -> str:
        """The stub's base URL."""
        return str(self.stub.url)

    def function_environment(self, spec: FunctionSpec) -> dict[str, str]:
        """``{NAME: url}`` for each empty variable of ``spec`` with one of the suffixes."""
        return dict.fromkeys(_empty(spec, self.suffixes), self.endpoint)

    def start(self) -> None:
        self.stub.start()
        self._started = True

    def stop(self) -> None:
        if self._started:
            self.stub.stop()
            self._started = False


class ToolStubService(_StubService):
    """The local stand-in for agents' downstream HTTP tools (`infra.local.tool_stub.ToolStub`,
    base URL ``http://127.0.0.1:PORT``): fills empty ``*_TOOL_URL`` variables.

    Parameters
    ----------
    latency_ms : float
        Real wait of each tool answer, ms.
    port : int
        0: any free port.
    """

    name = "tool-stub"
    suffixes = (TOOL_URL_SUFFIX,)

    def __init__(self, *, latency_ms: float = 40.0, port: int = 0) -> None:
        from infra.local.tool_stub import ToolStub

        super().__init__(ToolStub(port=port, latency_ms=latency_ms))


class LLMStubService(_StubService):
    """The local stand-in for agents' LLM (`infra.local.llm_stub.LLMStub`: an OpenAI-compatible
    chat completions stream at the published token timing, base URL
    ``http://127.0.0.1:PORT/v1``): fills empty ``*_LLM_URLS`` / ``*_LLM_URL`` variables.

    Parameters
    ----------
    port : int
        0: any free port.
    kwargs
        For `LLMStub` (``ttft_ms``, ``tokens_per_s``, ``time_scale``).
    """

    name = "llm-stub"
    suffixes = LLM_URL_SUFFIXES

    def __init__(self, *, port: int = 0, **kwargs: Any) -> None:
        from infra.local.llm_stub import LLMStub

        super().__init__(LLMStub(port=port, **kwargs))


def tool_stub_factory(**kwargs: Any) -> Callable[[LocalStack], ToolStubService]:
    """A backing-service factory: a :class:`ToolStubService` (``kwargs`` go to it)."""
    return lambda stack: ToolStubService(**kwargs)


def llm_stub_factory(**kwargs: Any) -> Callable[[LocalStack], LLMStubService]:
    """A backing-service factory: a :class:`LLMStubService` (``kwargs`` go to it)."""
    return lambda stack: LLMStubService(**kwargs)


# ---- warmer ------------------------------------------------------------------------------------


def agent_config_for(spec: FunctionSpec, cdk: WarmstartConfig | None) -> AgentConfig | None:
    """The ``cdk.json`` agent a function runs: the one its ``WARMSTART_AGENT_NAME`` names, else
    (a template without it) the only agent with the function's handler."""
    if cdk is None:
        return None
    name = spec.environment.get(names.ENV_AGENT_NAME)
    if name:
        return cdk.agents.get(name)
    same = [a for a in cdk.agents.values() if a.handler == spec.handler]
    return same[0] if len(same) == 1 else None


def _function_strategy(spec: FunctionSpec, cdk: WarmstartConfig | None) -> str:
    if spec.snap_start:
        return "snapstart"
    if any(a.provisioned_concurrency for a in spec.aliases):
        return "provisioned"
    agent = agent_config_for(spec, cdk)
    if agent is not None and agent.strategy in ("ping", "none"):
        return agent.strategy
    return "none"


def managed_functions(app: LocalApp) -> list[FunctionSpec]:
    """Functions the local warmer manages: a ``live`` alias and one of: an agent's name
    (``WARMSTART_AGENT_NAME``) or the reference agent's handler, a degradation parameter in the
    environment, provisioned concurrency on an alias."""
    out = []
    for spec in app.functions:
        if spec.handler == WARMER_HANDLER or not any(a.name == "live" for a in spec.aliases):
            continue
        if (spec.handler == AGENT_HANDLER or names.ENV_AGENT_NAME in spec.environment
                or names.ENV_DEGRADATION_PARAMETER in spec.environment
                or any(a.provisioned_concurrency for a in spec.aliases)):
            out.append(spec)
    return out


def _template_warmer_document(app: LocalApp) -> dict[str, Any] | None:
    for spec in app.functions:
        raw = spec.environment.get(names.ENV_WARMER_CONFIG)
        if spec.handler == WARMER_HANDLER and raw:
            try:
                doc = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise ServiceStartError(
                    f"function {spec.name}: {names.ENV_WARMER_CONFIG} is not JSON ({exc})") from exc
            if not isinstance(doc, dict):
                raise ServiceStartError(f"function {spec.name}: {names.ENV_WARMER_CONFIG} is not an "
                                        "object")
            return doc
    return None


def warmer_document(app: LocalApp, *, cdk_config: WarmstartConfig | None = None,
                    functions: Collection[str] | None = None,
                    history_days: float = DEFAULT_HISTORY_DAYS,
                    endpoints: Collection[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """The warmer's configuration document (the JSON of ``WARMSTART_WARMER_CONFIG``) for ``app``.

    When the template has the warmer function, its own document is used. Otherwise one alias
    entry per :func:`managed_functions` (or per name in ``functions``): strategy from the
    template (SnapStart -> ``snapstart``, provisioned concurrency on the alias ->
    ``provisioned``; else ``cdk.json``'s ``ping``/``none`` for the function's agent, else
    ``none``), memory from the function, floor and cap from ``cdk.json``'s
    ``agents.<name>.provisioned_concurrency`` for an agent's function, with its ``objective``
    (else floor = the template's provisioned concurrency, cap = max(floor,
    ``warmer.cap`` or 10)), both at most the function's reserved concurrency (Lambda refuses
    more provisioned concurrency), the degradation parameter from
    ``WARMSTART_DEGRADATION_PARAMETER``, the available concurrency from reserved concurrency.

    Either way the local document uses the ``lambda`` actuator (see the module docstring) and
    at most ``history_days`` of history.

    Parameters
    ----------
    app : LocalApp
    cdk_config : infra.config.WarmstartConfig, optional
        ``cdk.json``'s ``warmstart`` config (agent bounds, warmer options).
    functions : collection of str, optional
        Manage exactly these functions (names or logical IDs).
    history_days : float
        Days of 1-minute metrics each run reads (1/24..14).
    endpoints : collection of mapping
        The local GPU endpoint's ``endpoints`` entries
        (:meth:`infra.local.endpoint_capacity.PlannedEndpoint.warmer_entry`), replacing the
        document's (the deployed endpoint is not the local one).

    Returns
    -------
    dict
        The document's JSON (``WarmerDocument.to_json``), for
        :meth:`warmers.config.WarmerConfig.from_dict`.

    Raises
    ------
    ServiceStartError
        If no function qualifies, a named function is unknown or has no ``live`` alias, or the
        template's warmer document is not JSON or not what the contract allows
        (`functions.runtime.contract.warmer_document.WarmerDocument`, naming the field).
    """
    options = dict(cdk_config.warmer.options) if cdk_config is not None else {}
    doc = None if functions is not None else _template_warmer_document(app)
    if doc is None:
        if functions is not None:
            try:
                specs = [app.function(name) for name in functions]
            except KeyError as exc:
                raise ServiceStartError(f"warmer: {exc.args[0]}") from exc
            for spec in specs:
                if not any(a.name == "live" for a in spec.aliases):
                    raise ServiceStartError(f"warmer: function {spec.name} has no 'live' alias")
        else:
            specs = managed_functions(app)
        if not specs:
            raise ServiceStartError(
                "warmer: no function to manage (none has a 'live' alias with the agent's handler, "
                f"{names.ENV_DEGRADATION_PARAMETER} or provisioned concurrency); run with --no-warmer")
        aliases = []
        for spec in specs:
            pc = max((a.provisioned_concurrency for a in spec.aliases if a.name == "live"), default=0)
            floor, cap = pc, max(pc, int(options.get("cap", DEFAULT_CAP)))
            objective = "cost"
            agent = agent_config_for(spec, cdk_config)
            if agent is not None and agent.provisioned_concurrency is not None:
                floor, cap = agent.provisioned_concurrency.min, agent.provisioned_concurrency.max
                objective = agent.provisioned_concurrency.objective
            if spec.reserved_concurrency is not None:  # Lambda refuses PC above it
                cap = min(cap, spec.reserved_concurrency)
                floor = min(floor, cap)
            aliases.append(AliasEntry(
                function_name=spec.name, alias="live",
                strategy=_function_strategy(spec, cdk_config), memory_mb=spec.memory_mb,
                floor=floor, cap=cap,
                budget_usd_per_hour=float(options.get("budget_usd_per_hour",
                                                      DEFAULT_BUDGET_USD_PER_HOUR)),
                degradation_parameter=spec.environment.get(names.ENV_DEGRADATION_PARAMETER),
                available_concurrency=spec.reserved_concurrency, objective=objective))
        document = WarmerDocument(aliases=tuple(aliases),
                                  lead_min=int(options.get("lead_min", 15)),
                                  history_days=float(options.get("history_days", history_days)))
    else:
        try:
            document = WarmerDocument.from_dict(doc)
        except DocumentError as exc:
            raise ServiceStartError(f"warmer: the template's {names.ENV_WARMER_CONFIG}: {exc}"
                                    ) from exc
    try:
        # the local actuators; the deployed endpoint's plan needs the deployed endpoint, the
        # local one's capacity is set through SageMaker's API (moto's Application Auto Scaling
        # lacks its dimension)
        document = document._replace(
            actuator="lambda",
            endpoints=tuple(read_entry(EndpointEntry, e, f"endpoints[{i}]")
                            for i, e in enumerate(endpoints)),
            endpoint_actuator="sagemaker" if endpoints else document.endpoint_actuator,
            history_days=min(document.history_days, history_days)).check()
    except DocumentError as exc:
        raise ServiceStartError(f"warmer: {exc}") from exc
    return document.to_json()


def warmer_service(stack: LocalStack, *, document: Mapping[str, Any] | None = None,
                   cdk_config: WarmstartConfig | None = None,
                   functions: Collection[str] | None = None, period_s: float = 60.0,
                   history_days: float = DEFAULT_HISTORY_DAYS,
                   schedule_type: type[WarmerSchedule] | None = None) -> WarmerSchedule:
    """The warmer on its schedule against the stack (CloudWatch/SSM/App Auto Scaling on moto,
    Lambda on the emulator), every ``period_s`` seconds of the stack's clock.

    ``document`` replaces :func:`warmer_document`'s (used as given). ``schedule_type`` is
    :class:`warmers.schedule.WarmerSchedule` or a subclass with its constructor (e.g. the
    replay's, which records each run's plans); it is built, not started.

    Raises
    ------
    ServiceStartError
        Without a moto server (the warmer reads CloudWatch), or when the document cannot be
        made or is invalid (:func:`warmer_document`, ``warmers.config.WarmerConfigError``).
    """
    from warmers.config import WarmerConfig, WarmerConfigError, boto_config
    from warmers.runner import WarmerClients
    from warmers.schedule import WarmerSchedule

    if stack.moto is None:
        raise ServiceStartError("the warmer needs the moto server (CloudWatch, SSM); "
                                "run without --no-moto or with --no-warmer")
    app = stack.deployed_app or stack.app
    doc = dict(document) if document is not None else warmer_document(
        app, cdk_config=cdk_config, functions=functions, history_days=history_days)
    try:
        config = WarmerConfig.from_dict(doc, region=stack.config.region)
    except WarmerConfigError as exc:
        raise ServiceStartError(f"warmer: {exc}") from exc
    sagemaker = None
    if config.endpoints:  # the planned local endpoint answers SageMaker's control plane
        from infra.local.endpoint_capacity import sagemaker_client

        url = stack.endpoints().get(GpuEndpointService.name)
        if not url or not url.startswith("http"):
            raise ServiceStartError("warmer: the document plans an endpoint but the local GPU "
                                    "endpoint is not running")
        sagemaker = sagemaker_client(url, stack.config.region)
    clients = WarmerClients(
        cloudwatch=stack.client("cloudwatch", config=boto_config()),
        lambda_=stack.client("lambda", config=boto_config()),
        application_autoscaling=stack.client("application-autoscaling", config=boto_config()),
        ssm=stack.client("ssm", config=boto_config()), sagemaker=sagemaker)
    return (schedule_type or WarmerSchedule)(config, clients, clock_time=stack.clock.time,
                                             period_s=period_s)


def warmer_factory(**kwargs: Any) -> Callable[[LocalStack], WarmerSchedule]:
    """An extra-service factory for :class:`~infra.local.stack.LocalStack` (see
    :func:`warmer_service` for ``kwargs``)."""
    return lambda stack: warmer_service(stack, **kwargs)
