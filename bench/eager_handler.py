"""Baseline for ``bench_init``: the handler everyone writes first, doing everything at import.

Imports fastapi, mangum, boto3 and onnxruntime at the top, creates a boto3 client, loads the
model and builds the app before the module finishes importing. Same app and model as the
warmstart handler; only the init strategy differs. Not used in production.
"""

from __future__ import annotations

import os
import time

_STARTED_MS = time.perf_counter() * 1000.0

import boto3
import fastapi  # noqa: F401
import onnxruntime  # noqa: F401
from mangum import Mangum

from functions.agent import model as agent_model
from functions.agent.app import create_app
from functions.runtime import lifecycle
from functions.runtime.config import RuntimeConfig
from functions.runtime.routes import RouteRegistry, RouteSpec

# the same routes as functions/agent/handler.py (importing it would start its own init)
ROUTES = RouteRegistry(
    [
        RouteSpec("intent", "POST", "/v1/intent", "P0", degradable=True, needs_model=True),
        RouteSpec("capabilities", "GET", "/capabilities", "P1"),
        RouteSpec("healthz", "GET", "/healthz", "P1"),
        RouteSpec("debug_resource", "GET", "/debug/resource", "P2"),
    ]
)

CONFIG = RuntimeConfig.from_env(os.environ)
ENVIRONMENT = lifecycle.ExecutionEnvironment(CONFIG.init_type, _STARTED_MS)
SSM = boto3.client("ssm", region_name=CONFIG.region or "us-east-1")
EMBEDDING = agent_model.EmbeddingModel.load(CONFIG.model_dir, intra_op_threads=1)
INTENTS = agent_model.load_intents(CONFIG.intents_file)
CLASSIFIER = agent_model.IntentClassifier(EMBEDDING, INTENTS)
CLASSIFIER.classify("warm up")


class _Loaded:
    classifier = CLASSIFIER
    intents = INTENTS
    load_ms = float(EMBEDDING.load_ms)


APP = create_app(config=CONFIG, environment=ENVIRONMENT, routes=ROUTES, model=lambda: _Loaded)
handler = Mangum(APP, lifespan="off")
INIT_MS = ENVIRONMENT.finish_init(time.perf_counter() * 1000.0)
