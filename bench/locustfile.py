"""Locust load test for a warmstart agent: the local gateway or a deployed HTTP API.

Run against the local stack (``warmstart local up`` prints the gateway URL)::

    .venv/bin/locust -f bench/locustfile.py --host http://127.0.0.1:PORT \
        --headless -u 20 -r 2 -t 5m --csv out/locust

or against a deployed stack (the ``HttpApiUrl`` output of ``cdk deploy``)::

    .venv/bin/locust -f bench/locustfile.py --host https://abc123.execute-api.us-east-1.amazonaws.com

Task mix (weights 8:1:1:1): a user mostly asks the agent to route a message
(``POST /v1/intent``); now and then asks for a routing report over a batch (``POST /v1/report``,
tier P2: off from degradation level L1), reads ``/capabilities`` (a front end greying out
disabled features) and ``/healthz``.
Think time between requests is 2-8 s, uniform, as a person reading an answer and typing the
next message. Every response's ``X-Warmstart-Path`` (local, overflow, degraded, shed) is counted
as its own Locust request name suffix so the statistics show how requests were served; a 503
with ``Retry-After`` is a graceful shed, reported as a failure so it stays visible.

Environment variables
---------------------
WARMSTART_LOCUST_MIN_WAIT_S, WARMSTART_LOCUST_MAX_WAIT_S
    Override the 2-8 s think time (e.g. ``0`` and ``0.5`` for a stress test).
"""

from __future__ import annotations

import os
import random

from locust import HttpUser, between, task

#: Messages a support/ops agent receives; paraphrases, not the intents' example phrases.
MESSAGES: tuple[str, ...] = (
    "where is my package, it was supposed to arrive yesterday",
    "has my order shipped yet?",
    "please cancel the order I placed this morning",
    "I want my money back for the broken headphones",
    "why was I charged twice on my credit card",
    "the app keeps crashing when I open settings",
    "can I speak with a real person please",
    "hi there!",
    "I need to change the email address on my account",
    "how do I reset my password",
    "my invoice shows the wrong amount",
    "the device will not connect to wifi after the update",
)

_MIN_WAIT_S = float(os.environ.get("WARMSTART_LOCUST_MIN_WAIT_S", "2"))
_MAX_WAIT_S = float(os.environ.get("WARMSTART_LOCUST_MAX_WAIT_S", "8"))


class AgentUser(HttpUser):
    """One person talking to the agent."""

    wait_time = between(_MIN_WAIT_S, _MAX_WAIT_S)

    def _record_path(self, response, name: str) -> None:
        path = response.headers.get("X-Warmstart-Path", "unknown")
        response.request_meta["name"] = f"{name} [{path}]"
        if response.status_code == 503:
            retry_after = response.headers.get("Retry-After", "?")
            response.failure(f"503 {path}, Retry-After {retry_after} s")
        elif response.status_code >= 400:
            response.failure(f"HTTP {response.status_code}")
        else:
            response.success()

    @task(8)
    def classify_intent(self) -> None:
        body = {"text": random.choice(MESSAGES)}
        with self.client.post("/v1/intent", json=body, catch_response=True) as response:
            self._record_path(response, "POST /v1/intent")

    @task(1)
    def report(self) -> None:
        body = {"texts": random.sample(MESSAGES, 5)}
        with self.client.post("/v1/report", json=body, catch_response=True) as response:
            self._record_path(response, "POST /v1/report")

    @task(1)
    def capabilities(self) -> None:
        with self.client.get("/capabilities", catch_response=True) as response:
            self._record_path(response, "GET /capabilities")

    @task(1)
    def healthz(self) -> None:
        with self.client.get("/healthz", catch_response=True) as response:
            self._record_path(response, "GET /healthz")
