"""The event stream encoder, read back with botocore's own decoder (``botocore.eventstream``)."""

from __future__ import annotations

import json
import struct
import zlib

import pytest
from botocore.eventstream import ChecksumMismatch, EventStreamBuffer

from infra.local import eventstream


def _decode(data: bytes) -> list:
    buffer = EventStreamBuffer()
    buffer.add_data(data)
    return list(buffer)


def test_a_payload_chunk_decodes_with_botocore():
    (message,) = _decode(b"".join(eventstream.payload_chunk(b"data: 1\n\n")))
    assert message.headers == {":event-type": "PayloadChunk", ":message-type": "event",
                               ":content-type": "application/octet-stream"}
    assert message.payload == b"data: 1\n\n"


def test_the_layout_is_prelude_headers_payload_crc():
    data = eventstream.encode_message({"a": "b"}, b"xyz")
    total, headers_len, prelude_crc = struct.unpack("!III", data[:12])
    assert total == len(data) == 16 + headers_len + 3
    assert prelude_crc == zlib.crc32(data[:8])
    assert data[12:12 + headers_len] == b"\x01a\x07\x00\x01b"  # name length, name, type 7, length, value
    assert data[-4:] == struct.pack("!I", zlib.crc32(data[:-4]))


def test_a_corrupted_byte_fails_botocores_checksum():
    data = bytearray(eventstream.encode_message({"a": "b"}, b"xyz"))
    data[-5] ^= 0xFF
    with pytest.raises(ChecksumMismatch):
        _decode(bytes(data))


def test_invoke_complete_names_the_error_only_on_failure():
    ok, failed = _decode(eventstream.invoke_complete(log_result="bG9n")
                         + eventstream.invoke_complete(error_code="Runtime.StreamError",
                                                       error_details="boom"))
    assert ok.headers[":event-type"] == "InvokeComplete"
    assert ok.headers[":content-type"] == "application/json"
    assert json.loads(ok.payload) == {"LogResult": "bG9n"}
    assert json.loads(failed.payload) == {"ErrorCode": "Runtime.StreamError", "ErrorDetails": "boom",
                                          "LogResult": ""}


def test_a_chunk_over_the_payload_limit_becomes_several_events(monkeypatch):
    monkeypatch.setattr(eventstream, "MAX_PAYLOAD_BYTES", 4)
    messages = _decode(b"".join(eventstream.payload_chunk(b"0123456789")))
    assert [m.payload for m in messages] == [b"0123", b"4567", b"89"]
    assert list(eventstream.payload_chunk(b"")) == []


@pytest.mark.parametrize(("headers", "payload", "match"), [
    ({"x" * 256: "v"}, b"", "1-255 bytes"),
    ({"": "v"}, b"", "1-255 bytes"),
    ({"n": "v" * 32768}, b"", "value over"),
    ({"n": 7}, b"", "only string values"),
])
def test_what_the_encoding_cannot_carry_is_refused(headers, payload, match):
    with pytest.raises(eventstream.EventStreamEncodeError, match=match):
        eventstream.encode_message(headers, payload)


def test_a_payload_over_the_limit_is_refused(monkeypatch):
    monkeypatch.setattr(eventstream, "MAX_PAYLOAD_BYTES", 4)
    with pytest.raises(eventstream.EventStreamEncodeError, match="payload of 5 bytes"):
        eventstream.encode_message({}, b"01234")
