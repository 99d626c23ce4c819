"""Coverage-guided fuzzing, pure: a corpus, havoc mutations, an edge map, delta debugging.

The fuzzing gate (fuzz_gate.py) runs the post-fix build compiled with gcc's
`-fsanitize-coverage=trace-pc` and trace's runtime (templates/gates/fuzz-cc): each execution
fills an AFL-style map of edge counters. Here the map is read as one big integer of *bucketed*
counters (1, 2, 3, 4-7, 8-15, 16-31, 32-127, 128+: one bit each per byte), so "does this input
reach an edge, or an edge count class, that no input reached before" is `new & ~seen != 0`.

The budget is a number of *executions*, never wall time, and every random choice comes from
one `random.Random(seed)`: the same target, seeds, budget and seed explore the same inputs in
the same order (a deterministic target gives the same corpus and the same crashes).

An execution is `run(unit, data)`: the PoC's invocations with one unit (a data file, a stdin,
an argument: variants.Unit) replaced by `data`. `fuzz` returns the crashes it found, one per
signature (sanitizer kind and innermost frame, or the signal), each with its input; `minimise`
(trace_sandbox/ddmin.py) shrinks an input by delta debugging over its bytes while it still
crashes the same way.
"""

from __future__ import annotations

import random
from collections.abc import Callable

# the minimiser is shared with `trace record --minimise` (trace_sandbox/ddmin.py)
from ..ddmin import minimise as minimise
from ._dataclasses import dataclass, field

MAP_SIZE = 1 << 16
MAX_INPUT = 1 << 14  # a mutated input never grows past this
MAX_CRASHES = 4  # distinct crash signatures kept (each costs a minimisation)
MAX_HANGS = 8  # hangs before exploration stops (each costs its CPU limit, or the wall backstop)
INTERESTING = (0, 1, 0x7F, 0x80, 0xFF, ord("%"), ord("\\"), ord("\n"), ord("0"), ord("A"))
HEX = b"0123456789abcdefABCDEF"


def _bucket(n: int) -> int:
    for bit, top in enumerate((1, 2, 3, 7, 15, 31, 127)):
        if n <= top:
            return 1 << bit
    return 128


BUCKETS = bytes([0] + [_bucket(n) for n in range(1, 256)])


def features(raw: bytes) -> int:
    """The map's counters as one integer of bucket bits (0: nothing instrumented ran)."""
    return int.from_bytes(raw.translate(BUCKETS), "little")


@dataclass(frozen=True)
class Outcome:
    """One execution: its coverage features, and its crash signature (None: no crash)."""

    features: int
    crash: str | None = None
    hung: bool = False


@dataclass
class Crash:
    """A crash the exploration found: the unit, the input and its signature."""

    unit: int
    data: bytes
    signature: str
    found_at: int  # the execution that found it (1-based)


@dataclass
class FuzzResult:
    """What an exploration did: its executions, corpus and crashes."""

    executions: int = 0
    corpus: list[tuple[int, bytes]] = field(default_factory=list)
    crashes: list[Crash] = field(default_factory=list)
    edges: int = 0  # bucket bits ever seen (a measure of what the corpus reaches)
    hangs: int = 0


Runner = Callable[[int, bytes], Outcome]


# --- mutations -------------------------------------------------------------------------------


def _pos(rng: random.Random, data: bytes, end: bool = False) -> int:
    return rng.randrange(len(data) + (1 if end else 0)) if data or end else 0


def _one(data: bytes, rng: random.Random, tokens: list[bytes], other: bytes) -> bytes:
    """One havoc edit of `data` (AFL's operators, roughly)."""
    op = rng.randrange(10 if data else 3)
    if op == 0:  # insert a byte: an interesting one, a hex digit or any
        pool = rng.choice((bytes(INTERESTING), HEX, bytes(range(256))))
        k = _pos(rng, data, True)
        return data[:k] + bytes([rng.choice(pool)]) + data[k:]
    if op == 1:  # insert a dictionary token
        tok = rng.choice(tokens) if tokens else b"%"
        k = _pos(rng, data, True)
        return data[:k] + tok + data[k:]
    if op == 2:  # splice: a piece of another input
        a = _pos(rng, other, True)
        b = a + rng.randrange(1, 17)
        k = _pos(rng, data, True)
        return data[:k] + other[a:b] + data[k:]
    k = _pos(rng, data)
    if op == 3:  # delete a chunk
        return data[:k] + data[k + rng.randrange(1, 5) :]
    if op == 4:  # duplicate a chunk
        n = rng.randrange(1, 9)
        return data[: k + n] + data[k : k + n] + data[k + n :]
    if op == 5:  # flip a bit
        return data[:k] + bytes([data[k] ^ (1 << rng.randrange(8))]) + data[k + 1 :]
    if op == 6:  # byte arithmetic
        return (
            data[:k] + bytes([(data[k] + rng.choice((-3, -2, -1, 1, 2, 3))) & 0xFF]) + data[k + 1 :]
        )
    if op == 7:  # overwrite with an interesting byte or a hex digit
        return data[:k] + bytes([rng.choice(INTERESTING + tuple(HEX))]) + data[k + 1 :]
    if op == 8:  # overwrite with a token
        tok = rng.choice(tokens) if tokens else b"%"
        return data[:k] + tok + data[k + len(tok) :]
    return data[:k] + bytes([rng.randrange(256)]) + data[k + 1 :]  # a random byte


def mutate(data: bytes, rng: random.Random, tokens: list[bytes], other: bytes) -> bytes:
    """1 to 4 stacked havoc edits, capped at MAX_INPUT bytes."""
    for _ in range(1 << rng.randrange(3)):
        data = _one(data, rng, tokens, other)
    return data[:MAX_INPUT]


# --- the loop --------------------------------------------------------------------------------


def _try(result: FuzzResult, seen: int, unit: int, data: bytes, run: Runner) -> tuple[int, bool]:
    """Run one input; record a new crash; return the features seen and whether it is new."""
    result.executions += 1
    out = run(unit, data)
    result.hangs += out.hung
    if out.hung:
        return seen, False  # a hang is neither a crash nor a corpus entry
    if out.crash is not None:
        known = {c.signature for c in result.crashes}
        if out.crash not in known and len(result.crashes) < MAX_CRASHES:
            result.crashes.append(Crash(unit, data, out.crash, result.executions))
        return seen, False
    fresh = out.features & ~seen
    return seen | out.features, bool(fresh)


def fuzz(
    seeds: list[tuple[int, bytes]],
    run: Runner,
    *,
    executions: int,
    seed: int,
    tokens: list[bytes] | None = None,
    stop_on_crash: bool = False,
) -> FuzzResult:
    """Run every seed (each costs an execution), then mutate corpus entries until `executions`
    is spent. An input that reaches new coverage joins the corpus; a crash is kept once per
    signature (not a corpus entry). No coverage from any seed (nothing instrumented ran: a
    script, a prebuilt binary) ends it there, as do MAX_HANGS hangs. `stop_on_crash`: end at
    the first crash (a prefix of the full run: the same inputs up to there; for measuring, the
    gate spends its whole budget)."""
    rng = random.Random(f"trace-fuzz:{seed}")
    toks = list(tokens or [])
    result = FuzzResult()
    seen = 0
    for unit, data in seeds:
        if result.executions >= executions:
            break
        seen, _ = _try(result, seen, unit, data, run)
        result.corpus.append((unit, data))
    while seen and result.corpus and result.executions < executions:
        if (stop_on_crash and result.crashes) or result.hangs >= MAX_HANGS:
            break
        unit, data = result.corpus[rng.randrange(len(result.corpus))]
        same = [d for u, d in result.corpus if u == unit]
        child = mutate(data, rng, toks, rng.choice(same))
        seen, new = _try(result, seen, unit, child, run)
        if new:
            result.corpus.append((unit, child))
    result.edges = bin(seen).count("1")
    return result
