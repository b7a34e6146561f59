from __future__ import annotations

import pytest

from functions.runtime import pings
from functions.runtime.errors import BadRequest


def test_contract_payload_parses() -> None:
    ping = pings.parse_ping({"warmstart": {"ping": True, "concurrency": 3, "hold_ms": 75}})
    assert ping == pings.WarmPing(concurrency=3, hold_ms=75)
    assert pings.parse_ping({"warmstart": {"ping": True}}) == pings.WarmPing(1, 0)


@pytest.mark.parametrize(
    ("marker", "message"),
    [
        ({"ping": "yes"}, 'a warm ping is {"warmstart": {"ping": true'),
        ("ping", 'a warm ping is {"warmstart": {"ping": true'),
        ({"ping": True, "concurrency": 0}, "warm ping field 'concurrency' must be an integer in [1, 1000], got 0"),
        ({"ping": True, "hold_ms": 5000}, "warm ping field 'hold_ms' must be an integer in [0, 1000], got 5000"),
        ({"ping": True, "hold_ms": True}, "warm ping field 'hold_ms' must be an integer in [0, 1000], got True"),
    ],
)
def test_bad_markers_are_rejected_with_the_expected_shape(marker: object, message: str) -> None:
    with pytest.raises(BadRequest) as info:
        pings.parse_ping({"warmstart": marker})
    assert str(info.value).startswith(message)


def test_pong_has_the_contract_fields() -> None:
    answer = pings.pong(environment_id="e", init_type="on-demand", cold_start=True, ready=False, held_ms=75.04)
    assert answer == {
        "warmstart": {
            "pong": True,
            "environment_id": "e",
            "init_type": "on-demand",
            "cold_start": True,
            "ready": False,
            "held_ms": 75.04,
        }
    }
