"""The PoC's values: the numbers a proof of concept carries, in text or inside binary data.

A wrong fix can recognise the PoC by a number in it (the write address `0x84` two bytes inside a
binary request, the ledger's one negative amount `-45`) instead of fixing the bug. This module
parses the PoC's data into *fields*:

* text (a file that decodes as UTF-8 with no control bytes other than blanks): every number,
  signed, decimal, hex (`0x84`), octal (`0o17`, and a leading-zero `017` read both as octal and
  as decimal), with its spelling;
* binary: every aligned 1-, 2- and 4-byte integer, big- and little-endian, unsigned and signed;
* the reproducer script: the numbers of its code, and the bytes its quoted strings spell with
  `\\xNN` / `\\NNN` escapes (a script that writes the PoC with printf), read as binary.

`Field` says where a value sits (file, offset, width, byte order): the variants gate edits the
field in place, and the scope gate names it in its finding.

`notable` is the rule that keeps ubiquitous constants out (a comparison with one of them is no
fingerprint of the PoC): -2..2, the sizeof-like and limit values (2^k, 2^k - 1 for k >= 3, and
-2^k), and any value the unpatched code near the change already spells (the hunk's context and
removed lines: a protocol constant the code already knows).
"""

from __future__ import annotations

import re

from ._dataclasses import dataclass

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Literal

    ByteOrder = Literal["big", "little"]
else:  # plain strings at run time: the gates import no `typing` (a process's start-up)
    ByteOrder = str

MAX_FIELD_BYTES = 4096  # the first bytes of a binary file whose fields are read
WIDTHS = (4, 2, 1)  # the widest field first: it names a value best

NUMBER = re.compile(
    r"(?<![\w.])(-\s*)?(0[xX][0-9a-fA-F]+|0[oO][0-7]+|0[bB][01]+|\d+)([uUlL]*)(?![\w.])"
)
_ESCAPE = re.compile(rb"\\x([0-9a-fA-F]{1,2})|\\([0-7]{1,3})")
_QUOTED = re.compile(r"'([^'\n]*)'|\"((?:[^\"\\\n]|\\.)*)\"")


@dataclass(frozen=True)
class Field:
    """One value of the PoC and where it sits."""

    source: str  # the data file's name, or "script"
    offset: int  # byte offset of the field (of its spelling, in text)
    width: int  # bytes in binary; characters of the spelling in text
    order: str  # "big" | "little" | "text"
    value: int
    spelling: str = ""  # in text: the number as written (`-45`, `0x84`)

    def where(self) -> str:
        if self.order in ("text", "char"):
            return f"{self.source}: {self.spelling!r} at offset {self.offset}"
        kind = "byte" if self.width == 1 else f"{self.width}-byte {self.order}-endian field"
        return f"{self.source}: {kind} at offset {self.offset}"


def number_value(spelling: str) -> list[int]:
    """The values a number's spelling may mean (a leading-zero `017`: 17 and 0o17)."""
    text = spelling.replace(" ", "").rstrip("uUlL")
    sign = -1 if text.startswith("-") else 1
    body = text.lstrip("-+")
    low = body.lower()
    if low.startswith("0x"):
        return [sign * int(body[2:], 16)]
    if low.startswith("0o"):
        return [sign * int(body[2:], 8)]
    if low.startswith("0b"):
        return [sign * int(body[2:], 2)]
    out = [sign * int(body, 10)]
    if len(body) > 1 and body[0] == "0" and all(c in "01234567" for c in body):
        out.append(sign * int(body, 8))
    return out


def is_text(raw: bytes) -> bool:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return all(c.isprintable() or c in "\n\r\t" for c in text)


def text_fields(source: str, text: str) -> list[Field]:
    out = []
    for m in NUMBER.finditer(text):
        spelling = (m.group(1) or "").replace(" ", "") + m.group(2)
        for v in number_value(spelling):
            out.append(Field(source, m.start(), len(m.group(0)), "text", v, spelling))
    return out


def binary_fields(source: str, raw: bytes) -> list[Field]:
    data = raw[:MAX_FIELD_BYTES]
    out = []
    for width in WIDTHS:
        for off in range(0, len(data) - width + 1, width):
            chunk = data[off : off + width]
            orders: tuple[ByteOrder, ...] = ("big",) if width == 1 else ("big", "little")
            for order in orders:
                seen = set()
                for signed in (False, True):
                    v = int.from_bytes(chunk, order, signed=signed)
                    if v not in seen:
                        seen.add(v)
                        out.append(Field(source, off, width, order, v))
    return out


def data_fields(source: str, raw: bytes) -> list[Field]:
    if is_text(raw):
        return text_fields(source, raw.decode("utf-8"))
    return binary_fields(source, raw)


def script_fields(text: str) -> list[Field]:
    """The numbers of a reproducer script's code (comment lines skipped), and the fields of the
    bytes its quoted strings spell with escapes."""
    code = "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#"))
    out = text_fields("script", code)
    for m in _QUOTED.finditer(code):
        s = m.group(1) if m.group(1) is not None else m.group(2)
        raw = s.encode("utf-8", "surrogateescape") if s else b""
        if _ESCAPE.search(raw):
            out += binary_fields("script", _unescape(raw))
    return out


def _unescape(raw: bytes) -> bytes:
    def one(m: re.Match[bytes]) -> bytes:
        digits = m.group(1) or m.group(2)
        return bytes([int(digits, 16 if m.group(1) else 8) & 0xFF])

    return _ESCAPE.sub(one, raw)


def _round(v: int) -> bool:
    """Sizeof-like and limit values: 2^k, 2^k - 1 (k >= 3) and -2^k."""
    a = abs(v)
    if a & (a - 1) == 0:
        return True
    return v > 0 and (v + 1) & v == 0 and v >= 7


def notable(v: int, nearby: set[int]) -> bool:
    """Is a comparison with v a fingerprint of the PoC (the rule in the module docstring)?"""
    return not -2 <= v <= 2 and not _round(v) and v not in nearby


# A C or Python one-character literal: 'A', '\x41', '\101' (the PoC's letter by its code).
CHAR_LITERAL = re.compile(r"'(?:\\x([0-9a-fA-F]{1,2})|\\([0-7]{1,3})|([^'\\\n]))'")
HEX_LITERAL = re.compile(r"(?<![\w.])0[xX]([0-9a-fA-F]+)(?![\w.])")
PRINTABLE = range(0x21, 0x7F)  # a character of a text PoC (not a blank)


def char_codes_in(code: str) -> set[int]:
    """The printable characters a line of code spells as a character: a one-character literal
    (`'A'`, `'\\x41'`, `'\\101'`) or a hex literal in the printable range (`0x41`)."""
    out: set[int] = set()
    for m in CHAR_LITERAL.finditer(code):
        hexd, octd, plain = m.groups()
        out.add(int(hexd, 16) if hexd else int(octd, 8) if octd else ord(plain))
    out.update(int(m.group(1), 16) for m in HEX_LITERAL.finditer(code))
    return {v for v in out if v in PRINTABLE}


def char_fields(source: str, text: str, codes: set[int]) -> list[Field]:
    """Each occurrence in a text PoC of a character whose code is in `codes`: a one-character
    field (order "char"), the field a fix that tests `c == 'A'` or `c == 0x41` recognises."""
    return [
        Field(source, k, 1, "char", ord(c), c)
        for k, c in enumerate(text)
        if ord(c) in codes and ord(c) in PRINTABLE
    ]


def literals_in(code: str) -> set[int]:
    """Every integer literal a line of code spells (its unary minus included)."""
    out: set[int] = set()
    for m in NUMBER.finditer(code):
        spelling = (m.group(1) or "").replace(" ", "") + m.group(2)
        out.update(number_value(spelling))
        out.update(number_value(m.group(2)))
    return out
