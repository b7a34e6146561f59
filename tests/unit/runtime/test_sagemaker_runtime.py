"""The overflow call's SageMaker runtime client: awscrt SigV4 over ``http.client`` (issue 20).

botocore's own SigV4 signer (``botocore.auth.SigV4Auth``) is the reference: for the same
request, credentials and clock, awscrt's signature must be the same, and a request as this
client puts it on the wire must verify against it. A stand-in for the SageMaker front end (a
stdlib HTTP server on 127.0.0.1) records what it receives and answers as SageMaker does.
"""

from __future__ import annotations

import datetime as dt
import http.server
import json
import threading
import time
from collections.abc import Iterator
from typing import Any, Self

import botocore.auth
import pytest
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials as BotoCredentials

from functions.runtime import sagemaker_runtime as smr

REGION = "eu-west-1"
FIXED = dt.datetime(2026, 12, 2, 8, 15, 30, tzinfo=dt.UTC)
KEYS = smr.Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
                       "IQoJb3JpZ2luX2VjEXAMPLE//session+token==")


def botocore_signed(method: str, url: str, headers: dict[str, str], body: bytes,
                    credentials: smr.Credentials, region: str,
                    monkeypatch: pytest.MonkeyPatch, when: dt.datetime = FIXED) -> AWSRequest:
    """The request signed by botocore's SigV4Auth at ``when`` (its clock fixed)."""
    monkeypatch.setattr(botocore.auth, "get_current_datetime",
                        lambda *a, **k: when.replace(tzinfo=None))
    request = AWSRequest(method=method, url=url, data=body, headers=dict(headers))
    signer = botocore.auth.SigV4Auth(
        BotoCredentials(credentials.access_key_id, credentials.secret_access_key,
                        credentials.session_token), smr.SIGNING_SERVICE, region)
    signer.add_auth(request)
    return request


@pytest.fixture(autouse=True)
def _fresh_container_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """Container credentials are cached per execution environment: one cache per test."""
    monkeypatch.setattr(smr, "_CONTAINER", smr._ContainerCredentials())


@pytest.mark.parametrize("credentials", [KEYS, smr.Credentials("AKIDEXAMPLE", "secret/+=")],
                         ids=["session-token", "long-term-keys"])
@pytest.mark.parametrize(("base", "host"), [
    (smr.default_endpoint_url(REGION), f"runtime.sagemaker.{REGION}.amazonaws.com"),
    ("http://127.0.0.1:8089", "127.0.0.1:8089"),
], ids=["aws", "local-endpoint"])
@pytest.mark.parametrize("component", [None, "intent-ic-0001"], ids=["endpoint", "component"])
def test_awscrt_signature_equals_botocore_sigv4(
    credentials: smr.Credentials, base: str, host: str, component: str | None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = "/endpoints/warmstart-overflow/invocations"
    body = json.dumps({"text": "my invoice is wrong \u00e9", "tool_ms": 0}).encode()
    headers = {"Host": host, "Content-Type": "application/json", "Accept": "application/json"}
    if component:
        headers[smr.INFERENCE_COMPONENT_HEADER] = component
    ours = dict(smr.sign_headers("POST", path, headers.items(), body, credentials=credentials,
                                 region=REGION, when=FIXED))
    theirs = botocore_signed("POST", base + path, headers, body, credentials, REGION, monkeypatch)
    assert ours["X-Amz-Date"] == theirs.headers["X-Amz-Date"] == "20261202T081530Z"
    assert ours.get("X-Amz-Security-Token") == theirs.headers.get("X-Amz-Security-Token") \
        == credentials.session_token
    assert ours["Authorization"] == theirs.headers["Authorization"]
    assert f"/{REGION}/sagemaker/aws4_request" in ours["Authorization"]
    signed = ours["Authorization"].split("SignedHeaders=", 1)[1].split(",", 1)[0]
    assert ("x-amzn-sagemaker-inference-component" in signed.split(";")) is bool(component)
    # a different body or clock gives a different signature (the comparison is not vacuous)
    other = dict(smr.sign_headers("POST", path, headers.items(), body + b" ",
                                  credentials=credentials, region=REGION, when=FIXED))
    later = dict(smr.sign_headers("POST", path, headers.items(), body, credentials=credentials,
                                  region=REGION, when=FIXED + dt.timedelta(seconds=1)))
    assert len({ours["Authorization"], other["Authorization"], later["Authorization"]}) == 3


# -- a stand-in for the SageMaker front end -------------------------------------------------
class StandIn:
    """Records each request (method, path, headers, body, connection) and answers with
    ``reply(request) -> (status, headers, body)``; ``close_idle`` closes each connection after
    its answer without saying so (as a load balancer's idle timeout does)."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.reply = lambda request: (200, {"Content-Type": "application/json",
                                            smr.INVOKED_VARIANT_HEADER: "AllTraffic"},
                                      b'{"intent": "billing"}')
        self.close_idle = False
        stand_in = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                request = {"method": "POST", "path": self.path, "headers": dict(self.headers),
                           "body": body, "connection": self.client_address}
                stand_in.requests.append(request)
                status, headers, answer = stand_in.reply(request)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)
                self.wfile.flush()
                if stand_in.close_idle:
                    self.close_connection = True

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stand_in() -> Iterator[StandIn]:
    with StandIn() as server:
        yield server


def runtime_for(url: str, credentials: smr.Credentials | None = KEYS,
                when: dt.datetime = FIXED) -> smr.SageMakerRuntime:
    return smr.SageMakerRuntime(region_name=REGION, endpoint_url=url,
                                credentials=lambda: credentials, utc_now=lambda: when)


def test_the_request_sent_verifies_against_botocore(stand_in: StandIn,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """GIVEN the client's call as the endpoint receives it WHEN botocore signs the same
    method, URL, signed headers and body at the same X-Amz-Date THEN its signature is the one
    received: what is sent is what was signed (path, Host with its port, body)."""
    runtime = runtime_for(stand_in.url)
    response = runtime.client(0.5, 2.0).invoke_endpoint(
        EndpointName="warmstart-overflow", Body=b'{"text":"hi"}', ContentType="application/json",
        Accept="application/json", InferenceComponentName="intent-ic")
    assert response["Body"].read(1024) == b'{"intent": "billing"}'
    assert response["InvokedProductionVariant"] == "AllTraffic"
    (received,) = stand_in.requests
    assert received["path"] == "/endpoints/warmstart-overflow/invocations"
    headers = {k.lower(): v for k, v in received["headers"].items()}
    assert headers["x-amzn-sagemaker-inference-component"] == "intent-ic"
    authorization = headers["authorization"]
    signed_names = authorization.split("SignedHeaders=", 1)[1].split(",", 1)[0].split(";")
    assert "host" in signed_names and "user-agent" not in signed_names
    to_sign = {name: headers[name] for name in signed_names
               if name not in ("x-amz-date", "x-amz-security-token")}
    reference = botocore_signed("POST", stand_in.url + received["path"], to_sign,
                                received["body"], KEYS, REGION, monkeypatch)
    assert reference.headers["Authorization"] == authorization
    assert headers["x-amz-security-token"] == KEYS.session_token


def test_connections_are_reused_and_a_closed_idle_one_is_replaced(stand_in: StandIn) -> None:
    runtime = runtime_for(stand_in.url)
    client = runtime.client(0.5, 2.0)
    for _ in range(3):
        body = client.invoke_endpoint(EndpointName="ep", Body=b"{}")["Body"]
        assert body.read(1024) == b'{"intent": "billing"}'
    assert len({r["connection"] for r in stand_in.requests}) == 1  # one keep-alive connection
    # WHEN the endpoint closes the connection after an answer, without saying so (an idle
    # timeout) THEN the next call sees it closed, reconnects and succeeds
    stand_in.close_idle = True
    client.invoke_endpoint(EndpointName="ep", Body=b"{}")["Body"].read(1024)
    time.sleep(0.05)  # the peer's FIN reaches the idle socket
    assert client.invoke_endpoint(EndpointName="ep", Body=b"{}")["Body"].read(1024)
    assert [r["connection"] for r in stand_in.requests].count(stand_in.requests[0]["connection"]) == 4
    assert len({r["connection"] for r in stand_in.requests}) == 2
    runtime.close()


@pytest.mark.parametrize(("status", "headers", "body", "code", "message"), [
    (403, {smr.ERROR_TYPE_HEADER: "ExpiredTokenException:http://internal.amazon.com/coral/"},
     b'{"message":"The security token included in the request is expired"}',
     "ExpiredTokenException", "The security token included in the request is expired"),
    (403, {}, (b'{"__type":"com.amazon.coral.service#UnrecognizedClientException",'
              b'"message":"The security token included in the request is invalid."}'),
     "UnrecognizedClientException", "The security token included in the request is invalid."),
    (424, {smr.ERROR_TYPE_HEADER: "ModelError"}, b'{"Message":"boom","OriginalStatusCode":500}',
     "ModelError", "boom"),
    (503, {}, b"<html>Service Unavailable</html>", "", "<html>Service Unavailable</html>"),
])
def test_error_answers_become_service_errors_and_keep_the_connection(
    stand_in: StandIn, status: int, headers: dict[str, str], body: bytes, code: str, message: str,
) -> None:
    stand_in.reply = lambda request: (status, {"Content-Type": "application/json", **headers},
                                      body)
    client = runtime_for(stand_in.url).client(0.5, 2.0)
    for _ in range(2):
        with pytest.raises(smr.ServiceError) as info:
            client.invoke_endpoint(EndpointName="ep", Body=b"{}")
        assert (info.value.status, info.value.code, info.value.message) == (status, code, message)
    assert len({r["connection"] for r in stand_in.requests}) == 1


def test_without_credentials_or_region_nothing_is_sent(stand_in: StandIn) -> None:
    with pytest.raises(smr.NoCredentials, match="AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"):
        runtime_for(stand_in.url, credentials=None).invoke_endpoint(EndpointName="ep", Body=b"")
    no_region = smr.SageMakerRuntime(endpoint_url=stand_in.url, environ={},
                                     credentials=lambda: KEYS)
    with pytest.raises(smr.NoRegion, match="set AWS_REGION"):
        no_region.invoke_endpoint(EndpointName="ep", Body=b"")
    assert stand_in.requests == []
    with pytest.raises(ValueError, match="http"):
        smr.SageMakerRuntime(region_name=REGION, endpoint_url="ftp://example.com")


def test_refused_connection_and_slow_answer_are_network_errors(stand_in: StandIn) -> None:
    from functions.gpu_endpoint.server import bind_socket

    sock = bind_socket()
    closed_port = sock.getsockname()[1]
    sock.close()
    with pytest.raises(smr.EndpointUnreachable, match="unreachable"):
        runtime_for(f"http://127.0.0.1:{closed_port}").invoke_endpoint(EndpointName="e", Body=b"")
    release = threading.Event()

    def slow(request: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        release.wait(2.0)
        return 200, {}, b"{}"

    stand_in.reply = slow
    try:
        with pytest.raises(smr.ReadTimeout, match="no answer within 0.2 s"):
            runtime_for(stand_in.url).invoke_endpoint(EndpointName="e", Body=b"",
                                                      read_timeout_s=0.2)
    finally:
        release.set()


def test_credentials_come_from_the_environment_as_lambda_sets_them() -> None:
    env = {"AWS_ACCESS_KEY_ID": "AKID", "AWS_SECRET_ACCESS_KEY": "secret",
           "AWS_SESSION_TOKEN": "token"}
    assert smr.environment_credentials(env) == smr.Credentials("AKID", "secret", "token")
    assert smr.environment_credentials({**env, "AWS_SESSION_TOKEN": ""}) == \
        smr.Credentials("AKID", "secret", None)
    assert smr.environment_credentials({"AWS_ACCESS_KEY_ID": "AKID"}) is None
    assert smr.environment_credentials({}) is None
    assert "secret" not in repr(smr.environment_credentials(env))
    assert "token" not in repr(smr.environment_credentials(env))


def test_container_credentials_are_used_when_no_keys_are_set() -> None:
    """GIVEN no access keys but Lambda's container credentials URI and token (as under
    SnapStart) WHEN credentials are read THEN they come from that URI, with the token sent."""
    seen: list[str | None] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            seen.append(self.headers.get("Authorization"))
            answer = json.dumps({"AccessKeyId": "ASIACONTAINER", "SecretAccessKey": "s3cret",
                                 "Token": "container-token",
                                 "Expiration": "2099-01-01T00:00:00Z"}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        env = {"AWS_CONTAINER_CREDENTIALS_FULL_URI":
               f"http://127.0.0.1:{server.server_address[1]}/2021-04-23/credentials",
               "AWS_CONTAINER_AUTHORIZATION_TOKEN": "lambda-auth-token"}
        first = smr.environment_credentials(env)
        assert first == smr.Credentials("ASIACONTAINER", "s3cret", "container-token")
        assert smr.environment_credentials(env) == first  # cached, not fetched again
        assert seen == ["lambda-auth-token"]
    finally:
        server.shutdown()
        server.server_close()
