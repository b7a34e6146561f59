"""Locust load test for the warmstart agents: the local gateway or a deployed HTTP API.

Run against the local stack (``warmstart local up`` prints the gateway URL)::

    .venv/bin/locust -f bench/locustfile.py --host http://127.0.0.1:PORT \
        --headless -u 20 -r 2 -t 5m --csv out/locust

or against a deployed stack (the ``HttpApiUrl`` output of ``cdk deploy``)::

    .venv/bin/locust -f bench/locustfile.py --host https://abc123.execute-api.us-east-1.amazonaws.com

Two kinds of users, one per agent, 3:1 when both run (``WARMSTART_LOCUST_AGENTS``):

* ``IntentUser``, the reference intent agent at the root: task mix 8:1:1:1, mostly asks the
  agent to route a message (``POST /v1/intent``); now and then asks for a routing report over a
  batch (``POST /v1/report``, tier P2: off from degradation level L1), reads ``/capabilities``
  (a front end greying out disabled features) and ``/healthz``;
* ``LookupUser``, the model-free lookup agent under ``/lookup`` (the prefix the gateway serves
  it under): task mix 6:3:1:1, asks for an order's status (``POST /lookup/v1/lookup``, P0,
  degradable; it calls the order service), reads it by path (``GET /lookup/v1/orders/{id}``,
  P1), ``/lookup/capabilities`` and ``/lookup/healthz``. Order ids come from a small pool, so
  the agent's per-environment cache serves some of them.

Think time between requests is 2-8 s, uniform, as a person reading an answer and typing the
next message. Every response's ``X-Warmstart-Path`` (local, overflow, degraded, shed) is counted
as its own Locust request name suffix so the statistics show how requests were served; a 503
with ``Retry-After`` is a graceful shed, reported as a failure so it stays visible.

Environment variables
---------------------
WARMSTART_LOCUST_MIN_WAIT_S, WARMSTART_LOCUST_MAX_WAIT_S
    Override the 2-8 s think time (e.g. ``0`` and ``0.5`` for a stress test).
WARMSTART_LOCUST_AGENTS
    Comma-separated agents to load (default ``intent``; ``intent,lookup`` for the local stack or a
    deployed stack that serves both: the lookup agent answers only where it is deployed).
WARMSTART_LOCUST_LOOKUP_PREFIX
    Path prefix of the lookup agent (default ``/lookup``, its ``path_prefix`` in ``cdk.json``).
"""

from __future__ import annotations

import os
import random
from typing import Any

from locust import HttpUser, between, task

from functions.runtime.contract import environment as names

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

#: Order ids a lookup user asks about (the order service answers any well-formed id).
ORDER_IDS: tuple[str, ...] = tuple(f"A-{1000 + i}" for i in range(40))

_MIN_WAIT_S = float(os.environ.get(names.ENV_LOCUST_MIN_WAIT_S, "2"))
_MAX_WAIT_S = float(os.environ.get(names.ENV_LOCUST_MAX_WAIT_S, "8"))
_LOOKUP_PREFIX = "/" + os.environ.get(names.ENV_LOCUST_LOOKUP_PREFIX, "/lookup").strip("/")
_KNOWN_AGENTS = ("intent", "lookup")
_AGENTS = {a.strip() for a in os.environ.get(names.ENV_LOCUST_AGENTS, "intent").split(",") if a.strip()}
if not _AGENTS or not _AGENTS <= set(_KNOWN_AGENTS):
    raise ValueError(f"{names.ENV_LOCUST_AGENTS}={os.environ.get(names.ENV_LOCUST_AGENTS)!r}: give a "
                     f"comma-separated list of {', '.join(_KNOWN_AGENTS)}")


def _record_path(response: Any, name: str) -> None:
    """Name the request by the path it was served on; a 503 shed and other 4xx/5xx fail."""
    path = response.headers.get("X-Warmstart-Path", "unknown")
    response.request_meta["name"] = f"{name} [{path}]"
    if response.status_code == 503:
        retry_after = response.headers.get("Retry-After", "?")
        response.failure(f"503 {path}, Retry-After {retry_after} s")
    elif response.status_code >= 400:
        response.failure(f"HTTP {response.status_code}")
    else:
        response.success()


class IntentUser(HttpUser):
    """One person talking to the intent agent (root prefix)."""

    abstract = "intent" not in _AGENTS  # Locust runs only the non-abstract user classes
    weight = 3
    wait_time = between(_MIN_WAIT_S, _MAX_WAIT_S)

    @task(8)
    def classify_intent(self) -> None:
        body = {"text": random.choice(MESSAGES)}
        with self.client.post("/v1/intent", json=body, catch_response=True) as response:
            _record_path(response, "POST /v1/intent")

    @task(1)
    def report(self) -> None:
        body = {"texts": random.sample(MESSAGES, 5)}
        with self.client.post("/v1/report", json=body, catch_response=True) as response:
            _record_path(response, "POST /v1/report")

    @task(1)
    def capabilities(self) -> None:
        with self.client.get("/capabilities", catch_response=True) as response:
            _record_path(response, "GET /capabilities")

    @task(1)
    def healthz(self) -> None:
        with self.client.get("/healthz", catch_response=True) as response:
            _record_path(response, "GET /healthz")


class LookupUser(HttpUser):
    """One person asking the lookup agent (``/lookup``) about orders."""

    abstract = "lookup" not in _AGENTS
    weight = 1
    wait_time = between(_MIN_WAIT_S, _MAX_WAIT_S)

    @task(6)
    def lookup(self) -> None:
        body = {"order_id": random.choice(ORDER_IDS)}
        with self.client.post(f"{_LOOKUP_PREFIX}/v1/lookup", json=body, catch_response=True) as response:
            _record_path(response, "POST /lookup/v1/lookup")

    @task(3)
    def order(self) -> None:
        order_id = random.choice(ORDER_IDS)
        with self.client.get(f"{_LOOKUP_PREFIX}/v1/orders/{order_id}", catch_response=True) as response:
            _record_path(response, "GET /lookup/v1/orders/{id}")

    @task(1)
    def capabilities(self) -> None:
        with self.client.get(f"{_LOOKUP_PREFIX}/capabilities", catch_response=True) as response:
            _record_path(response, "GET /lookup/capabilities")

    @task(1)
    def healthz(self) -> None:
        with self.client.get(f"{_LOOKUP_PREFIX}/healthz", catch_response=True) as response:
            _record_path(response, "GET /lookup/healthz")
