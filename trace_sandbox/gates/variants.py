"""Variants of the proof of concept ("PoC+"): inputs around the one the harness observed.

Pure and deterministic (a seed and a budget from the signing policy): the same PoC, patches and
sources give the same variants, in the same order, on every machine. The PoC is what the
harness recorded of the pre-fix run: each target invocation's target, arguments and stdin, and
the reproducer's data files. Each *unit* of it (a data file an invocation names, an
invocation's stdin, a non-option argument) is mutated on its own, the way AFL++/libFuzzer
mutate a seed:

* `length`: the longest run of one byte (the typical PoC payload, `AAAA…`) grown or shrunk
  in place around the PoC's length (±1, ±2, ±8, +64, doubled, halved); a run shorter than 4
  bytes is resized in place too, and the unit is also truncated/extended at its end;
* `insert`, `delete`, `duplicate` (a line, or a chunk), `substitute`: one byte-level edit at a
  seeded position, with "interesting" bytes (NUL, 0xff, newline, backslash, '%');
* `field`: a numeric field of the PoC (a number of its text, an aligned integer of its binary
  data) edited in place (field_variants.py): the fields holding a value the patch compares
  with come first of all, in full (the value ±1, the patch's constants ±1, 0, -1, the type's
  limits, each byte); every other field's value ±1 takes its turn with the operators below;
* `token`, `token-run`: a dictionary token inserted at a seeded position, or repeated in place
  of the longest run. The dictionary is lifted from the patched files' string and character
  literals (both the source spelling, `\\t`, which is an escape sequence as an input would
  carry it, and the value) and from the PoC itself (its punctuation and words).

A variant is written as an ordinary reproducer (`repro.sh` calling the same targets with the
same arguments, plus the data files, one of them mutated), so it runs under the same harness
and sanitizer as the PoC, and a variant that still crashes is a replayable reproducer as is.
"""

from __future__ import annotations

import hashlib
import random
import re

from ._dataclasses import dataclass, field
from .field_variants import FieldEdit, field_edits
from .pocvalues import notable

INTERESTING = (b"\x00", b"\xff", b"\n", b"\\", b"%", b"A")
LENGTH_DELTAS = (1, -1, 2, -2, 8, -8, 64)
MAX_TOKEN = 32
MAX_TOKENS = 64
MAX_UNIT = 1 << 20  # units larger than this are not mutated (a variant stays replayable)
OPERATORS = (
    "length",
    "field",
    "token-run",
    "duplicate",
    "token",
    "delete",
    "insert",
    "substitute",
)
GOOD_SHARE = 4  # a good input's units get budget // GOOD_SHARE variants of their own

_LITERAL_RE = re.compile(r"\"((?:\\.|[^\"\\\n])*)\"|'((?:\\.|[^'\\\n])+)'")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", "\\": "\\", "'": "'", '"': '"', "a": "\a"}


@dataclass(frozen=True)
class Unit:
    """One part of the PoC a variant may change."""

    kind: str  # file | stdin | arg
    name: str  # the data file's name; stdin:<n> / arg:<n>:<k> for the others
    data: bytes


@dataclass(frozen=True)
class Invocation:
    """One target invocation of the PoC: target, kind, arguments and input."""

    target: str
    kind: str  # program | python
    args: tuple[str, ...]
    stdin: bytes | None = None


@dataclass
class Variant:
    """One variant of the PoC: its id, operator, unit, reproducer and changed files."""

    id: str
    operator: str
    unit: str
    description: str
    script: str
    files: dict[str, bytes] = field(default_factory=dict)
    field: dict[str, object] | None = None  # a `field` edit: value, neighbour, compared

    def summary(self) -> dict[str, object]:
        out: dict[str, object] = {
            "id": self.id,
            "operator": self.operator,
            "unit": self.unit,
            "description": self.description,
            "files": {n: hashlib.sha256(d).hexdigest() for n, d in sorted(self.files.items())},
        }
        if self.field is not None:
            out["field"] = self.field
        return out


# unit, operator, new bytes, description, the field edit's facts (None for other operators)
Candidate = tuple[Unit, str, bytes, str, dict[str, object] | None]


# --- the dictionary --------------------------------------------------------------------------


def _unescape(text: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "x" and re.match(r"[0-9a-fA-F]{2}", text[i + 2 : i + 4]):
                out.append(chr(int(text[i + 2 : i + 4], 16)))
                i += 4
                continue
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def literal_tokens(source: str) -> list[bytes]:
    """String and character literals of a C/Python source: each as written (an escape
    sequence as an input would spell it) and as its value. Format strings are split at their
    conversions (`%s -> %s` gives ` -> `)."""
    tokens: list[bytes] = []
    for m in _LITERAL_RE.finditer(source):
        raw = m.group(1) if m.group(1) is not None else m.group(2)
        for text in (raw, _unescape(raw)):
            for part in re.split(r"%[-+ #0-9.]*[a-zA-Z]", text):
                if part:
                    tokens.append(part.encode("utf-8", "surrogateescape")[:MAX_TOKEN])
    return tokens


def poc_tokens(data: bytes) -> list[bytes]:
    """Tokens of the PoC itself: its punctuation bytes and its words (AFL's auto-dictionary
    lifts comparison operands; without instrumentation, the PoC's own separators stand in)."""
    tokens = [bytes([b]) for b in sorted(set(data)) if 0x21 <= b <= 0x7E and not chr(b).isalnum()]
    words = set(re.findall(rb"[A-Za-z0-9_]{2,16}", data))
    tokens += sorted(w for w in words if len(set(w)) > 1)  # not a payload run (`kkkk`)
    return tokens


def dictionary(sources: list[str], units: list[Unit]) -> list[bytes]:
    seen: dict[bytes, None] = {}
    for src in sources:
        for tok in literal_tokens(src):
            seen.setdefault(tok, None)
    for unit in units:
        for tok in poc_tokens(unit.data):
            seen.setdefault(tok, None)
    return [t for t in seen if t][:MAX_TOKENS]


# --- the PoC's units -----------------------------------------------------------------------


def units_of(invocations: list[Invocation], data: dict[str, bytes]) -> list[Unit]:
    named = {a for inv in invocations for a in inv.args}
    names = {a.removeprefix("./").removeprefix("<work>/") for a in named}
    files = [n for n in sorted(data) if n in names] or sorted(data)
    units = [Unit("file", n, data[n]) for n in files if len(data[n]) <= MAX_UNIT]
    for i, inv in enumerate(invocations):
        if inv.stdin:
            units.append(Unit("stdin", f"stdin:{i}", inv.stdin))
    for i, inv in enumerate(invocations):
        if inv.kind != "program":
            continue  # a python invocation's arguments are code and script names
        for k, a in enumerate(inv.args):
            plain = a.removeprefix("./").removeprefix("<work>/")
            if not a or a.startswith("-") or plain in data or "$TARGET" in a or "<" in a:
                continue
            units.append(Unit("arg", f"arg:{i}:{k}", a.encode("utf-8", "surrogateescape")))
    return units


# --- the operators ---------------------------------------------------------------------------


def longest_run(data: bytes) -> tuple[int, int]:
    """(start, length) of the longest run of one byte (length 0 when data is empty)."""
    best = (0, 0)
    i = 0
    while i < len(data):
        j = i
        while j < len(data) and data[j] == data[i]:
            j += 1
        if j - i > best[1]:
            best = (i, j - i)
        i = j
    return best


def _length(data: bytes) -> list[tuple[bytes, str]]:
    start, n = longest_run(data)
    out: list[tuple[bytes, str]] = []
    if n >= 2:  # a run is resized where it is, a short one too (`00` in `1200`)
        byte = data[start : start + 1]
        for new in [n + d for d in LENGTH_DELTAS] + [n * 2, n // 2]:
            if new >= 1 and new != n:
                v = data[:start] + byte * new + data[start + n :]
                out.append((v, f"run of {byte!r} at {start}: {n} -> {new} bytes"))
        if n >= 4:
            return out
    body = data.rstrip(b"\n")
    tail = data[len(body) :]
    if body:
        for d in LENGTH_DELTAS:
            if d < 0 and len(body) + d >= 1:
                out.append((body[:d] + tail, f"truncated by {-d} bytes"))
            elif d > 0:
                out.append((body + body[-1:] * d + tail, f"extended by {d} bytes"))
    return out


def _edits(data: bytes, rng: random.Random, op: str, tokens: list[bytes]) -> tuple[bytes, str]:
    pos = rng.randrange(len(data) + 1) if op in ("insert", "token") else rng.randrange(len(data))
    if op == "insert":
        b = rng.choice(INTERESTING)
        return data[:pos] + b + data[pos:], f"inserted {b!r} at {pos}"
    if op == "delete":
        n = rng.choice((1, 1, 2, 4))
        return data[:pos] + data[pos + n :], f"deleted {n} byte(s) at {pos}"
    if op == "substitute":
        b = rng.choice(INTERESTING)
        return data[:pos] + b + data[pos + 1 :], f"byte {pos} replaced by {b!r}"
    if op == "token":
        t = rng.choice(tokens)
        return data[:pos] + t + data[pos:], f"token {t!r} inserted at {pos}"
    if op == "duplicate":
        lines = data.splitlines(keepends=True)
        if len(lines) > 1:
            k = rng.randrange(len(lines))
            return b"".join(lines[: k + 1] + lines[k:]), f"line {k + 1} duplicated"
        n = rng.choice((1, 2, 4, 8))
        return data[:pos] + data[pos : pos + n] * 2 + data[
            pos + n :
        ], f"{n} byte(s) at {pos} doubled"
    raise ValueError(op)


def _token_runs(data: bytes, tokens: list[bytes]) -> list[tuple[bytes, str]]:
    start, n = longest_run(data)
    if n < 4:
        return []
    out = []
    # short tokens with a non-alphanumeric byte first: escape sequences, separators
    for t in sorted(tokens, key=lambda t: (b"\\" not in t, t.isalnum(), len(t) > 4, len(t))):
        reps = max(1, n // len(t))
        out.append(
            (data[:start] + t * reps + data[start + n :], f"run at {start} -> {t!r} x{reps}")
        )
    return out


def candidates(
    unit: Unit, op: str, rng: random.Random, tokens: list[bytes], k: int
) -> list[tuple[bytes, str]]:
    """Up to k (bytes, description) candidates of one operator on one unit."""
    data = unit.data
    if op == "length":
        return _length(data)[:k]
    if op == "token-run":
        return _token_runs(data, tokens)[:k]
    if not data or (op == "token" and not tokens):
        return []
    return [_edits(data, rng, op, tokens) for _ in range(k)]


# --- the variants ----------------------------------------------------------------------------


def _quote(arg: str) -> str:
    """A shell word for a recorded argument: `$TARGET` stays a variable, `<work>` is the
    working directory, everything else is single-quoted."""
    parts = re.split(r"(\$TARGET|<work>)", arg)
    words = []
    for p in parts:
        if p == "$TARGET":
            words.append('"$TARGET"')
        elif p == "<work>":
            words.append('"$PWD"')
        elif p:
            words.append("'" + p.replace("'", "'\\''") + "'")
    return "".join(words) or "''"


def script_of(
    invocations: list[Invocation], args: dict[tuple[int, int], str], stdin: set[int]
) -> str:
    lines = [
        "# A variant of the reproducer made by trace's variants gate: the PoC's target",
        "# invocations, one input changed (see variant.json). Every invocation runs.",
    ]
    for i, inv in enumerate(invocations):
        argv = [args.get((i, k), a) for k, a in enumerate(inv.args)]
        # a program's target is its path in the package (`bin/cparse`)
        prog = '"$TARGET/' + inv.target + '"' if inv.kind == "program" else "python3"
        cmd = " ".join([prog, *(_quote(a) for a in argv)])
        if i in stdin:
            cmd += f" < stdin-{i}.bin"
        lines.append(cmd)
    return "\n".join(lines) + "\n"


def _key(files: dict[str, bytes], script: str) -> str:
    h = hashlib.sha256(script.encode("utf-8", "surrogatepass"))
    for name, data in sorted(files.items()):
        h.update(
            hashlib.sha256(name.encode("utf-8", "surrogatepass")).digest()
            + hashlib.sha256(data).digest()
        )
    return h.hexdigest()


def _turns(pools: list[list[Candidate]]) -> list[Candidate]:
    """Round robin over the pools: the first of each, then the second of each, ..."""
    out: list[Candidate] = []
    for k in range(max((len(p) for p in pools), default=0)):
        out += [p[k] for p in pools if k < len(p)]
    return out


def _pools(
    units: list[Unit],
    tokens: list[bytes],
    seed: int,
    budget: int,
    constants: list[int],
    chars: frozenset[int] = frozenset(),
) -> dict[str, list[list[Candidate]]]:
    """Candidates by class: `compared` (edits of a field holding a value the patch compares
    with), `length`, `other`; one list per (operator, unit)."""
    compared = {c for c in constants if notable(c, set())}
    pools: dict[str, list[list[Candidate]]] = {}
    for op in OPERATORS:
        for u in units:
            if op == "field":
                edits = field_edits(u.name, u.data, constants, compared, chars)
                for cls, want in (("compared", True), ("other", False)):
                    pool: list[Candidate] = [
                        (u, op, e.data, e.description, _facts(e))
                        for e in edits
                        if e.compared is want
                    ]
                    if pool:
                        pools.setdefault(cls, []).append(pool)
                continue
            rng = random.Random(f"{seed}:{op}:{u.name}")
            pool = [(u, op, v, d, None) for v, d in candidates(u, op, rng, tokens, budget)]
            if pool:
                pools.setdefault("length" if op == "length" else "other", []).append(pool)
    return pools


def _facts(e: FieldEdit) -> dict[str, object]:
    return {"value": e.value, "neighbour": e.neighbour, "compared": e.compared}


def generate(
    invocations: list[Invocation],
    data: dict[str, bytes],
    sources: list[str],
    *,
    seed: int,
    budget: int,
    constants: list[int] | None = None,
    good: frozenset[str] = frozenset(),
    chars: frozenset[int] = frozenset(),
) -> tuple[list[Variant], list[bytes]]:
    """At most `budget` variants of the PoC's units and `budget // GOOD_SHARE` of the good
    inputs' (`good`: unit names; distinct from the PoC and from each other), and the
    dictionary used. `constants`: the integer constants of the patch (its added lines); `chars`:
    the characters it spells (`'A'`, `0x41`: the text PoC's occurrences are fields). Field
    edits of a compared value first, then length changes, then the other operators in turn,
    units in PoC order."""
    units = units_of(invocations, data)
    tokens = dictionary(sources, units)
    stdin_ids = {i for i, inv in enumerate(invocations) if inv.stdin}
    base_files = dict(data)
    for i in stdin_ids:
        stdin = invocations[i].stdin
        assert stdin is not None
        base_files[f"stdin-{i}.bin"] = stdin
    pools = _pools(units, tokens, seed, budget, list(constants or []), chars)
    out: list[Variant] = []
    poc = script_of(invocations, {}, stdin_ids)
    seen = {_key(base_files, poc)}
    left = {False: budget, True: budget // GOOD_SHARE}  # by "is a good input's unit"
    for unit, op, value, desc, facts in [
        *_turns(pools.get("compared", [])),
        *_turns(pools.get("length", [])),
        *_turns(pools.get("other", [])),
    ]:
        if not any(left.values()):
            break
        is_good = unit.name in good
        if not left[is_good]:
            continue
        made = _variant(invocations, base_files, stdin_ids, unit, value)
        if made is None:
            continue
        files, script = made
        key = _key(files, script)
        if key in seen:
            continue
        seen.add(key)
        left[is_good] -= 1
        vid = f"v{len(out) + 1:03d}-{op}"
        out.append(Variant(vid, op, unit.name, f"{unit.name}: {desc}", script, files, facts))
    return out, tokens


def _variant(
    invocations: list[Invocation],
    base_files: dict[str, bytes],
    stdin_ids: set[int],
    unit: Unit,
    value: bytes,
) -> tuple[dict[str, bytes], str] | None:
    """The files and script of the PoC with one unit changed (None: it cannot be passed)."""
    files = dict(base_files)
    args: dict[tuple[int, int], str] = {}
    if unit.kind == "file":
        files[unit.name] = value
    elif unit.kind == "stdin":
        files[f"stdin-{unit.name.split(':')[1]}.bin"] = value
    else:
        # an argument is text in the variant's script: a NUL or bytes that are not UTF-8
        # (a substitution inside a multi-byte character) cannot be passed, so no variant
        try:
            text = value.decode("utf-8")
        except UnicodeDecodeError:
            return None
        if "\0" in text:
            return None
        _, inv_no, arg_no = unit.name.split(":")
        args[(int(inv_no), int(arg_no))] = text
    return files, script_of(invocations, args, stdin_ids)
