"""The reference intent agent's hooks: payload check, degraded answer, overflow answer check,
downstream work, and the model loader (declared in `functions.agent.handler`).

Imported by the toolkit's preload stage, not at init; imports only the standard library and
`functions.intent_model` at module level (the model loader imports onnxruntime when called).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from functions.intent_model.answers import (
    DEGRADED_MODEL_NAME,
    BodyError,
    check_intent_answer,
    intent_answer,
    parse_intent_body,
)
from functions.runtime.agent import AgentRuntime, BadRequest

#: The agent's own settings (environment variables, read through ``runtime.settings``).
MODEL_DIR_SETTING = "WARMSTART_MODEL_DIR"
INTENTS_FILE_SETTING = "WARMSTART_INTENTS_FILE"


class LoadedModel(NamedTuple):
    """What the model loader returns (``runtime.model()`` in the app)."""

    classifier: Any
    intents: dict[str, list[str]]
    load_ms: float


class _Intents:
    """The intents the degraded answer and the overflow check use (loaded once, lazily)."""

    value: dict[str, list[str]] | None = None
    path: Path | None = None


def intents_path(settings: Mapping[str, str]) -> Path | None:
    """``WARMSTART_INTENTS_FILE`` (None: the packaged intents)."""
    raw = settings.get(INTENTS_FILE_SETTING, "").strip()
    return Path(raw) if raw else None


def intents(path: Path | None = None) -> dict[str, list[str]]:
    """The intents file's intents (cached per execution environment)."""
    if _Intents.value is None or path != _Intents.path:
        from functions.intent_model.model import load_intents

        _Intents.value, _Intents.path = load_intents(path), path
    return _Intents.value


def load_model(runtime: AgentRuntime) -> LoadedModel:
    """Load the embedding session and the classifier, and run one warm-up inference.

    Model folder: ``WARMSTART_MODEL_DIR`` (the deploy sets ``/opt/model``, the model layer),
    else ``/opt/model`` when it exists, else the repository's ``layers/model/artifact``.
    """
    from functions.intent_model import model as intent_model

    path = intents_path(runtime.settings)
    embedding = intent_model.EmbeddingModel.load(
        intent_model.default_model_dir(runtime.settings), intra_op_threads=1)
    classifier = intent_model.IntentClassifier(embedding, intents(path))
    classifier.classify("warm up")  # the first run allocates the session's buffers
    return LoadedModel(classifier, intents(path), float(embedding.load_ms))


def intent_payload(body: Any) -> dict[str, Any]:
    """``validate`` of ``POST /v1/intent``: the intent contract (`parse_intent_body`).

    Raises
    ------
    BadRequest
        The contract's status and message (400 / 413 / 422).
    """
    try:
        return parse_intent_body(body).payload()
    except BodyError as exc:
        raise BadRequest(exc.message, status=exc.status, code=exc.code) from None


def intent_downstream_ms(payload: Mapping[str, Any]) -> float:
    """``downstream_ms``: the request's simulated tool call (``tool_ms``), ms."""
    return float(payload.get("tool_ms", 0.0))


def _deployed_intents(runtime: AgentRuntime | None) -> dict[str, list[str]]:
    """The intents of this deployment (``WARMSTART_INTENTS_FILE`` from the runtime's settings:
    a cold start degrades or overflows before the model loader ran); without a runtime, the
    last ones loaded (the packaged intents at first)."""
    return intents(intents_path(runtime.settings) if runtime is not None else _Intents.path)


def intent_degraded(payload: Mapping[str, Any], runtime: AgentRuntime | None = None) -> dict[str, Any]:
    """The cheaper answer: lexical nearest prototype, no model, no tool call (that is what
    makes it cheaper); over the deployed intents."""
    from functions.intent_model.model import lexical_classify

    return intent_answer(lexical_classify(str(payload["text"]), _deployed_intents(runtime)),
                         model=DEGRADED_MODEL_NAME)


def intent_overflow_answer(answer: Any, runtime: AgentRuntime | None = None) -> dict[str, Any]:
    """``overflow_answer``: the intent answer's shape, an intent of the deployed set, only the
    contract's fields (raises ``ValueError``; `check_intent_answer`)."""
    return check_intent_answer(answer, known_intents=_deployed_intents(runtime))
