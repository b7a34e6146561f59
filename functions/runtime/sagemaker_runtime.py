"""SageMaker runtime ``InvokeEndpoint``: signed with the AWS Common Runtime, sent with ``http.client``.

The overflow call is the one AWS call a cold request may make, and a boto3 ``sagemaker-runtime``
client costs ~400 ms in a fresh process (``import boto3`` ~300 ms, the client ~115 ms; issue 20).
This module makes the same HTTP request botocore makes for ``InvokeEndpoint`` (REST-JSON,
``POST /endpoints/{EndpointName}/invocations``), signs it with SigV4 from ``awscrt.auth`` (the
binding botocore itself uses for its CRT signers) and sends it with the standard library. No
SigV4 is computed here: canonical request, string to sign and signature are awscrt's.

Credentials, read at each call (cheap) so a restored SnapStart environment signs with what the
environment holds now:

1. ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY`` and ``AWS_SESSION_TOKEN``, as Lambda sets
   them from the execution role;
2. else, when ``AWS_CONTAINER_CREDENTIALS_FULL_URI`` or ``..._RELATIVE_URI`` is set (Lambda's
   container credentials, used under SnapStart), botocore's ``ContainerProvider`` (imported
   only then; it caches and refreshes);
3. else `NoCredentials`, before anything is sent.

Errors are this module's exceptions (`EndpointError` and its subclasses); the overflow client
maps them to failure tags (`functions.runtime.overflow`). awscrt, ``http.client`` and ``ssl``
are imported when a `SageMakerRuntime` is made, never at module import.

References
----------
InvokeEndpoint request, response and errors:
https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_runtime_InvokeEndpoint.html
SageMaker runtime endpoints (``runtime.sagemaker.<region>.amazonaws.com``):
https://docs.aws.amazon.com/general/latest/gr/sagemaker.html
SigV4 request signing: https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_sigv.html
awscrt signing API: https://awslabs.github.io/aws-crt-python/api/auth.html
Lambda's credential environment variables:
https://docs.aws.amazon.com/lambda/latest/dg/configuration-envvars.html#configuration-envvars-runtime
REST-JSON error code (``x-amzn-ErrorType``, ``__type``):
https://smithy.io/2.0/aws/protocols/aws-restjson1-protocol.html#operation-error-serialization
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit

if TYPE_CHECKING:
    import http.client
    import ssl

__all__ = [
    "ConnectTimeout",
    "ConnectionClosed",
    "Credentials",
    "EndpointError",
    "EndpointUnreachable",
    "InvokeEndpointClient",
    "NoCredentials",
    "NoRegion",
    "ReadTimeout",
    "SageMakerRuntime",
    "ServiceError",
    "TlsFailed",
    "default_endpoint_url",
    "environment_credentials",
    "sign_headers",
]

#: SigV4 signing name of the SageMaker runtime (its service model's ``signingName``).
SIGNING_SERVICE = "sagemaker"
#: Header naming the inference component (``InvokeEndpoint``'s ``InferenceComponentName``).
INFERENCE_COMPONENT_HEADER = "X-Amzn-SageMaker-Inference-Component"
#: Response header naming the production variant that answered.
INVOKED_VARIANT_HEADER = "x-Amzn-Invoked-Production-Variant"
#: REST-JSON error code header.
ERROR_TYPE_HEADER = "x-amzn-ErrorType"
#: Headers never signed (a proxy or http.client may add or change them): botocore's
#: ``SIGNED_HEADERS_BLACKLIST``, plus the two http.client adds after signing
#: (``accept-encoding``, ``content-length``; boto3 does not sign the latter either). awscrt
#: itself also skips ``user-agent`` and ``x-amzn-trace-id``.
UNSIGNED_HEADERS = frozenset({
    "accept-encoding", "baggage", "connection", "content-length", "expect", "keep-alive",
    "proxy-authenticate", "proxy-authorization", "te", "traceparent", "tracestate", "trailer",
    "transfer-encoding", "upgrade", "user-agent", "x-amzn-trace-id",
})
#: Idle connections kept per endpoint (the overflow client runs at most 4 attempts at once).
MAX_IDLE_CONNECTIONS = 4
_USER_AGENT = "warmstart-overflow (awscrt; http.client)"
_CONTAINER_URI_VARIABLES = ("AWS_CONTAINER_CREDENTIALS_FULL_URI",
                            "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")


# -- errors -------------------------------------------------------------------------------------
class EndpointError(Exception):
    """Base of this module's failures (the overflow client maps each to a failure tag)."""


class NoCredentials(EndpointError):
    """No AWS credentials in the environment: nothing was sent."""


class NoRegion(EndpointError):
    """No region to sign for (``AWS_REGION`` unset and none given): nothing was sent."""


class ConnectTimeout(EndpointError):
    """The TCP connect or the TLS handshake did not finish within the connect timeout."""


class ReadTimeout(EndpointError):
    """Sending the request or reading the answer took longer than the read timeout."""


class ConnectionClosed(EndpointError):
    """The connection dropped (reset, closed mid-answer, malformed HTTP)."""


class EndpointUnreachable(EndpointError):
    """No connection could be made (refused, DNS, network unreachable)."""


class TlsFailed(EndpointError):
    """The TLS handshake failed (certificate, protocol): retrying does not help."""


class ServiceError(EndpointError):
    """The endpoint answered non-2xx.

    Parameters
    ----------
    status : int
        HTTP status code.
    code : str
        Error code (``x-amzn-ErrorType`` or the body's ``__type``/``code``), ``""`` if none.
    message : str
        The body's ``message``/``Message`` (or its first 200 characters).
    """

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message


# -- credentials ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Credentials:
    """AWS credentials to sign with (the secret and the token never appear in ``repr``)."""

    access_key_id: str
    secret_access_key: str = field(repr=False)
    session_token: str | None = field(default=None, repr=False)


class _ContainerCredentials:
    """Lambda's container credentials (SnapStart) through botocore's ``ContainerProvider``,
    which fetches, caches and refreshes them; botocore is imported on first use only."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._provider: Any = None

    def __call__(self, environ: Mapping[str, str]) -> Credentials | None:
        with self._lock:
            if self._provider is None:
                from botocore.credentials import ContainerProvider

                self._provider = ContainerProvider(environ=dict(environ)).load()
            provider = self._provider
        if provider is None:
            return None
        frozen = provider.get_frozen_credentials()
        return Credentials(frozen.access_key, frozen.secret_key, frozen.token or None)


_CONTAINER = _ContainerCredentials()


def environment_credentials(environ: Mapping[str, str] | None = None) -> Credentials | None:
    """The credentials the environment holds, as Lambda sets them (see the module docstring).

    Parameters
    ----------
    environ : Mapping[str, str], optional
        Default ``os.environ``.

    Returns
    -------
    Credentials or None
        None when neither access keys nor a container credentials URI are set.
    """
    env = os.environ if environ is None else environ
    key, secret = env.get("AWS_ACCESS_KEY_ID"), env.get("AWS_SECRET_ACCESS_KEY")
    if key and secret:
        return Credentials(key, secret, env.get("AWS_SESSION_TOKEN") or None)
    if any(env.get(name) for name in _CONTAINER_URI_VARIABLES):
        return _CONTAINER(env)
    return None


# -- signing --------------------------------------------------------------------------------
def _should_sign(name: str) -> bool:
    return name.lower() not in UNSIGNED_HEADERS


def sign_headers(
    method: str,
    path: str,
    headers: Iterable[tuple[str, str]],
    body: bytes,
    *,
    credentials: Credentials,
    region: str,
    service: str = SIGNING_SERVICE,
    when: _dt.datetime,
) -> list[tuple[str, str]]:
    """Sign a request with SigV4 (``awscrt.auth``) and return its headers as sent.

    Parameters
    ----------
    method : str
        HTTP method.
    path : str
        Path and query, already percent-encoded (``/endpoints/my-ep/invocations``).
    headers : iterable of (str, str)
        Request headers, ``Host`` included.
    body : bytes
        Request body (its SHA-256 is part of the signature).
    credentials : Credentials
    region : str
        Region signed for (``us-east-1``).
    service : str
        Signing name (``sagemaker`` for the SageMaker runtime).
    when : datetime.datetime
        Signing time (timezone-aware, UTC); becomes ``X-Amz-Date``.

    Returns
    -------
    list of (str, str)
        ``headers`` plus ``X-Amz-Date``, ``X-Amz-Security-Token`` (with a session token) and
        ``Authorization``.

    Raises
    ------
    awscrt.exceptions.AwsCrtError
        awscrt refused to sign (it says why).
    """
    import io

    from awscrt import auth
    from awscrt import http as crt_http

    provider = auth.AwsCredentialsProvider.new_static(
        credentials.access_key_id, credentials.secret_access_key, credentials.session_token)
    config = auth.AwsSigningConfig(
        algorithm=auth.AwsSigningAlgorithm.V4,
        signature_type=auth.AwsSignatureType.HTTP_REQUEST_HEADERS,
        credentials_provider=provider,
        region=region,
        service=service,
        date=when,
        should_sign_header=_should_sign,
        use_double_uri_encode=True,  # every service but S3
        should_normalize_uri_path=True,
    )
    request = crt_http.HttpRequest(method, path, crt_http.HttpHeaders(list(headers)),
                                   io.BytesIO(body))
    auth.aws_sign_request(request, config).result()
    return list(request.headers)


# -- the client -----------------------------------------------------------------------------
def default_endpoint_url(region: str) -> str:
    """``https://runtime.sagemaker.<region>.<dns suffix>`` (``amazonaws.com.cn`` in China
    regions); other partitions pass ``endpoint_url``."""
    suffix = "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"
    return f"https://runtime.sagemaker.{region}.{suffix}"


def _error_of(status: int, headers: Mapping[str, str], raw: bytes) -> ServiceError:
    """The `ServiceError` of a non-2xx REST-JSON answer."""
    code = headers.get(ERROR_TYPE_HEADER.lower(), "").split(":", 1)[0].strip()
    message = ""
    try:
        parsed = json.loads(raw) if raw else {}
    except (ValueError, UnicodeDecodeError, RecursionError):
        parsed = None
    if isinstance(parsed, dict):
        code = code or str(parsed.get("__type") or parsed.get("code") or parsed.get("Code") or "")
        message = str(parsed.get("message") or parsed.get("Message") or "")
    elif raw:
        message = raw[:200].decode("utf-8", "replace")
    return ServiceError(status, code.rsplit("#", 1)[-1], message)


@contextlib.contextmanager
def _network_errors(drop: Callable[[], None], timed_out: str, dropped: str) -> Iterator[None]:
    """Map a socket timeout to `ReadTimeout` and a reset/closed/malformed connection to
    `ConnectionClosed` (both with ``drop()`` called first: that connection is not reused)."""
    import http.client

    try:
        yield
    except TimeoutError as exc:
        drop()
        raise ReadTimeout(timed_out) from exc
    except (OSError, http.client.HTTPException) as exc:
        drop()
        raise ConnectionClosed(f"{dropped}: {exc!r}") from exc


class _Body:
    """The answer's body: ``read(n)`` at most ``n`` bytes, ``read1(n)`` what one read returns
    (a streamed answer's next chunk); the connection goes back to the pool once the body is
    read to its end, and is dropped when closed before."""

    def __init__(self, response: http.client.HTTPResponse, release: Callable[[bool], None],
                 sock: Any = None) -> None:
        self._response = response
        self._release = release
        self._released = False
        self._sock = sock

    def read(self, amount: int | None = None) -> bytes:
        return self._read(self._response.read, amount)

    def read1(self, amount: int = -1) -> bytes:
        """At most ``amount`` bytes of what has arrived (blocks until something has; ``b""``
        at the end); a chunked answer yields at most one chunk's bytes per call."""
        return self._read(self._response.read1, amount)

    def _read(self, read: Callable[[Any], bytes], amount: Any) -> bytes:
        with _network_errors(self.close, "reading the answer timed out",
                             "the connection dropped while reading"):
            data = read(amount)
        if self._response.isclosed() and not self._released:
            self._released = True
            self._release(not self._response.will_close)
        return data

    def set_timeout(self, timeout_s: float) -> None:
        """Limit each later read to ``timeout_s`` s (`ReadTimeout` past it)."""
        if self._sock is not None and not self._released:
            self._sock.settimeout(timeout_s)

    def close(self) -> None:
        if not self._released:
            self._released = True
            self._release(False)


class SageMakerRuntime:
    """``InvokeEndpoint`` client: one per execution environment, thread-safe, pooled keep-alive
    connections to one endpoint URL.

    Parameters
    ----------
    region_name : str, optional
        Region signed for; default ``AWS_REGION`` / ``AWS_DEFAULT_REGION`` of ``environ``.
    endpoint_url : str, optional
        ``http(s)://host[:port]`` to send to (the local GPU endpoint server); default
        `default_endpoint_url` of the region.
    credentials : callable, optional
        ``() -> Credentials | None``, called at each request; default
        `environment_credentials` of ``environ``.
    utc_now : callable, optional
        ``() -> datetime`` (aware, UTC) for ``X-Amz-Date``; default the system clock.
    environ : Mapping[str, str], optional
        Default ``os.environ``.
    ssl_context : ssl.SSLContext, optional
        For ``https``; default ``ssl.create_default_context()`` (made now, not on a request).

    Raises
    ------
    ValueError
        ``endpoint_url`` is not an ``http`` or ``https`` URL with a host.
    """

    def __init__(
        self,
        *,
        region_name: str | None = None,
        endpoint_url: str | None = None,
        credentials: Callable[[], Credentials | None] | None = None,
        utc_now: Callable[[], _dt.datetime] | None = None,
        environ: Mapping[str, str] | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        import importlib

        for module in ("http.client", "awscrt.auth", "awscrt.http"):  # now, not on a request
            importlib.import_module(module)
        env = os.environ if environ is None else environ
        self.region_name = region_name or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
        url = endpoint_url or (default_endpoint_url(self.region_name) if self.region_name else None)
        self.endpoint_url = url
        self._credentials = credentials or (lambda: environment_credentials(env))
        self._utc_now = utc_now or (lambda: _dt.datetime.now(_dt.UTC))
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self._ssl: ssl.SSLContext | None = None
        self._scheme = self._host = self._netloc = ""
        self._port: int | None = None
        self._base_path = ""
        if url is not None:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(f"endpoint_url must be an http(s) URL with a host, got {url!r}")
            self._scheme, self._host, self._port = parts.scheme, parts.hostname, parts.port
            default_port = 443 if parts.scheme == "https" else 80
            self._netloc = (parts.hostname if parts.port in (None, default_port)
                            else f"{parts.hostname}:{parts.port}")
            self._base_path = parts.path.rstrip("/")
            if parts.scheme == "https":
                if ssl_context is None:
                    import ssl as _ssl

                    ssl_context = _ssl.create_default_context()
                self._ssl = ssl_context

    def client(self, connect_timeout_s: float, read_timeout_s: float) -> InvokeEndpointClient:
        """A view with fixed timeouts (the overflow client's per-bucket client), sharing this
        client's connections."""
        return InvokeEndpointClient(self, connect_timeout_s, read_timeout_s)

    # -- connections ------------------------------------------------------------------------
    def _connection(self, connect_timeout_s: float) -> http.client.HTTPConnection:
        """An idle connection still open, else a new one, connected."""
        import http.client
        import select

        while True:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                break
            sock = conn.sock
            # an idle socket that is readable was closed by the peer (or holds junk): drop it
            if sock is not None and not select.select([sock], [], [], 0)[0]:
                return conn
            conn.close()
        if self._scheme == "https":
            conn = http.client.HTTPSConnection(self._host, self._port, timeout=connect_timeout_s,
                                               context=self._ssl)
        else:
            conn = http.client.HTTPConnection(self._host, self._port, timeout=connect_timeout_s)
        self._connect(conn)
        return conn

    def _connect(self, conn: http.client.HTTPConnection) -> None:
        import socket
        import ssl

        try:
            conn.connect()
        except TimeoutError as exc:
            conn.close()
            raise ConnectTimeout(f"connecting to {self.endpoint_url} timed out") from exc
        except ssl.SSLError as exc:
            conn.close()
            raise TlsFailed(f"TLS with {self.endpoint_url} failed: {exc}") from exc
        except OSError as exc:  # refused, DNS (socket.gaierror), unreachable
            conn.close()
            kind = "name not resolved" if isinstance(exc, socket.gaierror) else "unreachable"
            raise EndpointUnreachable(f"{self.endpoint_url} {kind}: {exc}") from exc
        sock = conn.sock
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)  # boto3's tcp_keepalive
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as urllib3 sets it

    def _release(self, conn: http.client.HTTPConnection, keep: bool) -> None:
        if keep:
            with self._lock:
                if len(self._idle) < MAX_IDLE_CONNECTIONS:
                    self._idle.append(conn)
                    return
        conn.close()

    def close(self) -> None:
        """Close the idle connections (before a SnapStart snapshot); later calls reconnect."""
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    # -- the call ---------------------------------------------------------------------------
    def invoke_endpoint(
        self,
        *,
        # boto3's parameter names, so either client fits the overflow client
        EndpointName: str,
        Body: bytes,
        ContentType: str = "application/json",
        Accept: str = "application/json",
        InferenceComponentName: str | None = None,
        connect_timeout_s: float = 1.0,
        read_timeout_s: float = 5.0,
    ) -> dict[str, Any]:
        """Call ``InvokeEndpoint``.

        Parameters
        ----------
        EndpointName, Body, ContentType, Accept, InferenceComponentName
            As boto3's ``invoke_endpoint``.
        connect_timeout_s : float
            TCP connect + TLS handshake limit, s.
        read_timeout_s : float
            Limit of each socket send and read once connected, s.

        Returns
        -------
        dict
            ``Body`` (``read(n)``, ``close()``), ``ContentType``, ``InvokedProductionVariant``
            (None when absent), ``ResponseMetadata`` (``HTTPStatusCode``, ``HTTPHeaders``).

        Raises
        ------
        NoCredentials, NoRegion
            Before anything is sent.
        ConnectTimeout, ReadTimeout, ConnectionClosed, EndpointUnreachable, TlsFailed
            Network failures.
        ServiceError
            A non-2xx answer (its body read, the connection kept).
        """
        path = f"/endpoints/{quote(EndpointName, safe='')}/invocations"
        headers = [("Content-Type", ContentType), ("Accept", Accept)]
        if InferenceComponentName:
            headers.append((INFERENCE_COMPONENT_HEADER, InferenceComponentName))
        status, answer_headers, body = self.post(path, headers, Body,
                                                 connect_timeout_s=connect_timeout_s,
                                                 read_timeout_s=read_timeout_s)
        return {
            "Body": body,
            "ContentType": answer_headers.get("content-type"),
            "InvokedProductionVariant": answer_headers.get(INVOKED_VARIANT_HEADER.lower()),
            "ResponseMetadata": {"HTTPStatusCode": status, "HTTPHeaders": answer_headers},
        }

    def post(self, path: str, headers: Iterable[tuple[str, str]], body: bytes, *,
             connect_timeout_s: float, read_timeout_s: float,
             ) -> tuple[int, dict[str, str], _Body]:
        """Send one SigV4-signed ``POST`` of the SageMaker runtime and read the answer's head
        (`invoke_endpoint`; ``InvokeEndpointWithResponseStream``,
        `functions.runtime.overflow_stream`).

        Parameters
        ----------
        path : str
            The operation's path, percent-encoded (``/endpoints/my-ep/invocations``); the
            endpoint URL's own path goes before it.
        headers : iterable of (str, str)
            The operation's headers (``Host`` is added).
        body : bytes
        connect_timeout_s, read_timeout_s : float
            As `invoke_endpoint`, s.

        Returns
        -------
        (int, dict, body)
            The 2xx status, the answer's headers (names lower-cased) and its body
            (``read``, ``read1``, ``set_timeout``, ``close``; unread).

        Raises
        ------
        As `invoke_endpoint`.
        """
        if not self.region_name or self.endpoint_url is None:
            raise NoRegion("no region to sign the SageMaker runtime call for: set AWS_REGION "
                           "(Lambda sets it) or pass region_name")
        credentials = self._credentials()
        if credentials is None:
            raise NoCredentials(
                "no AWS credentials in the environment: AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY are unset and no container credentials URI is set "
                "(Lambda sets them from the function's execution role; for a local endpoint "
                "export any value)")
        path = f"{self._base_path}{path}"
        signed = sign_headers("POST", path, [("Host", self._netloc), *headers], body,
                              credentials=credentials, region=self.region_name,
                              when=self._utc_now())
        signed.append(("User-Agent", _USER_AGENT))
        conn = self._connection(connect_timeout_s)
        with _network_errors(conn.close, f"{self.endpoint_url}: no answer within {read_timeout_s} s",
                             f"{self.endpoint_url} dropped the connection"):
            if conn.sock is not None:
                conn.sock.settimeout(read_timeout_s)
            conn.request("POST", path, body=body, headers=dict(signed))
            response = conn.getresponse()
        answer_headers = {k.lower(): v for k, v in response.getheaders()}
        answer = _Body(response, lambda keep: self._release(conn, keep), conn.sock)
        if not 200 <= response.status < 300:
            raw = answer.read(64 * 1024)  # an error body is small; a longer one is cut
            answer.close()  # no-op once read to its end (the connection is back in the pool)
            raise _error_of(response.status, answer_headers, raw)
        return response.status, answer_headers, answer


class InvokeEndpointClient:
    """`SageMakerRuntime` with fixed timeouts: ``invoke_endpoint`` takes boto3's arguments.

    Parameters
    ----------
    runtime : SageMakerRuntime
    connect_timeout_s, read_timeout_s : float
        As `SageMakerRuntime.invoke_endpoint`, s.
    """

    def __init__(self, runtime: SageMakerRuntime, connect_timeout_s: float,
                 read_timeout_s: float) -> None:
        self.runtime = runtime
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s

    def invoke_endpoint(self, **kwargs: Any) -> dict[str, Any]:
        """`SageMakerRuntime.invoke_endpoint` with this view's timeouts."""
        return self.runtime.invoke_endpoint(connect_timeout_s=self.connect_timeout_s,
                                            read_timeout_s=self.read_timeout_s, **kwargs)

    def close(self) -> None:
        """Close the shared client's idle connections."""
        self.runtime.close()
