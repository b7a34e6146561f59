"""The local stack: moto server, Lambda emulator (+ REST API), gateway, and any extra service.

A :class:`LocalStack` is an ordered list of managed services, each with ``start()``,
``stop()`` and ``endpoint``. They start in order and stop in reverse; if one fails to start,
the ones already started are stopped. The order is: moto server (and the template's SSM
parameters created in it), ``backing_services`` (what the functions call, e.g. the GPU endpoint:
started before the emulator so that their endpoints, given by ``function_environment(spec)``,
are in every execution environment from the first init), the emulator with its Lambda API, the
gateway, a streaming function URL per streaming function (`streaming_functions`), then
``extra_services`` (e.g. the warmer schedule). Each of the last two lists holds
:class:`Service` objects or factories that receive the stack (to read the endpoints of the
services before them). :mod:`infra.local.services` has the GPU endpoint and warmer services.

Function environments, lowest precedence first: local endpoints and credentials (moto for every
AWS service, the emulator for Lambda), the template's variables, the backing services'
variables, ``LocalStackConfig.env_overrides``.

Example
-------
>>> app = read_template(Path("cdk.out/WarmstartStack.template.json"))      # doctest: +SKIP
>>> with LocalStack(app, LocalStackConfig(time_scale=60)) as stack:          # doctest: +SKIP
...     stack.lambda_client().invoke(FunctionName="AgentFunction", Qualifier="live")
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any, Protocol, Self, runtime_checkable

from infra.local.api import LambdaApiServer
from infra.local.clock import Clock, ScaledClock, SystemClock
from infra.local.emulator import Emulator, EmulatorConfig, ManagedInstancesConfig
from infra.local.gateway import FunctionUrlGateway, Gateway
from infra.local.metrics import CloudWatchMetrics, MetricsSink, NullMetrics
from infra.local.spec import FunctionSpec, LocalApp

_LOG = logging.getLogger("warmstart.local.stack")
LOCAL_CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
#: The wrapper that starts the toolkit's streaming runtime client (``infra.config``'s
#: ``STREAM_EXEC_WRAPPER``, set by the deploy on every streaming agent): a function whose
#: ``AWS_LAMBDA_EXEC_WRAPPER`` names it streams, and the stack gives its ``live`` alias a
#: function URL (``InvokeMode: RESPONSE_STREAM``), as the deploy does.
STREAM_WRAPPER_SUFFIX = "functions/runtime/warmstart-stream"
FUNCTION_URL_ALIAS = "live"


def streaming_functions(app: LocalApp) -> list[FunctionSpec]:
    """The functions that get a streaming function URL: a ``live`` alias and the streaming
    runtime's wrapper in ``AWS_LAMBDA_EXEC_WRAPPER``."""
    return [spec for spec in app.functions
            if str(spec.environment.get("AWS_LAMBDA_EXEC_WRAPPER", "")).endswith(STREAM_WRAPPER_SUFFIX)
            and any(a.name == FUNCTION_URL_ALIAS for a in spec.aliases)]


class Service(Protocol):
    """A managed part of the local stack."""

    name: str

    @property
    def endpoint(self) -> str: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...


ServiceFactory = Callable[["LocalStack"], Service]


@runtime_checkable
class FunctionEnvironmentProvider(Protocol):
    """A backing service that adds variables to functions' environments (e.g. its URL)."""

    def function_environment(self, spec: FunctionSpec) -> Mapping[str, str]: ...


@dataclass(frozen=True)
class LocalStackConfig:
    """Settings of ``warmstart local up`` and of :class:`LocalStack`.

    Parameters
    ----------
    time_scale : float
        Emulated seconds per real second (>0); >1 shortens idle timeouts, allocation delays
        and metric minutes for replays.
    idle_timeout_s, pc_allocation_delay_s : float
        Clock seconds (see :class:`~infra.local.emulator.EmulatorConfig`).
    account_concurrency_limit : int
    metrics_flush_interval_s : float
        Real seconds between metric publications to the moto server.
    moto : bool
        Start a moto server (CloudWatch, SSM, ...) and publish metrics to it.
    lambda_port, gateway_port, moto_port : int
        0 = ephemeral.
    env_overrides : Mapping[str, str]
        Added to every function's environment (over the template's and the services').
    region : str
    freeze_idle : bool
        Freeze idle execution environments between invocations, as Lambda does (see
        :class:`~infra.local.emulator.EmulatorConfig`); default on.
    own_layers : bool
        Run each function described with layers (a bundled template's) with its runtime's
        CPython, its own code and its layers only, as Lambda does
        (:mod:`infra.local.function_runtime`); default on. Off (``local up --venv``, the
        escape hatch for a machine without that CPython): every function with the project's
        ``.venv``, which hides a package missing from the layers.
    lmi_processes_per_environment : int or None
        A function on Lambda Managed Instances (``LocalApp.managed_instances``) runs in the
        emulator's LMI mode with at most this many runtime processes (requests at once) per
        execution environment, default 2: as deployed, Python's default is 16 per vCPU (a
        2 vCPU environment: 32 processes, each importing the agent), more than a laptop runs
        for three environments. The environment counts, the scaling config and the throttles
        beyond capacity are the deployed ones. None: the deployed concurrency.
    """

    time_scale: float = 1.0
    idle_timeout_s: float = 600.0
    pc_allocation_delay_s: float = 60.0
    account_concurrency_limit: int = 1000
    metrics_flush_interval_s: float = 10.0
    moto: bool = True
    lambda_port: int = 0
    gateway_port: int = 0
    moto_port: int = 0
    env_overrides: Mapping[str, str] = field(default_factory=dict)
    region: str = "us-east-1"
    freeze_idle: bool = True
    own_layers: bool = True
    lmi_processes_per_environment: int | None = 2

    def __post_init__(self) -> None:
        if not self.time_scale > 0:
            raise ValueError(f"time_scale must be > 0, got {self.time_scale}")
        processes = self.lmi_processes_per_environment
        if processes is not None and not 1 <= processes <= 1600:
            raise ValueError("lmi_processes_per_environment must be 1..1600 "
                             f"(PerExecutionEnvironmentMaxConcurrency), got {processes}")
        if not self.metrics_flush_interval_s > 0:
            raise ValueError("metrics_flush_interval_s must be > 0")


#: Where environments' AWS SDK calls go without a moto server: the discard port on loopback,
#: closed on this machine, so a call fails at once and locally.
NO_AWS_ENDPOINT = "http://127.0.0.1:9"


class MotoServer:
    """A moto server in its own process (``infra.local.moto_main``) on 127.0.0.1.

    ``port`` 0 takes a free port at the first start; a later ``start()`` (after ``stop()`` or
    ``kill()``) binds the same one, so clients keep their endpoint. Its state (parameters,
    metrics) does not survive a restart.
    """

    name = "moto"

    def __init__(self, port: int = 0, python: str = sys.executable) -> None:
        self._port = port
        self._python = python
        self._proc: subprocess.Popen[str] | None = None
        self._endpoint: str | None = None

    @property
    def endpoint(self) -> str:
        if self._endpoint is None:
            raise RuntimeError("the moto server is not started")
        return self._endpoint

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def start(self) -> None:
        env = dict(os.environ)
        env.setdefault("AWS_ACCESS_KEY_ID", "testing")
        env.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
        self._proc = subprocess.Popen(
            [self._python, "-m", "infra.local.moto_main", "127.0.0.1", str(self._port)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
            cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
            start_new_session=True)
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line:
            code = self._proc.wait(timeout=10)
            raise RuntimeError(f"the moto server exited with status {code} before it was ready")
        info = json.loads(line)
        self._port = int(info["port"])
        self._endpoint = f"http://{info['host']}:{info['port']}"

    def kill(self) -> None:
        """SIGKILL the server, as a crash (fault injection); ``start()`` brings it back."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=5)
        for pipe in (proc.stdin, proc.stdout):
            if pipe:
                pipe.close()

    def stop(self) -> None:
        if self._proc is None:
            return
        try:
            if self._proc.stdin:
                self._proc.stdin.close()
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(timeout=5)
        if self._proc.stdout:
            self._proc.stdout.close()


class EmulatorService:
    """The emulator with its REST API, its functions deployed, and its metrics publisher."""

    name = "lambda"

    def __init__(self, app: LocalApp, config: LocalStackConfig, *, clock: Clock,
                 moto_endpoint: str | None, log_stream: IO[str] | None = None) -> None:
        self.app = app
        self.config = config
        self.clock = clock
        self.moto_endpoint = moto_endpoint
        self.log_stream = log_stream
        self.metrics: MetricsSink = NullMetrics()
        self.emulator: Emulator | None = None
        self.api: LambdaApiServer | None = None
        self._launcher_dir: tempfile.TemporaryDirectory[str] | None = None

    @property
    def endpoint(self) -> str:
        if self.api is None:
            raise RuntimeError("the Lambda emulator is not started")
        return self.api.endpoint

    def _functions(self) -> tuple[list[FunctionSpec], str]:
        """The functions as the emulator runs them and its interpreter: with their own code and
        layers (see :mod:`infra.local.function_runtime`) behind the launcher when any is
        described with layers, else this interpreter as given.

        Raises
        ------
        infra.local.function_runtime.RuntimeUnavailable
            A function's CPython is not on this machine (the message names the function and
            says what to do), or a layer folder is missing.
        """
        functions = list(self.app.functions)
        if not self.config.own_layers:
            return [replace(spec, layers=None) for spec in functions], sys.executable
        if all(spec.layers is None for spec in functions):
            return functions, sys.executable
        from infra.local.function_runtime import isolated_functions, write_launcher

        functions = isolated_functions(functions)
        self._launcher_dir = tempfile.TemporaryDirectory(prefix="warmstart-runtime-")
        return functions, str(write_launcher(Path(self._launcher_dir.name)))

    def start(self) -> None:
        cfg = self.config
        functions, python = self._functions()
        extra_env: dict[str, str] = {}
        if self.moto_endpoint:
            import boto3

            client = boto3.client("cloudwatch", endpoint_url=self.moto_endpoint,
                                  region_name=cfg.region, **LOCAL_CREDENTIALS)
            publisher = CloudWatchMetrics(client, self.clock, cfg.metrics_flush_interval_s)
            publisher.start()
            self.metrics = publisher
            # boto3 in the environments reaches moto, never AWS (botocore's service-specific
            # endpoint variables: https://docs.aws.amazon.com/sdkref/latest/guide/feature-ss-endpoints.html)
            extra_env["AWS_ENDPOINT_URL"] = self.moto_endpoint
            extra_env["AWS_ENDPOINT_URL_SSM"] = self.moto_endpoint
            extra_env["AWS_ENDPOINT_URL_CLOUDWATCH"] = self.moto_endpoint
        else:
            # no moto server: every AWS SDK call of an environment goes to a closed local port
            # and fails there (the level stays static), never to AWS over the network
            for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_SSM", "AWS_ENDPOINT_URL_CLOUDWATCH"):
                extra_env[name] = NO_AWS_ENDPOINT
        self.emulator = Emulator(
            EmulatorConfig(region=cfg.region, idle_timeout_s=cfg.idle_timeout_s,
                           pc_allocation_delay_s=cfg.pc_allocation_delay_s,
                           account_concurrency_limit=cfg.account_concurrency_limit,
                           freeze_idle=cfg.freeze_idle, python=python,
                           reap_interval_s=min(1.0, max(0.05, cfg.idle_timeout_s / cfg.time_scale / 4))),
            clock=self.clock, metrics=self.metrics, log_stream=self.log_stream)
        self.api = LambdaApiServer(self.emulator, port=cfg.lambda_port)
        self.api.start()
        extra_env["AWS_ENDPOINT_URL_LAMBDA"] = self.api.endpoint
        self.emulator.extra_env.update(extra_env)
        for spec in functions:
            managed = self.managed_instances(spec)
            deployed = self.app.managed_instances.get(spec.name)
            if managed is not None and deployed is not None and managed != deployed:
                _LOG.info("%s: on Lambda Managed Instances locally with %d runtime processes per "
                          "environment (deployed: %d)", spec.name, managed.concurrency(spec.memory_mb),
                          deployed.concurrency(spec.memory_mb))
            self.emulator.add_function(spec, managed_instances=managed)

    def managed_instances(self, spec: FunctionSpec) -> ManagedInstancesConfig | None:
        """How the emulator runs ``spec`` on Lambda Managed Instances: the template's settings
        with at most ``config.lmi_processes_per_environment`` runtime processes per execution
        environment; None for a function not on a capacity provider."""
        deployed = self.app.managed_instances.get(spec.name)
        cap = self.config.lmi_processes_per_environment
        if deployed is None or cap is None or deployed.concurrency(spec.memory_mb) <= cap:
            return deployed
        return replace(deployed, per_environment_max_concurrency=cap)

    def stop(self) -> None:
        if self.api is not None:
            self.api.stop()
        if self.emulator is not None:
            self.emulator.stop()
        if isinstance(self.metrics, CloudWatchMetrics):
            self.metrics.stop()
        if self._launcher_dir is not None:
            self._launcher_dir.cleanup()
            self._launcher_dir = None


class LocalStack:
    """Start and stop the local stack as one unit (a context manager).

    Parameters
    ----------
    app : LocalApp
        Functions and gateway route (from :func:`~infra.local.template.read_template`).
    config : LocalStackConfig
    backing_services : sequence of Service or factory(stack) -> Service
        Started after moto and before the emulator; those that are
        :class:`FunctionEnvironmentProvider` add variables to the functions' environments.
    extra_services : sequence of Service or factory(stack) -> Service
        Started after the core services, stopped before them.
    log_stream : file, optional
        Where environments' output and REPORT lines go (default: stderr).

    Attributes
    ----------
    deployed_app : LocalApp or None
        The functions as deployed to the emulator (environments completed), once started.
    function_urls : dict[str, str]
        Function name -> the local URL of its ``live`` alias's streaming function URL
        (`infra.local.gateway.FunctionUrlGateway`), for each of `streaming_functions`; the
        endpoint is also listed as ``function-url-<name>``.
    """

    def __init__(self, app: LocalApp, config: LocalStackConfig | None = None, *,
                 backing_services: Sequence[Service | ServiceFactory] = (),
                 extra_services: Sequence[Service | ServiceFactory] = (),
                 log_stream: IO[str] | None = None) -> None:
        self.app = app
        self.config = config or LocalStackConfig()
        self.clock: Clock = (SystemClock() if self.config.time_scale == 1.0
                             else ScaledClock(self.config.time_scale))
        self._backing = list(backing_services)
        self._extra = list(extra_services)
        self._log_stream = log_stream
        self.services: list[Service] = []
        self.moto: MotoServer | None = None
        self.lambda_service: EmulatorService | None = None
        self.gateway: Gateway | None = None
        self.deployed_app: LocalApp | None = None
        #: function name -> its streaming function URL (``streaming_functions``), once started
        self.function_urls: dict[str, str] = {}

    @property
    def emulator(self) -> Emulator:
        if self.lambda_service is None or self.lambda_service.emulator is None:
            raise RuntimeError("the local stack is not started")
        return self.lambda_service.emulator

    def _start(self, service: Service) -> None:
        service.start()
        self.services.append(service)
        _LOG.info("started %s at %s", service.name, service.endpoint)

    def _make(self, item: Service | ServiceFactory) -> Service:
        return item(self) if callable(item) and not hasattr(item, "start") else item  # type: ignore[return-value]

    def _deployed(self, providers: Sequence[Service]) -> LocalApp:
        """The app with each function's environment completed (see the module docstring)."""
        functions = []
        for spec in self.app.functions:
            env = dict(spec.environment)
            for service in providers:
                if isinstance(service, FunctionEnvironmentProvider):
                    env.update(service.function_environment(spec))
            env.update(self.config.env_overrides)
            functions.append(replace(spec, environment=env))
        return replace(self.app, functions=tuple(functions))

    def start(self) -> LocalStack:
        """Start every service in order; on failure stop the started ones and re-raise."""
        try:
            if self.config.moto:
                self.moto = MotoServer(self.config.moto_port)
                self._start(self.moto)
                self._create_parameters()
            backing = []
            for item in self._backing:
                service = self._make(item)
                self._start(service)
                backing.append(service)
            self.deployed_app = self._deployed(backing)
            self.lambda_service = EmulatorService(
                self.deployed_app, self.config, clock=self.clock,
                moto_endpoint=self.moto.endpoint if self.moto else None, log_stream=self._log_stream)
            self._start(self.lambda_service)
            routes = self.app.all_routes()  # every agent's routes, to functions this app runs
            if routes:
                # requestContext.timeEpoch is the real arrival time, as API Gateway stamps it
                # (the handler measures its SLA from it with time.time()), even when the
                # stack's clock is scaled
                self.gateway = Gateway(self.emulator, routes=routes, port=self.config.gateway_port,
                                       now_s=time.time, stage=self.app.stage,
                                       monotonic_s=self.clock.monotonic)
                self._start(self.gateway)
            for spec in streaming_functions(self.deployed_app):
                url = FunctionUrlGateway(self.emulator, spec.name, FUNCTION_URL_ALIAS,
                                         invoke_mode="RESPONSE_STREAM", region=self.config.region)
                url.name = f"function-url-{spec.name}"  # one endpoint per function
                self._start(url)
                self.function_urls[spec.name] = url.endpoint
            for extra in self._extra:
                self._start(self._make(extra))
        except BaseException:
            self.stop()
            raise
        return self

    def _create_parameters(self) -> None:
        """Create the template's SSM parameters in moto (as the CloudFormation deploy would)."""
        if not self.app.parameters:
            return
        ssm = self.client("ssm")
        for name, value in self.app.parameters.items():
            ssm.put_parameter(Name=name, Value=value, Type="String", Overwrite=True)

    def stop(self) -> None:
        """Stop every started service, last first; errors are logged, not raised."""
        while self.services:
            service = self.services.pop()
            try:
                service.stop()
            except Exception:  # noqa: BLE001
                _LOG.exception("stopping %s failed", service.name)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _killable(self, name: str) -> Any:
        service = next((s for s in self.services if s.name == name), None)
        if service is None or not callable(getattr(service, "kill", None)):
            killable = [s.name for s in self.services if callable(getattr(s, "kill", None))]
            raise ValueError(f"no running service {name!r} that can be killed; have {killable}")
        return service

    def kill_service(self, name: str) -> None:
        """SIGKILL service ``name`` (``moto``, ``gpu-endpoint``): a crash, for fault injection.

        Raises
        ------
        ValueError
            No such running service, or one that cannot be killed (the message lists those).
        """
        self._killable(name).kill()

    def restart_service(self, name: str) -> None:
        """Start a killed (or running: killed first) service again on the same endpoint; for
        moto, the template's SSM parameters are created again (a deploy's state outlives an
        outage of the service; moto's does not).

        Raises
        ------
        ValueError
            As :meth:`kill_service`.
        """
        service = self._killable(name)
        service.kill()
        service.start()
        if service is self.moto:
            self._create_parameters()

    def endpoints(self) -> dict[str, str]:
        """Service name -> endpoint URL of every running service."""
        return {s.name: s.endpoint for s in self.services}

    def client(self, service_name: str, **kwargs: Any) -> Any:
        """A boto3 client for the local endpoint of ``lambda``, ``sagemaker-runtime`` (the GPU
        endpoint server, when it runs), or of a moto-served service."""
        import boto3

        endpoints = self.endpoints()
        key = {"lambda": "lambda", "sagemaker-runtime": "gpu-endpoint"}.get(service_name, "moto")
        if key not in endpoints:
            raise RuntimeError(f"no local endpoint for {service_name!r}: {key} is not running")
        endpoint = endpoints[key]
        return boto3.client(service_name, endpoint_url=endpoint, region_name=self.config.region,
                            **LOCAL_CREDENTIALS, **kwargs)

    def lambda_client(self, **kwargs: Any) -> Any:
        return self.client("lambda", **kwargs)

    def with_config(self, **changes: Any) -> LocalStackConfig:
        return replace(self.config, **changes)
