"""`functions.runtime.request_context.read_payload`: the body the ``validate`` hook gets."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from functions.runtime import events
from functions.runtime.errors import BadRequest
from functions.runtime.request_context import read_payload


def _echo(body: Any) -> dict[str, Any]:
    return {"body": body}


def _from_bytes(event: dict[str, Any]) -> Any:
    """What the hook got when the body was always parsed as its UTF-8 bytes."""
    raw = events.request_body(event)
    if not raw.strip():
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return "refused"


@pytest.mark.parametrize("body", [
    '{"text": "where is my order?"}',
    '  [1, 2, {"a": "caf\u00e9 \u2603"}]\n',
    "\ufeff{\"bom\": true}",  # json.loads of bytes takes a UTF-8 BOM, of a str it does not
    "\x00{}",  # bytes starting with NUL read as UTF-16/32
    "{\x00}",
    " \t\r\n\x0b\x0c",  # blank as bytes.strip() says
    "\u00a0",  # not blank for bytes.strip(): not JSON either
    "\u2028{}",
    "nope",
    '"\\ud800"',  # a lone surrogate escape decodes the same either way
])
@pytest.mark.parametrize("encoded", [False, True])
def test_the_payload_is_what_parsing_the_bodys_utf8_bytes_gives(body: str, encoded: bool) -> None:
    # GIVEN a text or base64 body
    event: dict[str, Any] = {"body": body, "isBase64Encoded": False}
    if encoded:
        event = {"body": base64.b64encode(body.encode("utf-8")).decode("ascii"), "isBase64Encoded": True}
    expected = _from_bytes(event)
    # WHEN the hook reads it, THEN it gets what the bytes parse to (or the same 400)
    if expected == "refused":
        with pytest.raises(BadRequest):
            read_payload(event, _echo)
    else:
        assert read_payload(event, _echo) == {"body": expected}


def test_no_body_is_none() -> None:
    assert read_payload({"body": None}, _echo) == {"body": None}
    assert read_payload({}, _echo) == {"body": None}
