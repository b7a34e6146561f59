"""The reference agent's route hooks (`functions.agent.hooks`) and the intent answer check.

The overflow answer check is the intent contract's (`functions.intent_model.answers`), wired per
route (``Route(overflow_answer=...)``); the toolkit wraps it so a rejection is an overflow
``model_error`` and admission falls back.
"""

from __future__ import annotations

import pytest

from functions.agent import hooks
from functions.agent.handler import agent as intent_agent
from functions.intent_model.answers import DEGRADED_MODEL_NAME, MODEL_NAME, check_intent_answer
from functions.runtime.overflow import OverflowModelError, checked

GOOD = {"intent": "refund_request", "score": 0.5, "scores": {"refund_request": 0.5}, "degraded": False,
        "model": MODEL_NAME}


def test_the_intent_route_declares_its_hooks() -> None:
    (intent,) = [r for r in intent_agent.routes if r.path == "/v1/intent"]
    assert intent.needs_model and intent.degradable and intent.tier == "P0"
    assert intent.validate == "functions.agent.hooks:intent_payload"
    assert intent.overflow_answer == "functions.agent.hooks:intent_overflow_answer"
    assert intent.downstream_ms == "functions.agent.hooks:intent_downstream_ms"


def test_intent_answer_check_names_the_first_problem() -> None:
    check = checked(check_intent_answer)
    assert check(GOOD) == GOOD
    for bad, message in [
        ([1], "is list"),
        ({"score": 1, "scores": {}}, "no string 'intent'"),
        ({"intent": "a", "score": True, "scores": {}}, "no numeric 'score'"),
        ({"intent": "a", "score": 1, "scores": {"a": "x"}}, "'scores' object of numbers"),
    ]:
        with pytest.raises(OverflowModelError, match=message) as info:
            check(bad)
        assert info.value.tag == "model_error"


def test_overflow_answer_hook_knows_the_agents_intents_and_drops_extra_fields() -> None:
    check = checked(hooks.intent_overflow_answer)
    assert check({**GOOD, "debug": "from the endpoint"}) == GOOD
    with pytest.raises(OverflowModelError, match="unknown intent 'launch_rocket'"):
        check({**GOOD, "intent": "launch_rocket"})
    with pytest.raises(OverflowModelError, match="scores unknown intents"):
        check({**GOOD, "scores": {"refund_request": 0.5, "launch_rocket": 0.1}})
    assert check({**GOOD, "intent": "unknown", "scores": {}})["intent"] == "unknown"


def test_degraded_answer_is_lexical_and_needs_no_model() -> None:
    answer = hooks.intent_degraded({"text": "I want my money back", "tool_ms": 5000.0})
    assert answer["model"] == DEGRADED_MODEL_NAME and answer["degraded"] is True
    assert answer["intent"] in hooks.intents() or answer["intent"] == "unknown"
    assert set(answer["scores"]) <= set(hooks.intents())
