"""Overflow client: call the always-warm GPU endpoint within the request's SLA budget.

SageMaker ``InvokeEndpoint`` (with ``InferenceComponentName`` for an endpoint that hosts
inference components), signed with SigV4 by the AWS Common Runtime (``awscrt.auth``) and sent
with the standard library's ``http.client`` (`functions.runtime.sagemaker_runtime`): importing
awscrt and making the client costs tens of ms where a boto3 ``sagemaker-runtime`` client costs
~400 ms in a fresh process (``bench/results/overflow_client.md``). The client is made on the
first call or on `OverflowClient.prewarm` (the preload's ``overflow`` stage, before the web
stack). A boto3 client still fits through ``client_factory`` (`boto3_client_factory`).

There are no retries below this module: it retries in a bounded loop that checks the remaining
budget before every attempt, and each attempt's socket timeouts come from that budget. Clients
are cached per timeout bucket (views of one pooled connection set; a boto3 client fixes its
timeouts per client), so a budget never buys a longer timeout than it has.

Failures raise one exception per kind, each carrying its failure tag:

=========================  ==================  ==========================================  =========
exception                  tag                 causes                                      retried
=========================  ==================  ==========================================  =========
`OverflowTimeout`          timeout_network     connect/read timeout, connection reset,     reset only
                                               no budget left for an attempt
`OverflowModelError`       model_error         ``ModelError`` (container answered non-2xx), no
                                               malformed / unexpected body
`OverflowUnavailable`      tool_unavailable    breaker open, connection refused,           yes (not
                                               throttled, 5xx, model not ready, endpoint   breaker /
                                               not found                                   not found)
`OverflowCredentialsError` tool_unavailable    no credentials in the environment (nothing  no
                                               sent), 403 from the endpoint: expired
                                               session token, signature rejected, key
                                               unknown, access denied
=========================  ==================  ==========================================  =========

Every failed attempt counts as one failure for the circuit breaker; a success closes it.

Answer check
------------
An answer reaches the client only through the route's check (``Route(overflow_answer=...)``;
a route without one never overflows), wrapped by :func:`checked`. The rule:

1. **Size.** At most :data:`MAX_ANSWER_BYTES` are read from the endpoint (a longer body is
   refused without reading the rest), and the checked answer, as the client would get it, must
   fit Lambda's synchronous response (`functions.runtime.events.MAX_RESPONSE_BYTES`, headers and
   JSON escaping included).
2. **Shape.** The body must be a JSON object; the route's check says what else (the intent
   agent's: an intent of the agent's own set, numeric scores of known intents).
3. **Unknown fields** are dropped: the client gets exactly the object the check returns, never
   the endpoint's object as is; a check that prefers to refuse raises ``ValueError``. The
   result must be plain JSON (no NaN or infinity, no non-JSON types).

A failed check is `OverflowModelError` (tag ``model_error``) and the request falls back (the
degraded answer, or a shed 503) like any unusable answer.

References
----------
InvokeEndpoint errors: https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_runtime_InvokeEndpoint.html
Common errors (403 ``ExpiredTokenException``, ``InvalidSignatureException``,
``UnrecognizedClientException``, ``AccessDeniedException``):
https://docs.aws.amazon.com/sagemaker/latest/APIReference/CommonErrors.html
botocore timeouts and retries: https://botocore.amazonaws.com/v1/documentation/api/latest/reference/config.html
Retry within a deadline ("timeouts, retries and backoff with jitter"):
https://aws.amazon.com/builders-library/timeouts-retries-and-backoff-with-jitter/
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from concurrent import futures
from dataclasses import dataclass
from typing import Any, ClassVar

from functions.runtime.admission import DEFAULT_OVERFLOW_P95_MS, LatencyTracker, OverflowState
from functions.runtime.breaker import CircuitBreaker
from functions.runtime.errors import FailureTag
from functions.runtime.events import MAX_JSON_DEPTH, MAX_RESPONSE_BYTES, json_too_deep
from functions.runtime.lazy import close_clients

#: Most bytes read from the endpoint's answer: anything longer cannot fit Lambda's response
#: (`functions.runtime.events.MAX_RESPONSE_BYTES`) and is refused unread.
MAX_ANSWER_BYTES = MAX_RESPONSE_BYTES
#: Room kept in Lambda's response for the status line and headers around the answer, bytes.
RESPONSE_ENVELOPE_BYTES = 16 * 1024

#: p95 of making the first client, ms, added to the overflow estimate until a client exists:
#: the awscrt client's import (``awscrt.auth``, ``awscrt.http``, ``http.client``) + creation,
#: measured by ``bench/bench_overflow_client.py`` in 15 fresh processes on the project's 2-core
#: host (median 124 ms, nearest-rank p95 213 ms), rounded up. The boto3 client it replaced
#: cost 355 ms median, 548 ms p95 in the same run (the earlier seed was 800 ms).
#:
#: References
#: ----------
#: bench/results/overflow_client.json, ``samples.awscrt[*].client_ms`` (2026-12-02).
DEFAULT_CLIENT_INIT_P95_MS = 220.0

#: Per-attempt timeout buckets, seconds. The largest bucket <= the remaining budget is used.
TIMEOUT_BUCKETS_S: tuple[float, ...] = (
    0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 8.0, 13.0, 20.0, 30.0, 60.0,
)

# SageMaker runtime error codes (see References).
_MODEL_ERROR_CODES = frozenset({"ModelError", "ModelStreamError"})
_UNAVAILABLE_RETRYABLE_CODES = frozenset({
    "ThrottlingException", "Throttling", "TooManyRequestsException", "ServiceUnavailable",
    "ServiceUnavailableException", "InternalFailure", "InternalServerError",
    "InternalDependencyException", "ModelNotReadyException",
})
# The request's credentials or signature were refused (403): the same credentials fail again.
_CREDENTIALS_CODES = frozenset({
    "ExpiredTokenException", "ExpiredToken", "InvalidSignatureException",
    "UnrecognizedClientException", "InvalidClientTokenId", "IncompleteSignature",
    "MissingAuthenticationToken", "AccessDeniedException", "SignatureDoesNotMatch",
})


class OverflowFailure(Exception):
    """Base of the overflow failures; ``tag`` is the failure tag to log.

    Parameters
    ----------
    message : str
    attempts : int
        Attempts made (0 when refused before calling).
    retryable : bool
        Whether another attempt could succeed (used by the retry loop).
    """

    tag: ClassVar[FailureTag]

    def __init__(self, message: str, *, attempts: int = 0, retryable: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.attempts = attempts
        self.retryable = retryable


class OverflowTimeout(OverflowFailure):
    """No answer within the budget, or the network dropped the call (``timeout_network``)."""

    tag = FailureTag.TIMEOUT_NETWORK


class OverflowModelError(OverflowFailure):
    """The endpoint's model failed or answered something unusable (``model_error``)."""

    tag = FailureTag.MODEL_ERROR


class OverflowUnavailable(OverflowFailure):
    """The endpoint cannot take the call: breaker open, refused, throttled, 5xx
    (``tool_unavailable``)."""

    tag = FailureTag.TOOL_UNAVAILABLE


class OverflowCredentialsError(OverflowUnavailable):
    """This environment cannot sign a call the endpoint accepts: no credentials, or a 403
    (expired session token, signature rejected, access denied); never retried
    (``tool_unavailable``)."""


#: A failure below HTTP, in the order `OverflowClient._classify` matches either client's
#: exceptions: (timed out), (connection dropped), (unreachable), (no credentials) ->
#: (failure, what it says, retried).
_NETWORK_FAILURES: tuple[tuple[type[OverflowFailure], str, bool], ...] = (
    (OverflowTimeout, "timed out", False),
    (OverflowTimeout, "dropped the connection", True),
    (OverflowUnavailable, "unreachable", True),
    (OverflowCredentialsError, "not called", False),
)


@dataclass(frozen=True)
class OverflowResult:
    """A successful overflow call.

    Parameters
    ----------
    body : dict
        The validated JSON answer.
    latency_ms : float
        From the first attempt's start to the answer, ms (includes retries).
    attempts : int
    invoked_variant : str or None
        ``InvokedProductionVariant`` reported by SageMaker.
    """

    body: dict[str, Any]
    latency_ms: float
    attempts: int
    invoked_variant: str | None = None


def validate_json_object(body: Any) -> dict[str, Any]:
    """The default overflow answer check: any JSON object is accepted as is.

    A route that knows its answer's shape declares its own check
    (``Route(overflow_answer=...)``, `functions.runtime.agent`).

    Raises
    ------
    OverflowModelError
        The answer is not a JSON object.
    """
    if not isinstance(body, dict):
        raise OverflowModelError(f"overflow answer is {type(body).__name__}, expected an object")
    return body


def answer_size_bytes(answer: Mapping[str, Any]) -> int:
    """Bytes ``answer`` takes in Lambda's response: the JSON body (ASCII), escaped once more as
    the response object's ``body`` string.

    Raises
    ------
    ValueError
        ``answer`` is not plain JSON (NaN, infinity, a type JSON has no form for).
    """
    try:
        body = json.dumps(answer, allow_nan=False)
    except TypeError as exc:
        raise ValueError(f"not JSON: {exc}") from exc
    return len(json.dumps(body))


def checked(validate: Callable[[Any], Any]) -> Callable[[Any], dict[str, Any]]:
    """Wrap a route's ``overflow_answer`` hook with the framework's part of the answer check
    (see the module docstring, "Answer check").

    A ``ValueError``/``TypeError``/``KeyError`` the hook raises, a result that is not a JSON
    object or not plain JSON, or one larger than Lambda's response leaves room for, becomes
    `OverflowModelError` (tag ``model_error``), so admission falls back as for any bad answer.
    """

    def run(body: Any) -> dict[str, Any]:
        body = validate_json_object(body)
        try:
            result = validate(body)
        except OverflowFailure:
            raise
        except (ValueError, TypeError, KeyError, RecursionError) as exc:
            raise OverflowModelError(f"overflow answer rejected by the route's check: {exc}") from exc
        if not isinstance(result, dict):
            raise OverflowModelError(
                f"the route's overflow_answer check returned {type(result).__name__}, expected a dict")
        try:
            size = answer_size_bytes(result)
        except (ValueError, RecursionError) as exc:
            raise OverflowModelError(f"the checked overflow answer is not plain JSON: {exc}") from None
        if size > MAX_RESPONSE_BYTES - RESPONSE_ENVELOPE_BYTES:
            raise OverflowModelError(
                f"the checked overflow answer takes {size} bytes in the response; Lambda returns "
                f"at most {MAX_RESPONSE_BYTES}")
        return result

    return run


def timeout_bucket_s(available_ms: float) -> float | None:
    """Largest timeout bucket (s) that fits in ``available_ms``; None when none does."""
    fitting = [b for b in TIMEOUT_BUCKETS_S if b * 1000.0 <= available_ms]
    return fitting[-1] if fitting else None


def split_timeouts_s(bucket_s: float, connect_cap_s: float) -> tuple[float, float]:
    """(connect_timeout, read_timeout) in s whose sum is ``bucket_s``.

    The connect share is a quarter of the bucket, at most ``connect_cap_s`` (pooled
    connections skip the connect, so most of the bucket is left for the answer).
    """
    connect = min(connect_cap_s, bucket_s / 4.0)
    return connect, bucket_s - connect


EndpointClientFactory = Callable[[float, float], Any]
"""``factory(connect_timeout_s, read_timeout_s) -> client`` whose ``invoke_endpoint`` takes
boto3's arguments (`functions.runtime.sagemaker_runtime.InvokeEndpointClient`, or a boto3
``sagemaker-runtime`` client)."""


def boto3_client_factory(*, endpoint_url: str | None = None,
                         region_name: str | None = None) -> EndpointClientFactory:
    """An `EndpointClientFactory` of boto3 ``sagemaker-runtime`` clients (botocore retries off, one
    session), for ``OverflowClient(client_factory=...)``: the baseline
    ``bench/bench_overflow_client.py`` measures the default client against. boto3 is imported
    by the first client made.

    Parameters
    ----------
    endpoint_url : str, optional
        boto3's ``endpoint_url`` (the local GPU endpoint server).
    region_name : str, optional
        boto3's ``region_name``.
    """
    sessions: list[Any] = []

    def factory(connect_timeout_s: float, read_timeout_s: float) -> Any:
        import boto3  # lazy: ~300 ms
        from botocore.config import Config

        if not sessions:
            sessions.append(boto3.session.Session())
        config = Config(
            connect_timeout=connect_timeout_s,
            read_timeout=read_timeout_s,
            retries={"total_max_attempts": 1, "mode": "standard"},
            tcp_keepalive=True,
        )
        return sessions[0].client("sagemaker-runtime", endpoint_url=endpoint_url,
                                  region_name=region_name, config=config)

    return factory


#: Longest `OverflowClient.prewarm` waits for the calls' worker thread to start, s: the
#: thread starts in well under a millisecond when the interpreter is free; the bound only keeps
#: a prewarm (the preload's overflow stage, a SnapStart restore) from blocking.
PREWARM_THREAD_WAIT_S = 1.0


class OverflowClient:
    """Calls the overflow endpoint within a budget, with bounded retries and a breaker.

    Parameters
    ----------
    endpoint_name : str
        SageMaker endpoint name (``WARMSTART_OVERFLOW_ENDPOINT_NAME``).
    endpoint_url : str, optional
        ``endpoint_url`` for the client (the local GPU server,
        ``WARMSTART_OVERFLOW_ENDPOINT_URL``).
    region_name : str, optional
        Region for the client (``AWS_REGION``).
    client_factory : callable, optional
        ``(connect_timeout_s, read_timeout_s) -> client``; default a view of one
        `functions.runtime.sagemaker_runtime.SageMakerRuntime` (awscrt SigV4 over
        ``http.client``, made lazily), credentials from the environment.
    breaker : CircuitBreaker, optional
        Default: 3 consecutive failures, 5 s cool-down, on ``clock_ms``.
    clock_ms : callable, optional
        Monotonic ms clock (default ``time.monotonic() * 1000``).
    sleep_s : callable, optional
        Sleep for backoff (default ``time.sleep``).
    max_attempts : int
        Attempts per call, >= 1 (default 2).
    backoff_ms : float
        Pause before a retry, ms (doubles per retry), >= 0.
    reserve_ms : float
        Budget kept back for building the response after the call, ms, >= 0.
    connect_timeout_cap_s : float
        Largest connect timeout, s.
    validate : callable
        ``body -> dict``, raises `OverflowModelError` on an unusable answer.
    latency : LatencyTracker, optional
        Tracker of successful call latencies (seeded with ``DEFAULT_OVERFLOW_P95_MS``).
    client_init_p95_ms : float
        Added to the latency estimate while no client exists yet (imports + client), ms.
    hard_deadline : bool
        Run each attempt on a worker thread and stop waiting at the deadline, so slow client
        creation (imports under CPU contention) cannot overrun the budget either; the late
        attempt finishes in the background and is dropped (counted as a failure).
    inference_component : str, optional
        ``InvokeEndpoint``'s ``InferenceComponentName`` (``WARMSTART_OVERFLOW_INFERENCE_COMPONENT``):
        required by an endpoint that hosts inference components
        (https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_runtime_InvokeEndpoint.html).

    Raises
    ------
    ValueError
        Empty endpoint name or inference component, or bad numeric settings.
    """

    def __init__(
        self,
        endpoint_name: str,
        *,
        endpoint_url: str | None = None,
        region_name: str | None = None,
        client_factory: EndpointClientFactory | None = None,
        breaker: CircuitBreaker | None = None,
        clock_ms: Callable[[], float] | None = None,
        sleep_s: Callable[[float], None] | None = None,
        max_attempts: int = 2,
        backoff_ms: float = 25.0,
        reserve_ms: float = 20.0,
        connect_timeout_cap_s: float = 1.0,
        validate: Callable[[Any], dict[str, Any]] = validate_json_object,
        latency: LatencyTracker | None = None,
        client_init_p95_ms: float = DEFAULT_CLIENT_INIT_P95_MS,
        hard_deadline: bool = True,
        inference_component: str | None = None,
    ) -> None:
        if not endpoint_name or not isinstance(endpoint_name, str):
            raise ValueError("endpoint_name must be a non-empty string (WARMSTART_OVERFLOW_ENDPOINT_NAME)")
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
        if backoff_ms < 0 or reserve_ms < 0 or connect_timeout_cap_s <= 0:
            raise ValueError("backoff_ms and reserve_ms must be >= 0 and connect_timeout_cap_s > 0")
        if inference_component is not None and (not isinstance(inference_component, str)
                                                or not inference_component):
            raise ValueError("inference_component must be a non-empty string or None "
                             "(WARMSTART_OVERFLOW_INFERENCE_COMPONENT)")
        self.endpoint_name = endpoint_name
        self.inference_component = inference_component
        self.endpoint_url = endpoint_url
        self.region_name = region_name
        self._clock_ms = clock_ms or (lambda: time.monotonic() * 1000.0)
        self._sleep_s = sleep_s or time.sleep
        self.breaker = breaker or CircuitBreaker(self._clock_ms)
        self.max_attempts = max_attempts
        self.backoff_ms = float(backoff_ms)
        self.reserve_ms = float(reserve_ms)
        self.connect_timeout_cap_s = float(connect_timeout_cap_s)
        self._validate = validate
        self.latency = latency or LatencyTracker(DEFAULT_OVERFLOW_P95_MS)
        self._factory = client_factory or self._awscrt_factory
        self._clients: dict[tuple[float, float], Any] = {}
        self._lock = threading.Lock()
        self._create_lock = threading.Lock()
        #: calls in `invoke` now, and the condition `wait_idle` waits on
        self._in_flight = 0
        self._idle = threading.Condition(threading.Lock())
        self._runtime: Any = None  # the SageMakerRuntime the default factory's views share
        self.client_init_p95_ms = float(client_init_p95_ms)
        self._prewarm_started_ms: float | None = None
        self.hard_deadline = hard_deadline
        self._executor: futures.ThreadPoolExecutor | None = None
        #: first-event latency of streamed overflows, per route (feature name), ms
        #: (`functions.runtime.overflow_stream.StreamOverflow`)
        self.stream_latency: dict[str, LatencyTracker] = {}
        #: the endpoint's published capacity (`functions.runtime.overflow_capacity`); False:
        #: zero, provisioning or unknown, so `state` is unhealthy and admission degrades
        self.capacity_available: Callable[[], bool] | None = None

    # -- clients --------------------------------------------------------------------------
    def _awscrt_factory(self, connect_timeout_s: float, read_timeout_s: float) -> Any:
        if self._runtime is None:  # called under `_create_lock`
            from functions.runtime.sagemaker_runtime import SageMakerRuntime  # imports awscrt

            self._runtime = SageMakerRuntime(region_name=self.region_name,
                                             endpoint_url=self.endpoint_url)
        return self._runtime.client(connect_timeout_s, read_timeout_s)

    def _client(self, bucket_s: float) -> Any:
        timeouts = split_timeouts_s(bucket_s, self.connect_timeout_cap_s)
        with self._lock:
            client = self._clients.get(timeouts)
        if client is not None:
            return client
        # build outside `_lock` (state() must never wait for a boto3 import); `_create_lock`
        # makes concurrent first calls share one build
        with self._create_lock:
            with self._lock:
                client = self._clients.get(timeouts)
            if client is None:
                client = self._factory(*timeouts)
                with self._lock:
                    self._clients[timeouts] = client
            return client

    def prewarm(self, budget_ms: float = 2000.0) -> None:
        """Import the client's libraries and build the client for ``budget_ms`` now (the
        preload's ``overflow`` stage; after a SnapStart restore).

        While it runs, `state` counts only the rest of ``client_init_p95_ms`` (time already
        spent is subtracted), so a cold request can overflow as soon as that fits.
        """
        if self._prewarm_started_ms is None:
            self._prewarm_started_ms = self._clock_ms()
        bucket = timeout_bucket_s(budget_ms) or TIMEOUT_BUCKETS_S[0]
        self._client(bucket)
        if self.hard_deadline:  # the call's worker thread too: starting one costs a cold
            # request 4-9 ms (bench answer_first's cold handler profile, 2 cores); never
            # waited for long (a prewarm that could block would hold a restore)
            futures.wait([self._calls().submit(int)], timeout=PREWARM_THREAD_WAIT_S)

    def _calls(self) -> futures.ThreadPoolExecutor:
        """The executor the calls run on under ``hard_deadline`` (made on first use)."""
        with self._lock:
            if self._executor is None:
                self._executor = futures.ThreadPoolExecutor(max_workers=4,
                                                            thread_name_prefix="overflow")
            return self._executor

    def sagemaker_runtime(self) -> Any:
        """The awscrt `functions.runtime.sagemaker_runtime.SageMakerRuntime` this client's
        calls share (made now, as `prewarm` makes it, when none exists), for the other
        operations on the same endpoint (``InvokeEndpointWithResponseStream``,
        `functions.runtime.overflow_stream`); None with a ``client_factory`` whose clients
        are not its views (a boto3 client)."""
        return getattr(self._client(TIMEOUT_BUCKETS_S[-1]), "runtime", None)

    def close(self) -> None:
        """Close and drop the cached clients and the calls' executor (before a SnapStart
        snapshot: no connection may survive a restore, nor a thread where the restore is a
        fork, as in the local emulator); the next call or prewarm makes new ones. A call in
        flight finishes on its thread."""
        close_clients(self._clients, self._lock)
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False)

    # -- state for admission --------------------------------------------------------------
    def state(self) -> OverflowState:
        """`OverflowState` for `functions.runtime.admission.decide`."""
        snap = self.breaker.snapshot()
        with self._lock:
            cold = not self._clients
        client_init_ms = 0.0
        if cold:  # the client is still to be made: its p95, less what a prewarm already spent
            started = self._prewarm_started_ms
            spent = self._clock_ms() - started if started is not None else 0.0
            client_init_ms = max(0.0, self.client_init_p95_ms - spent)
        return OverflowState(
            configured=True,
            healthy=self.capacity_available is None or self.capacity_available(),
            breaker=snap.state,
            latency_p95_ms=self.latency.p95_ms + client_init_ms,
            probe_in_flight=snap.probe_in_flight,
            client_init_ms=client_init_ms,
        )

    @property
    def client_ready(self) -> bool:
        """A client exists (its libraries imported), so calls pay no client creation."""
        with self._lock:
            return bool(self._clients)

    def _run_attempt(self, body: bytes, bucket_s: float, deadline_ms: float,
                     validate: Callable[[Any], dict[str, Any]]
                     ) -> tuple[dict[str, Any], str | None]:
        if not self.hard_deadline:
            return self._attempt(body, bucket_s, validate)
        future = self._calls().submit(self._attempt, body, bucket_s, validate)
        wait_s = max(0.0, deadline_ms - self._clock_ms()) / 1000.0
        try:
            return future.result(timeout=wait_s)
        except futures.TimeoutError:
            raise OverflowTimeout(
                f"overflow endpoint {self.endpoint_name!r}: no answer before the deadline "
                f"({wait_s * 1000.0:.0f} ms left; client creation or the call was too slow)"
            ) from None

    # -- the call -------------------------------------------------------------------------
    def invoke(self, payload: Mapping[str, Any], *, budget_ms: float,
               validate: Callable[[Any], dict[str, Any]] | None = None) -> OverflowResult:
        """Send ``payload`` (JSON) to the endpoint and return its validated answer.

        Parameters
        ----------
        payload : mapping
            JSON-serialisable request body (``{"text": ...}``).
        budget_ms : float
            Remaining SLA budget, ms. No attempt starts once less than the smallest timeout
            bucket (50 ms) is left after ``reserve_ms``.
        validate : callable, optional
            This call's answer check (``body -> dict``, raises `OverflowModelError`); default
            the client's ``validate``.

        Returns
        -------
        OverflowResult

        Raises
        ------
        OverflowUnavailable
            Breaker open, or the endpoint refused / throttled / failed (tag tool_unavailable).
        OverflowTimeout
            No answer within the budget (tag timeout_network).
        OverflowModelError
            The model failed or its answer is malformed (tag model_error).
        ValueError
            ``payload`` is not JSON-serialisable.
        """
        with self._idle:
            self._in_flight += 1
        try:
            return self._invoke(payload, budget_ms=budget_ms, validate=validate)
        finally:
            with self._idle:
                self._in_flight -= 1
                self._idle.notify_all()

    def wait_idle(self, timeout_s: float) -> bool:
        """Block until no `invoke` is in flight, at most ``timeout_s`` (s); True when none is.

        The on-demand preload calls it between its stages (`functions.runtime.agent_handler`):
        a cold request's overflow call then has the interpreter to itself instead of sharing
        the GIL with the next stage's imports (the web stack's, the model session's), which
        made a cold call ~15 ms slower than a warm one in ``bench answer_first``.
        """
        with self._idle:
            return self._idle.wait_for(lambda: self._in_flight == 0, timeout=timeout_s)

    def _invoke(self, payload: Mapping[str, Any], *, budget_ms: float,
                validate: Callable[[Any], dict[str, Any]] | None) -> OverflowResult:
        try:
            body_bytes = json.dumps(payload, separators=(",", ":")).encode("utf-8")
        except (TypeError, ValueError) as exc:
            raise ValueError(f"overflow payload is not JSON-serialisable: {exc}") from exc
        start_ms = self._clock_ms()
        deadline_ms = start_ms + float(budget_ms) - self.reserve_ms
        attempts = 0
        last: OverflowFailure | None = None
        while attempts < self.max_attempts:
            if attempts > 0:
                pause_ms = self.backoff_ms * (2 ** (attempts - 1))
                # retry only if the pause plus a typical call still fit in the budget
                if self._clock_ms() + pause_ms + self.latency.p95_ms > deadline_ms:
                    break
                if pause_ms > 0:
                    self._sleep_s(pause_ms / 1000.0)
            bucket = timeout_bucket_s(deadline_ms - self._clock_ms())
            if bucket is None:
                if last is None:
                    last = OverflowTimeout(
                        f"no budget left for an overflow call ({budget_ms:.0f} ms budget)",
                        attempts=attempts,
                    )
                break
            if not self.breaker.allow():
                raise OverflowUnavailable(
                    f"overflow endpoint {self.endpoint_name!r}: circuit breaker is open",
                    attempts=attempts,
                )
            attempts += 1
            try:
                answer, variant = self._run_attempt(body_bytes, bucket, deadline_ms,
                                                    validate or self._validate)
            except OverflowFailure as failure:
                self.breaker.record_failure()
                failure.attempts = attempts
                last = failure
                if not failure.retryable:
                    raise
                continue
            self.breaker.record_success()
            latency_ms = self._clock_ms() - start_ms
            self.latency.observe(latency_ms)
            return OverflowResult(answer, latency_ms, attempts, variant)
        if last is None:  # pragma: no cover - every exit from the loop sets `last`
            last = OverflowTimeout("overflow call made no attempt", attempts=attempts)
        last.attempts = attempts
        raise last

    def _attempt(self, body: bytes, bucket_s: float, validate: Callable[[Any], dict[str, Any]]
                 ) -> tuple[dict[str, Any], str | None]:
        client = self._client(bucket_s)
        try:
            target = ({"InferenceComponentName": self.inference_component}
                      if self.inference_component else {})
            response = client.invoke_endpoint(
                EndpointName=self.endpoint_name,
                Body=body,
                ContentType="application/json",
                Accept="application/json",
                **target,
            )
            stream = response["Body"]
            raw = stream.read(MAX_ANSWER_BYTES + 1)  # bounded: a longer answer cannot be sent on
            if len(raw) > MAX_ANSWER_BYTES:
                close = getattr(stream, "close", None)
                if close is not None:
                    close()  # the rest is never read
        except Exception as exc:  # classified below; anything else is re-raised
            raise self._classify(exc) from exc
        if len(raw) > MAX_ANSWER_BYTES:
            raise OverflowModelError(
                f"overflow endpoint {self.endpoint_name!r} answered more than {MAX_ANSWER_BYTES} "
                "bytes (Lambda's response limit); refused unread")
        if json_too_deep(raw):
            raise OverflowModelError(
                f"overflow endpoint {self.endpoint_name!r} answered JSON nested deeper than "
                f"{MAX_JSON_DEPTH} levels")
        try:
            parsed = json.loads(raw)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise OverflowModelError(
                f"overflow endpoint {self.endpoint_name!r} returned a body that is not JSON "
                f"({len(raw)} bytes)"
            ) from exc
        return validate(parsed), response.get("InvokedProductionVariant")

    def _classify(self, exc: Exception) -> OverflowFailure:
        from functions.runtime import sagemaker_runtime as smr

        name = self.endpoint_name
        kinds: tuple[Any, ...]
        if isinstance(exc, smr.ServiceError):
            return self._classify_service_error(exc.status, exc.code, exc.message)
        if isinstance(exc, smr.EndpointError):
            kinds = ((smr.ConnectTimeout, smr.ReadTimeout), smr.ConnectionClosed,
                     smr.EndpointUnreachable, smr.NoCredentials)
        elif type(exc).__module__.startswith("botocore"):  # a boto3 client from client_factory
            from botocore import exceptions as bce  # already imported by the client

            if isinstance(exc, bce.ClientError):
                err = exc.response.get("Error", {})
                meta = exc.response.get("ResponseMetadata", {})
                return self._classify_service_error(int(meta.get("HTTPStatusCode", 0) or 0),
                                                    str(err.get("Code", "")),
                                                    str(err.get("Message", "")))
            if not isinstance(exc, bce.BotoCoreError):
                raise exc
            kinds = ((bce.ReadTimeoutError, bce.ConnectTimeoutError), bce.ConnectionClosedError,
                     bce.EndpointConnectionError, bce.NoCredentialsError)
        elif isinstance(exc, (KeyError, AttributeError)):
            return OverflowModelError(f"overflow endpoint {name!r} response has no body: {exc}")
        else:
            raise exc
        for types, (failure, what, retryable) in zip(kinds, _NETWORK_FAILURES, strict=True):
            if isinstance(exc, types):
                return failure(f"overflow endpoint {name!r} {what}: {exc}", retryable=retryable)
        return OverflowUnavailable(f"overflow endpoint {name!r} call failed: {exc}")

    def _classify_service_error(self, status: int, code: str, text: str) -> OverflowFailure:
        """A non-2xx answer, whichever client read it."""
        message = f"overflow endpoint {self.endpoint_name!r} answered {status} {code}: {text}"
        if code in _MODEL_ERROR_CODES or status == 424:
            return OverflowModelError(message)
        if code in _CREDENTIALS_CODES or status == 403:
            return OverflowCredentialsError(
                f"{message} (the request's credentials were refused: check the function role's "
                "sagemaker:InvokeEndpoint grant and that AWS_SESSION_TOKEN is the environment's "
                "current one)")
        if code in _UNAVAILABLE_RETRYABLE_CODES or status == 429 or status >= 500:
            return OverflowUnavailable(message, retryable=True)
        return OverflowUnavailable(message)
