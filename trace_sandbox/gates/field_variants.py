"""The `field` operator of the variants gate: the PoC's numeric fields edited in place.

A fix that special-cases a value of the PoC (`address == 0x84`, `"-45"`) survives every variant
that leaves the value alone, and length changes and random byte edits rarely touch a 2-byte
field. This operator edits the fields `pocvalues` reads, where they are (a short field is
edited in place, never only grown at the file's end):

* text: a number's spelling replaced by another value in the same base (`-45` -> `-44`,
  `0x84` -> `0x85`);
* binary: an aligned 1-, 2- or 4-byte integer rewritten in its byte order, or one of its bytes.

Each field gets, in this order: its value +1 and -1 (the neighbours), each constant of the
patch and that constant +1/-1, 0, -1, the type's limits (for a binary field, its width's
unsigned and signed limits; for a text number, the 32- and 64-bit limits), and (binary) each
of its bytes set to 0x00, 0xff and +1. A field whose value the patch compares with (`compared`)
is edited first and in full; any other field gets its neighbours only.

A text PoC's characters are fields too, but only those the patch spells as a character
(`c == 'A'`, `c == 0x41`: `chars`): a fix that recognises the PoC's one letter (`/rows/1A`)
survives every variant that leaves the letter alone. Such a field gets the printable values
among its neighbours and the patch's characters and theirs (`A` -> `B`, `@`).
"""

from __future__ import annotations

from ._dataclasses import dataclass
from .pocvalues import PRINTABLE, ByteOrder, Field, char_fields, data_fields, is_text

TEXT_LIMITS = (2**31 - 1, -(2**31), 2**63 - 1, -(2**63))
MAX_EDITS = 256  # field edits of one unit (a large binary file has thousands of fields)


@dataclass(frozen=True)
class FieldEdit:
    """One field of a PoC input given another value: the data it makes and why."""

    data: bytes
    description: str
    value: int  # the field's value in the PoC
    neighbour: str | None  # "+1" / "-1" for the value's neighbours
    compared: bool  # the patch compares with the field's value


def _spell_like(spelling: str, v: int) -> str:
    """v written as the PoC wrote its number: hex stays hex, octal stays octal."""
    body = spelling.lstrip("-+")
    low = body.lower()
    sign = "-" if v < 0 else ""
    a = abs(v)
    if low.startswith("0x"):
        digits = f"{a:x}"
        return sign + body[:2] + (digits.upper() if body[2:].isupper() else digits)
    if low.startswith("0o"):
        return f"{sign}{body[:2]}{a:o}"
    if len(body) > 1 and body[0] == "0" and body.isdigit():
        return f"{sign}0{a:o}"
    return str(v)


def _text_edit(data: bytes, f: Field, v: int) -> bytes:
    text = data.decode("utf-8")
    if f.order == "char":
        return (text[: f.offset] + chr(v) + text[f.offset + 1 :]).encode("utf-8")
    start = f.offset
    end = start + len(f.spelling)
    if text[start:end] != f.spelling:  # the match had blanks after the sign
        end = start + f.width
    return (text[:start] + _spell_like(f.spelling, v) + text[end:]).encode("utf-8")


def _binary_edit(data: bytes, f: Field, v: int) -> bytes:
    mask = (1 << (8 * f.width)) - 1
    order: ByteOrder = "little" if f.order == "little" else "big"
    new = (v & mask).to_bytes(f.width, order)
    return data[: f.offset] + new + data[f.offset + f.width :]


def _char_values(f: Field, constants: list[int]) -> list[tuple[int, str | None]]:
    out: list[tuple[int, str | None]] = [(f.value + 1, "+1"), (f.value - 1, "-1")]
    for c in constants:
        out += [(c, None), (c + 1, None), (c - 1, None)]
    return [(v, n) for v, n in out if v in PRINTABLE]


def _values(f: Field, constants: list[int], full: bool) -> list[tuple[int, str | None]]:
    if f.order == "char":
        return _char_values(f, constants)
    out: list[tuple[int, str | None]] = [(f.value + 1, "+1"), (f.value - 1, "-1")]
    if not full:
        return out
    for c in constants:
        out += [(c, None), (c + 1, None), (c - 1, None)]
    out += [(0, None), (-1, None)]
    if f.order == "text":
        out += [(lim, None) for lim in TEXT_LIMITS]
    else:
        bits = 8 * f.width
        out += [(2**bits - 1, None), (2 ** (bits - 1) - 1, None), (-(2 ** (bits - 1)), None)]
    return out


def _byte_edits(data: bytes, f: Field) -> list[tuple[bytes, str]]:
    out = []
    for k in range(f.offset, f.offset + f.width):
        for b in (0x00, 0xFF, (data[k] + 1) & 0xFF):
            if b != data[k]:
                new = data[:k] + bytes([b]) + data[k + 1 :]
                out.append((new, f"byte {k} of the field: 0x{data[k]:02x} -> 0x{b:02x}"))
    return out


def _edits_of(data: bytes, f: Field, constants: list[int], compared: bool) -> list[FieldEdit]:
    out = []
    for v, neighbour in _values(f, constants, compared):
        if v == f.value:
            continue
        text = f.order in ("text", "char")
        new = _text_edit(data, f, v) if text else _binary_edit(data, f, v)
        desc = f"{f.where()}: {f.value} -> {v}"
        out.append(FieldEdit(new, desc, f.value, neighbour, compared))
    if compared and f.order not in ("text", "char"):
        for new, desc in _byte_edits(data, f):
            out.append(FieldEdit(new, f"{f.where()}: {desc}", f.value, None, compared))
    return out


def field_edits(
    name: str,
    data: bytes,
    constants: list[int],
    compared: set[int],
    chars: frozenset[int] = frozenset(),
) -> list[FieldEdit]:
    """Every field edit of one unit: the compared fields' first (in full; the characters the
    patch spells, `chars`, among them), then the others' neighbours; each distinct new content
    once."""
    fields = data_fields(name, data)
    letters = char_fields(name, data.decode("utf-8"), set(chars)) if is_text(data) else []
    compared = compared | {f.value for f in letters}
    first = letters + [f for f in fields if f.value in compared]
    rest = [f for f in fields if f.value not in compared]
    seen = {data}
    out = []
    for f in first + rest:
        for e in _edits_of(data, f, constants, f.value in compared):
            if e.data not in seen:
                seen.add(e.data)
                out.append(e)
        if len(out) >= MAX_EDITS:
            break
    return out[:MAX_EDITS]
