"""The Lambda REST API on 127.0.0.1, so the real boto3 ``lambda`` client drives the emulator.

Operations (paths and shapes from botocore's ``lambda`` service model):

- ``Invoke``: ``POST /2015-03-31/functions/{name}/invocations`` (``X-Amz-Invocation-Type``,
  ``X-Amz-Log-Type``, ``X-Amz-Client-Context``, ``?Qualifier=``)
- ``InvokeWithResponseStream``: ``POST /2021-11-15/functions/{name}/response-streaming-invocations``
  (the same headers and query; ``RequestResponse`` or ``DryRun``), answered ``200`` with
  ``Content-Type: application/vnd.amazon.eventstream`` and ``X-Amz-Executed-Version``, chunked:
  one ``PayloadChunk`` event per chunk the runtime posted, as it arrives (the raw bytes, an
  HTTP-integration prelude included), then ``InvokeComplete`` (``{"ErrorCode", "ErrorDetails",
  "LogResult"}``, the error fields only when the stream failed: ``ErrorCode`` the error type,
  e.g. ``Runtime.StreamError`` from the runtime's trailers or ``Sandbox.Timedout``,
  ``ErrorDetails`` its message; how AWS fills these two is not documented, so this shape is
  the emulator's). Errors before the first chunk are answered as ``Invoke`` answers them
  (404 ``ResourceNotFoundException``, 429 ``TooManyRequestsException``, ...). ``DryRun``: 204.
- ``Put/Get/DeleteProvisionedConcurrencyConfig``, ``ListProvisionedConcurrencyConfigs``:
  ``/2019-09-30/functions/{name}/provisioned-concurrency``
- ``Put/Get/DeleteFunctionConcurrency``: ``/2017-10-31/...`` and ``/2019-09-30/functions/{name}/concurrency``
- ``GetFunction``, ``GetFunctionConfiguration``, ``ListFunctions``, ``GetAlias``, ``ListAliases``
- ``GetAccountSettings``: ``GET /2016-08-19/account-settings/`` (what the warmer reads for headroom)
- ``PutFunctionScalingConfig`` (``PUT``, 202 ``{"FunctionState"}``) and
  ``GetFunctionScalingConfig`` (``GET``): ``/2025-11-30/functions/{name}/function-scaling-config``
  ``?Qualifier=`` (a version or ``$LATEST.PUBLISHED``), for functions on Lambda Managed
  Instances (:mod:`infra.local.emulator.lmi`); ``GetFunctionConfiguration`` shows such a
  function's ``CapacityProviderConfig``

Errors carry ``x-amzn-ErrorType`` and a ``{"Type", "Message"}`` body, as AWS sends them.
Extra response headers ``X-Warmstart-*`` (environment id, init type, cold start, spillover,
REPORT numbers as known when the answer went out) let local tools see what Lambda only writes
to logs.

References
----------
https://docs.aws.amazon.com/lambda/latest/api/API_Invoke.html
https://docs.aws.amazon.com/lambda/latest/api/API_InvokeWithResponseStream.html
https://docs.aws.amazon.com/lambda/latest/api/API_InvokeWithResponseStreamCompleteEvent.html
"""

from __future__ import annotations

import json
import logging
import re
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from infra.local import eventstream
from infra.local.emulator import Emulator, InvokeResult
from infra.local.errors import (
    InvalidParameterValueException,
    InvalidRequestContentException,
    LambdaApiError,
    ResourceNotFoundException,
)
from infra.local.gateway import ResponseStream, end_chunks, write_chunk
from infra.local.httpserver import serve_in_background, shutdown

_LOG = logging.getLogger("warmstart.local.api")
_FN = r"/functions/(?P<name>[^/]+)"
_ROUTES: list[tuple[str, re.Pattern[str], str]] = [
    ("POST", re.compile(rf"^/2015-03-31{_FN}/invocations$"), "invoke"),
    ("POST", re.compile(rf"^/2021-11-15{_FN}/response-streaming-invocations$"), "invoke_stream"),
    ("PUT", re.compile(rf"^/2019-09-30{_FN}/provisioned-concurrency$"), "put_pc"),
    ("GET", re.compile(rf"^/2019-09-30{_FN}/provisioned-concurrency$"), "get_pc"),
    ("DELETE", re.compile(rf"^/2019-09-30{_FN}/provisioned-concurrency$"), "delete_pc"),
    ("PUT", re.compile(rf"^/20(17-10-31|19-09-30){_FN}/concurrency$"), "put_concurrency"),
    ("GET", re.compile(rf"^/20(17-10-31|19-09-30){_FN}/concurrency$"), "get_concurrency"),
    ("DELETE", re.compile(rf"^/20(17-10-31|19-09-30){_FN}/concurrency$"), "delete_concurrency"),
    ("GET", re.compile(r"^/2015-03-31/functions/?$"), "list_functions"),
    ("GET", re.compile(r"^/2016-08-19/account-settings/?$"), "account_settings"),
    ("PUT", re.compile(rf"^/2025-11-30{_FN}/function-scaling-config$"), "put_scaling"),
    ("GET", re.compile(rf"^/2025-11-30{_FN}/function-scaling-config$"), "get_scaling"),
    ("GET", re.compile(rf"^/2015-03-31{_FN}/?$"), "get_function"),
    ("GET", re.compile(rf"^/2015-03-31{_FN}/configuration$"), "get_configuration"),
    ("GET", re.compile(rf"^/2015-03-31{_FN}/aliases$"), "list_aliases"),
    ("GET", re.compile(rf"^/2015-03-31{_FN}/aliases/(?P<alias>[^/]+)$"), "get_alias"),
]


class LambdaApiServer:
    """A ThreadingHTTPServer answering the Lambda REST API for an :class:`Emulator`.

    Parameters
    ----------
    emulator : Emulator
    host : str
        Bind address (127.0.0.1).
    port : int
        0 = an ephemeral port; read :attr:`endpoint` after :meth:`start`.
    """

    name = "lambda"

    def __init__(self, emulator: Emulator, host: str = "127.0.0.1", port: int = 0) -> None:
        self.emulator = emulator
        self._host = host
        self._port = port
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def endpoint(self) -> str:
        if self._server is None:
            raise RuntimeError("the Lambda API server is not started")
        return f"http://{self._host}:{self._server.server_port}"

    def start(self) -> None:
        emulator = self.emulator

        class Handler(_LambdaHandler):
            pass

        Handler.emulator = emulator
        self._server, self._thread = serve_in_background(self._host, self._port, Handler, "lambda-api")

    def stop(self) -> None:
        shutdown(self._server, self._thread)


def _function_config(emulator: Emulator, name: str, qualifier: str | None) -> dict[str, Any]:
    fs, version, _alias = emulator.resolve(name, qualifier)
    spec = fs.spec
    out: dict[str, Any] = {
        "FunctionName": spec.name,
        "FunctionArn": emulator.arn(spec.name, None if version == "$LATEST" else version),
        "Runtime": spec.runtime,
        "Handler": spec.handler,
        "MemorySize": spec.memory_mb,
        "Timeout": int(spec.timeout_s) if float(spec.timeout_s).is_integer() else spec.timeout_s,
        "Version": version,
        "State": "Active",
        "PackageType": "Zip",
        "Environment": {"Variables": dict(spec.environment)},
        "SnapStart": {
            "ApplyOn": "PublishedVersions" if spec.snap_start else "None",
            "OptimizationStatus": "On" if spec.snap_start and version != "$LATEST" else "Off",
        },
    }
    capacity = emulator.capacity_provider_config(spec.name)
    if capacity is not None:
        out["CapacityProviderConfig"] = capacity
    return out


def _invoke_complete(stream: ResponseStream, *, tail: bool) -> bytes:
    """The ``InvokeComplete`` event that ends ``stream`` (see the module docstring)."""
    result = stream.result
    code: str | None = None
    details: str | None = None
    if stream.error is not None:
        code, error = stream.error
        message = error.get("errorMessage")
        details = message if isinstance(message, str) else json.dumps(error)
    elif result is not None and result.function_error:
        code = result.function_error
        details = result.payload.decode("utf-8", "replace")
    return eventstream.invoke_complete(error_code=code, error_details=details,
                                       log_result=result.log_tail() if tail and result is not None else "")


class _LambdaHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # one response, no 40 ms delayed-ACK stall between header and body writes
    emulator: Emulator
    server_version = "warmstart-local-lambda"

    def log_message(self, format: str, *args: Any) -> None:
        _LOG.debug(format, *args)

    def _dispatch(self) -> None:
        request_id = str(uuid.uuid4())
        parts = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        try:
            for method, pattern, op in _ROUTES:
                match = pattern.match(parts.path)
                if match and method == self.command:
                    groups = {k: unquote(v) for k, v in match.groupdict().items() if v is not None}
                    getattr(self, f"_op_{op}")(groups, query, body, request_id)
                    return
            self._send_json(404, {"Type": "User", "Message": f"No route for {self.command} {parts.path}"},
                            request_id, error_type="UnknownOperationException")
        except LambdaApiError as exc:
            self._send_json(exc.status, exc.body(), request_id, error_type=exc.error_type)
        except Exception:  # noqa: BLE001 (an emulator bug: answer as ServiceException)
            # the log has the traceback; the body names no internal detail (issue 13)
            _LOG.exception("Lambda API %s %s failed (request id %s)", self.command, self.path,
                           request_id)
            self._send_json(500, {"Type": "Service", "Message": (
                f"internal error of the local Lambda API (request id {request_id}); the "
                "emulator's log has the details")}, request_id, error_type="ServiceException")

    do_GET = do_POST = do_PUT = do_DELETE = _dispatch

    # ---- responses --------------------------------------------------------------------------
    def _send(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body:
            self.wfile.write(body)

    def _send_json(self, status: int, data: Any, request_id: str, *, error_type: str | None = None) -> None:
        headers = {"Content-Type": "application/json", "x-amzn-RequestId": request_id}
        if error_type:
            headers["x-amzn-ErrorType"] = error_type
        body = b"" if data is None else json.dumps(data).encode()
        self._send(status, body, headers)

    @staticmethod
    def _json_body(body: bytes) -> dict[str, Any]:
        try:
            data = json.loads(body or b"{}")
        except ValueError as exc:
            raise InvalidRequestContentException(f"Could not parse request body into json: {exc}") from exc
        if not isinstance(data, dict):
            raise InvalidRequestContentException("Request body must be a JSON object")
        return data

    # ---- operations -------------------------------------------------------------------------
    def _op_invoke(self, g: dict[str, str], q: dict[str, str], body: bytes, request_id: str) -> None:
        result: InvokeResult = self.emulator.invoke(
            g["name"], body, qualifier=q.get("Qualifier"),
            invocation_type=self.headers.get("X-Amz-Invocation-Type") or "RequestResponse",
            client_context=self.headers.get("X-Amz-Client-Context"))
        headers = {"Content-Type": "application/json", "x-amzn-RequestId": result.request_id,
                   "X-Amz-Executed-Version": result.executed_version}
        if result.function_error:
            headers["X-Amz-Function-Error"] = result.function_error
        if (self.headers.get("X-Amz-Log-Type") or "").lower() == "tail":
            headers["X-Amz-Log-Result"] = result.log_tail()
        if result.environment_id:
            headers["X-Warmstart-Environment-Id"] = result.environment_id
        if result.init_type:
            headers["X-Warmstart-Init-Type"] = result.init_type
        headers["X-Warmstart-Cold-Start"] = str(result.cold_start).lower()
        headers["X-Warmstart-Spillover"] = str(result.spillover).lower()
        if result.report is not None:
            r = result.report
            headers["X-Warmstart-Report"] = json.dumps({
                "duration_ms": round(r.duration_ms, 3), "billed_duration_ms": r.billed_duration_ms,
                "memory_size_mb": r.memory_size_mb, "max_memory_used_mb": r.max_memory_used_mb,
                "init_duration_ms": r.init_duration_ms, "restore_duration_ms": r.restore_duration_ms,
                # None while extensions still work after the response (REPORT not final yet)
                "post_runtime_extensions_duration_ms": r.post_runtime_extensions_duration_ms,
                "status": r.status})
        self._send(result.status_code, result.payload, headers)

    def _op_invoke_stream(self, g: dict[str, str], q: dict[str, str], body: bytes, request_id: str) -> None:
        name, qualifier = g["name"], q.get("Qualifier")
        client_context = self.headers.get("X-Amz-Client-Context")
        invocation_type = self.headers.get("X-Amz-Invocation-Type") or "RequestResponse"
        if invocation_type == "DryRun":
            result = self.emulator.invoke(name, body, qualifier=qualifier, invocation_type="DryRun",
                                          client_context=client_context)
            self._send(204, b"", {"x-amzn-RequestId": request_id,
                                  "X-Amz-Executed-Version": result.executed_version})
            return
        if invocation_type != "RequestResponse":
            raise InvalidParameterValueException(
                f"Invalid InvocationType {invocation_type!r} for InvokeWithResponseStream: use "
                "RequestResponse or DryRun")
        version = self.emulator.resolve(name, qualifier)[1]
        stream = self.emulator.invoke_stream(name, body, qualifier=qualifier, client_context=client_context)
        chunks = iter(stream)
        try:
            first = next(chunks, None)  # an Invoke error before the first byte is answered as Invoke's
        except BaseException:
            stream.close()
            raise
        self.send_response(200)
        self.send_header("Content-Type", eventstream.CONTENT_TYPE)
        self.send_header("x-amzn-RequestId", request_id)
        self.send_header("X-Amz-Executed-Version", version)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            if first is not None:
                for message in eventstream.payload_chunk(first):
                    write_chunk(self.wfile, message)
                for chunk in chunks:
                    for message in eventstream.payload_chunk(chunk):
                        write_chunk(self.wfile, message)
            write_chunk(self.wfile, _invoke_complete(
                stream, tail=(self.headers.get("X-Amz-Log-Type") or "").lower() == "tail"))
            end_chunks(self.wfile)
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
            _LOG.info("InvokeWithResponseStream %s: the client went away (request id %s)", name, request_id)
            self.close_connection = True
            stream.close()
        except Exception:  # noqa: BLE001 - the 200 is sent: no error answer can follow, the connection ends
            _LOG.exception("InvokeWithResponseStream %s failed mid-stream (request id %s)", name, request_id)
            self.close_connection = True
            stream.close()

    def _op_put_pc(self, g: dict[str, str], q: dict[str, str], body: bytes, request_id: str) -> None:
        data = self._json_body(body)
        view = self.emulator.put_provisioned_concurrency(
            g["name"], q.get("Qualifier"), data.get("ProvisionedConcurrentExecutions"))  # type: ignore[arg-type]
        view.pop("FunctionArn", None)
        self._send_json(202, view, request_id)

    def _op_get_pc(self, g: dict[str, str], q: dict[str, str], body: bytes, request_id: str) -> None:
        if q.get("List") == "ALL":
            configs = self.emulator.list_provisioned_concurrency(g["name"])
            self._send_json(200, {"ProvisionedConcurrencyConfigs": configs}, request_id)
            return
        view = self.emulator.get_provisioned_concurrency(g["name"], q.get("Qualifier"))
        view.pop("FunctionArn", None)
        self._send_json(200, view, request_id)

    def _op_delete_pc(self, g: dict[str, str], q: dict[str, str], body: bytes, request_id: str) -> None:
        self.emulator.delete_provisioned_concurrency(g["name"], q.get("Qualifier"))
        self._send_json(204, None, request_id)

    def _op_put_scaling(self, g: dict[str, str], q: dict[str, str], body: bytes, request_id: str) -> None:
        data = self._json_body(body)
        answer = self.emulator.put_function_scaling_config(g["name"], q.get("Qualifier"),
                                                           data.get("FunctionScalingConfig"))
        self._send_json(202, answer, request_id)

    def _op_get_scaling(self, g: dict[str, str], q: dict[str, str], body: bytes, request_id: str) -> None:
        self._send_json(200, self.emulator.get_function_scaling_config(g["name"], q.get("Qualifier")),
                        request_id)

    def _op_put_concurrency(self, g: dict[str, str], q: dict[str, str], body: bytes, request_id: str) -> None:
        data = self._json_body(body)
        value = self.emulator.put_function_concurrency(g["name"], data.get("ReservedConcurrentExecutions"))  # type: ignore[arg-type]
        self._send_json(200, {"ReservedConcurrentExecutions": value}, request_id)

    def _op_get_concurrency(self, g: dict[str, str], q: dict[str, str], body: bytes, request_id: str) -> None:
        value = self.emulator.get_function_concurrency(g["name"])
        self._send_json(200, {} if value is None else {"ReservedConcurrentExecutions": value}, request_id)

    def _op_delete_concurrency(self, g: dict[str, str], q: dict[str, str], body: bytes, request_id: str) -> None:
        self.emulator.delete_function_concurrency(g["name"])
        self._send_json(204, None, request_id)

    def _op_account_settings(self, g: dict[str, str], q: dict[str, str], body: bytes, request_id: str) -> None:
        self._send_json(200, self.emulator.account_settings(), request_id)

    def _op_list_functions(self, g: dict[str, str], q: dict[str, str], body: bytes, request_id: str) -> None:
        configs = [_function_config(self.emulator, f.name, None) for f in self.emulator.functions()]
        self._send_json(200, {"Functions": configs}, request_id)

    def _op_get_function(self, g: dict[str, str], q: dict[str, str], body: bytes, request_id: str) -> None:
        config = _function_config(self.emulator, g["name"], q.get("Qualifier"))
        out: dict[str, Any] = {"Configuration": config, "Code": {"RepositoryType": "S3"}}
        reserved = self.emulator.get_function_concurrency(g["name"])
        if reserved is not None:
            out["Concurrency"] = {"ReservedConcurrentExecutions": reserved}
        self._send_json(200, out, request_id)

    def _op_get_configuration(self, g: dict[str, str], q: dict[str, str], body: bytes, request_id: str) -> None:
        self._send_json(200, _function_config(self.emulator, g["name"], q.get("Qualifier")), request_id)

    def _aliases(self, name: str) -> list[dict[str, str]]:
        fs = self.emulator.function_state(name)
        return [{"AliasArn": self.emulator.arn(fs.spec.name, alias), "Name": alias,
                 "FunctionVersion": version} for alias, version in sorted(fs.aliases.items())]

    def _op_list_aliases(self, g: dict[str, str], q: dict[str, str], body: bytes, request_id: str) -> None:
        self._send_json(200, {"Aliases": self._aliases(g["name"])}, request_id)

    def _op_get_alias(self, g: dict[str, str], q: dict[str, str], body: bytes, request_id: str) -> None:
        for alias in self._aliases(g["name"]):
            if alias["Name"] == g["alias"]:
                self._send_json(200, alias, request_id)
                return
        raise ResourceNotFoundException(
            f"Alias not found: {self.emulator.arn(g['name'].split(':')[-1], g['alias'])}")
