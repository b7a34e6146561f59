"""The AWS event stream binary encoding (``application/vnd.amazon.eventstream``), encode side.

What the local Lambda API's ``InvokeWithResponseStream`` answers with; the real boto3 client
decodes it (``botocore.eventstream``), so this module only writes messages. One message:

==================  ========  ==================================================================
field               bytes     content
==================  ========  ==================================================================
total length        4         big-endian uint32, the whole message (these 4 bytes included)
headers length      4         big-endian uint32, the headers section
prelude CRC         4         CRC32 of the 8 bytes above
headers             variable  each: name length (1), name (UTF-8), value type (1), value
payload             variable  opaque bytes
message CRC         4         CRC32 of everything before it (prelude and its CRC included)
==================  ========  ==================================================================

Only string header values are written (value type 7: a 2-byte big-endian length, then UTF-8),
which is all a Lambda response stream carries (``:event-type``, ``:message-type``,
``:content-type``). CRC32 is the GZIP/IEEE one (``zlib.crc32``). Limits: a header name of at
most 255 bytes, a string value of at most 32,767 bytes, the headers section at most 128 KiB and
a payload at most 16 MiB (the encoding's and the SDKs' decoder limits); :func:`payload_chunk`
splits a longer chunk into several events.

References
----------
https://docs.aws.amazon.com/transcribe/latest/dg/event-stream.html (the encoding)
https://docs.aws.amazon.com/lexv2/latest/dg/event-stream-encoding.html
https://docs.aws.amazon.com/lambda/latest/api/API_InvokeWithResponseStream.html
https://github.com/awslabs/aws-c-event-stream (max headers 128 KiB, max message 16 MiB)
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Iterator, Mapping

#: The ``Content-Type`` of an event stream response.
CONTENT_TYPE = "application/vnd.amazon.eventstream"
#: Header value type of a UTF-8 string.
STRING_TYPE = 7
#: Prelude (total length, headers length, prelude CRC) plus message CRC, bytes.
OVERHEAD_BYTES = 16
#: The largest headers section, bytes (128 KiB).
MAX_HEADERS_BYTES = 128 * 1024
#: The largest payload of one message, bytes (16 MiB).
MAX_PAYLOAD_BYTES = 16 * 1024 * 1024
_MAX_STRING_BYTES = 2 ** 15 - 1


class EventStreamEncodeError(ValueError):
    """A header or payload that the encoding cannot carry (too long, not a string)."""


def encode_headers(headers: Mapping[str, str]) -> bytes:
    """The headers section: every header as a string (type 7), in the mapping's order.

    Raises
    ------
    EventStreamEncodeError
        A name over 255 bytes, a value over 32,767 bytes, a non-string value, or a section
        over :data:`MAX_HEADERS_BYTES`.
    """
    out = bytearray()
    for name, value in headers.items():
        if not isinstance(value, str):
            raise EventStreamEncodeError(f"header {name!r}: only string values are encoded, got {type(value).__name__}")
        raw_name, raw_value = name.encode(), value.encode()
        if not 0 < len(raw_name) <= 255:
            raise EventStreamEncodeError(f"header name {name[:40]!r} must be 1-255 bytes")
        if len(raw_value) > _MAX_STRING_BYTES:
            raise EventStreamEncodeError(f"header {name!r}: value over {_MAX_STRING_BYTES} bytes")
        out += struct.pack("!B", len(raw_name)) + raw_name
        out += struct.pack("!BH", STRING_TYPE, len(raw_value)) + raw_value
    if len(out) > MAX_HEADERS_BYTES:
        raise EventStreamEncodeError(f"headers section of {len(out)} bytes over {MAX_HEADERS_BYTES}")
    return bytes(out)


def encode_message(headers: Mapping[str, str], payload: bytes = b"") -> bytes:
    """One event stream message.

    Parameters
    ----------
    headers : Mapping[str, str]
        String headers (``:event-type``, ``:message-type``, ``:content-type``, ...).
    payload : bytes
        At most :data:`MAX_PAYLOAD_BYTES`.

    Raises
    ------
    EventStreamEncodeError
        As :func:`encode_headers`, or a payload over the limit.
    """
    if len(payload) > MAX_PAYLOAD_BYTES:
        raise EventStreamEncodeError(f"payload of {len(payload)} bytes over {MAX_PAYLOAD_BYTES}")
    head = encode_headers(headers)
    prelude = struct.pack("!II", OVERHEAD_BYTES + len(head) + len(payload), len(head))
    body = prelude + struct.pack("!I", zlib.crc32(prelude)) + head + payload
    return body + struct.pack("!I", zlib.crc32(body))


def event(event_type: str, payload: bytes, content_type: str) -> bytes:
    """An ``event`` message (``:message-type event``) of ``event_type``."""
    return encode_message({":event-type": event_type, ":content-type": content_type,
                           ":message-type": "event"}, payload)


def payload_chunk(data: bytes) -> Iterator[bytes]:
    """Lambda's ``PayloadChunk`` event(s) for one chunk of a response stream: one event, or
    several when ``data`` is over :data:`MAX_PAYLOAD_BYTES`; none for an empty chunk."""
    for start in range(0, len(data), MAX_PAYLOAD_BYTES):
        yield event("PayloadChunk", data[start:start + MAX_PAYLOAD_BYTES], "application/octet-stream")


def invoke_complete(*, error_code: str | None = None, error_details: str | None = None,
                    log_result: str = "") -> bytes:
    """Lambda's ``InvokeComplete`` event: JSON ``{"ErrorCode", "ErrorDetails", "LogResult"}``,
    the error fields only when the invocation failed (as the service model's
    ``InvokeWithResponseStreamCompleteEvent``: every member optional)."""
    body: dict[str, str] = {}
    if error_code is not None:
        body["ErrorCode"] = error_code
    if error_details is not None:
        body["ErrorDetails"] = error_details
    body["LogResult"] = log_result
    return event("InvokeComplete", json.dumps(body, separators=(",", ":")).encode(), "application/json")
