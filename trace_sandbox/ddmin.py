"""Delta debugging, shared: shrink a sequence (bytes, lines, arguments) while a failure holds.

Stdlib only. One algorithm, two users: the fuzzing gate minimises a crash inside its sandboxed
step (`minimise`, one execution at a time), and `trace record --minimise` minimises a recorded
interaction on the host, where every trial is a cached derivation of a generated graph and a
round's trials are built together (`shrink` with a batch test).

The algorithm is ddmin's complement step: split the sequence into n chunks, try it without each
chunk in turn; the first complement that still fails becomes the sequence (n shrinks by one);
when none does, the chunks halve (n doubles), until chunks are one item long. The result is
1-minimal for the items tried: removing any single item loses the failure (within the budget).
"""

from __future__ import annotations

from collections.abc import Callable

TYPE_CHECKING = False
if TYPE_CHECKING:  # for mypy only: the fuzzing gate's processes import no `typing`
    from typing import TypeVar

    # bytes, or the indices of a sequence's items (lines, arguments): `shrink(tuple(range(n)))`
    S = TypeVar("S", bytes, tuple[int, ...])


def complements(data: S, size: int) -> list[S]:
    """`data` without each chunk of `size` items, in order."""
    return [data[:start] + data[start + size :] for start in range(0, len(data), size)]


def shrink(data: S, first: Callable[[list[S]], int | None], budget: int) -> tuple[S, int]:
    """ddmin over `data`: each round hands `first` the round's complements (at most what is left
    of `budget`) and keeps the first one that still fails. Returns (sequence, trials used):
    a round that found one counts the trials up to it, a round that found none all of them."""
    used = 0
    n = 2
    while len(data) >= 2 and used < budget:
        size = max(1, len(data) // n)
        trials = complements(data, size)[: budget - used]
        hit = first(trials)
        used += len(trials) if hit is None else hit + 1
        if hit is not None:
            data = trials[hit]
            n = max(n - 1, 2)
        elif size == 1:
            break
        else:
            n = min(len(data), n * 2)
    return data, used


def minimise(data: bytes, crashes: Callable[[bytes], bool], budget: int) -> tuple[bytes, int]:
    """`shrink` over bytes with a test run one trial at a time (stopping at the first that
    crashes; an empty input is never tried): at most `budget` executions. Returns (input,
    executions used)."""

    def first(trials: list[bytes]) -> int | None:
        for i, t in enumerate(trials):
            if t and crashes(t):
                return i
        return None

    return shrink(data, first, budget)
