"""Warm pings through the real boto3 Lambda client against a local HTTP server that speaks the
Lambda Invoke REST path and, like Lambda, runs one invocation per execution environment at a
time (an environment is busy while it holds a ping)."""

from __future__ import annotations

import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import boto3
import pytest
from botocore.config import Config

from warmers.actuators import WarmPingActuator, ping_payload
from warmers.plan.policy import WarmPlan

NOW = 1_800_000_000.0


class FakeLambdaPool:
    """Execution environments: a free one is reused, else a new one starts (cold)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.free: list[str] = []
        self.all: set[str] = set()
        self.paths: list[str] = []
        self.bodies: list[dict] = []


def _server(pool: FakeLambdaPool) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with pool.lock:
                pool.paths.append(self.path)
                pool.bodies.append(body)
                cold = not pool.free
                env = pool.free.pop() if pool.free else str(uuid.uuid4())
                pool.all.add(env)
            time.sleep(body["warmstart"]["hold_ms"] / 1000)
            with pool.lock:
                pool.free.append(env)
            out = json.dumps({"warmstart": {"pong": True, "environment_id": env,
                                            "init_type": "on-demand", "cold_start": cold}})
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out.encode())

        def log_message(self, *args: object) -> None:
            pass

    return ThreadingHTTPServer(("127.0.0.1", 0), Handler)


@pytest.fixture
def lambda_endpoint():
    pool = FakeLambdaPool()
    server = _server(pool)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    client = boto3.client("lambda", region_name="us-east-1", aws_access_key_id="x",
                          aws_secret_access_key="x",
                          endpoint_url=f"http://127.0.0.1:{server.server_address[1]}",
                          config=Config(max_pool_connections=20, retries={"max_attempts": 1}))
    yield client, pool
    server.shutdown()
    server.server_close()
    thread.join(5)


def ping_plan(n: int, interval_s: int = 300) -> WarmPlan:
    return WarmPlan("agent", "live", "ping", 0, n, interval_s, 0.0, 1.0, "idle_histogram", NOW,
                    NOW, "test")


def test_n_concurrent_pings_land_on_n_environments(lambda_endpoint):
    client, pool = lambda_endpoint
    act = WarmPingActuator(client, hold_ms=400)
    res = act.apply(ping_plan(6), now_s=NOW)
    assert res.applied and res.detail == "6 pings: 6 distinct environments, 6 cold"
    assert len(pool.all) == 6
    assert all(p == "/2015-03-31/functions/agent/invocations?Qualifier=live" for p in pool.paths)
    assert pool.bodies[0] == ping_payload(6, 400)
    # not due again before the interval; due after it, and now warm
    assert act.apply(ping_plan(6), now_s=NOW + 60).detail == "pings not due yet"
    res = act.apply(ping_plan(6), now_s=NOW + 300)
    assert res.detail == "6 pings: 6 distinct environments, 0 cold" and len(pool.all) == 6


def test_no_pings_for_other_plans(lambda_endpoint):
    client, pool = lambda_endpoint
    none = WarmPlan("agent", "live", "none", 0, 0, 0, 0.0, 0.0, "-", NOW, NOW, "test")
    assert not WarmPingActuator(client).apply(none, now_s=NOW).applied and not pool.paths
