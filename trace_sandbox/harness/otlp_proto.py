"""An OTLP ExportTraceServiceRequest in protobuf, read into its JSON form (stdlib only).

The official SDKs' OTLP/HTTP exporters send protobuf by default; the sandbox has no protobuf
package, so this reads the wire format directly: varints, 64-bit and length-delimited fields,
for the messages and field numbers of opentelemetry-proto's trace and common protos (those
field numbers are stable by the protobuf rules). It yields the dict the OTLP/JSON encoding
would have (ids as hex, enums as integers), which otlp.spans_of_request reads. Fields it does
not know are skipped; a malformed message raises ValueError.
"""

from __future__ import annotations

import struct

TYPE_CHECKING = False  # typing only for the type checker (isolation.py)
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping
    from typing import Any

Field = tuple[int, int, "Any"]  # (number, wire type, value: int for varint/fixed, bytes for LEN)
MAX_DEPTH = 32


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if i >= len(buf) or shift > 63:
            raise ValueError("truncated or overlong varint")
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, i
        shift += 7


def fields(buf: bytes) -> Iterator[Field]:
    """The fields of one message, in order."""
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        number, wire = key >> 3, key & 7
        value: int | bytes
        if wire == 0:
            value, i = _varint(buf, i)
        elif wire == 1:
            if i + 8 > len(buf):
                raise ValueError("truncated 64-bit field")
            value, i = int.from_bytes(buf[i : i + 8], "little"), i + 8
        elif wire == 2:
            size, i = _varint(buf, i)
            if i + size > len(buf):
                raise ValueError("truncated length-delimited field")
            value, i = buf[i : i + size], i + size
        elif wire == 5:
            if i + 4 > len(buf):
                raise ValueError("truncated 32-bit field")
            value, i = int.from_bytes(buf[i : i + 4], "little"), i + 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        yield number, wire, value


def _str(v: Any) -> str:
    return bytes(v).decode("utf-8", "replace") if isinstance(v, bytes | bytearray) else ""


def _signed(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def any_value(buf: bytes, depth: int = 0) -> dict[str, Any]:
    if depth > MAX_DEPTH:
        raise ValueError("values nested too deeply")
    for number, wire, v in fields(buf):
        if number == 1 and wire == 2:
            return {"stringValue": _str(v)}
        if number == 2 and wire == 0:
            return {"boolValue": bool(v)}
        if number == 3 and wire == 0:
            return {"intValue": str(_signed(v))}
        if number == 4 and wire == 1:
            return {"doubleValue": struct.unpack("<d", v.to_bytes(8, "little"))[0]}
        if number == 5 and wire == 2:
            values = [any_value(x, depth + 1) for n, w, x in fields(v) if n == 1 and w == 2]
            return {"arrayValue": {"values": values}}
        if number == 6 and wire == 2:
            kvs = [key_value(x, depth + 1) for n, w, x in fields(v) if n == 1 and w == 2]
            return {"kvlistValue": {"values": kvs}}
        if number == 7 and wire == 2:
            return {"bytesValue": bytes(v).hex()}
    return {}


def key_value(buf: bytes, depth: int = 0) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for number, wire, v in fields(buf):
        if number == 1 and wire == 2:
            out["key"] = _str(v)
        elif number == 2 and wire == 2:
            out["value"] = any_value(v, depth)
    return out


def _message(
    buf: bytes, spec: Mapping[int, tuple[str, Callable[[Any], Any], bool]]
) -> dict[str, Any]:
    """A message by `spec`: field number -> (JSON name, converter, repeated)."""
    out: dict[str, Any] = {}
    for number, _, v in fields(buf):
        if number not in spec:
            continue
        name, convert, repeated = spec[number]
        if repeated:
            out.setdefault(name, []).append(convert(v))
        else:
            out[name] = convert(v)
    return out


def _hex(v: Any) -> str:
    return bytes(v).hex() if isinstance(v, bytes | bytearray) else ""


def _bytes_of(v: Any) -> bytes:
    if not isinstance(v, bytes | bytearray):
        raise ValueError("expected a length-delimited field")
    return bytes(v)


def _event(v: Any) -> dict[str, Any]:
    return _message(
        _bytes_of(v),
        {
            1: ("timeUnixNano", str, False),
            2: ("name", _str, False),
            3: ("attributes", lambda x: key_value(_bytes_of(x)), True),
        },
    )


def _status(v: Any) -> dict[str, Any]:
    return _message(_bytes_of(v), {2: ("message", _str, False), 3: ("code", int, False)})


def _span(v: Any) -> dict[str, Any]:
    return _message(
        _bytes_of(v),
        {
            1: ("traceId", _hex, False),
            2: ("spanId", _hex, False),
            4: ("parentSpanId", _hex, False),
            5: ("name", _str, False),
            6: ("kind", int, False),
            7: ("startTimeUnixNano", str, False),
            8: ("endTimeUnixNano", str, False),
            9: ("attributes", lambda x: key_value(_bytes_of(x)), True),
            11: ("events", _event, True),
            15: ("status", _status, False),
        },
    )


def _scope_spans(v: Any) -> dict[str, Any]:
    scope = {1: ("name", _str, False), 2: ("version", _str, False)}
    return _message(
        _bytes_of(v),
        {
            1: ("scope", lambda x: _message(_bytes_of(x), scope), False),
            2: ("spans", _span, True),
        },
    )


def decode_request(body: bytes) -> dict[str, Any]:
    """An ExportTraceServiceRequest's JSON form."""
    resource_spans = {2: ("scopeSpans", _scope_spans, True)}
    return _message(
        body, {1: ("resourceSpans", lambda x: _message(_bytes_of(x), resource_spans), True)}
    )
