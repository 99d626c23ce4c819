"""Minimise a recorded call by delta debugging (trace_sandbox/ddmin.py, the fuzzing gate's
minimiser): over its arguments, then the `--env` variables it was given, then each data file's
lines and bytes, then its stdin's lines and bytes, keeping a smaller call only while it still
fails the same way (Failure.signature: the sanitizer kind and faulting function). Trials run in
batches under the harness (trials.py): each batch is one engine run, every trial a cached
step."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from engine.record.failure import Failure, failure_of

if TYPE_CHECKING:
    from engine.record.interaction import Interaction
    from engine.record.trials import Trials

BATCH = 4  # trials per engine run: a round's first complements, built together


@dataclass
class Shrinker:
    trials: Trials
    failure: Failure
    budget: int  # trials ddmin may ask for, over all passes
    batch: int = BATCH
    used: int = 0

    def first_failing(self, calls: list[Interaction]) -> int | None:
        """Index of the first call that fails as the recorded one did, `batch` at a time."""
        same = self.failure.signature()
        for start in range(0, len(calls), self.batch):
            records = self.trials.run(calls[start : start + self.batch])
            for i, record in enumerate(records):
                got = failure_of(record, calls[start + i].program)
                if got is not None and got.signature() == same:
                    return start + i
        return None

    def items(
        self, n: int, make: Callable[[tuple[int, ...]], Interaction], *, none: bool = False
    ) -> tuple[int, ...]:
        """ddmin over the indices of n items; `make` builds the call that keeps some of them.
        ddmin never tries an empty sequence; with `none` (arguments, variables: a call without
        any is a call), one last trial tries without the one item left."""
        from trace_sandbox.host import shrink

        def first(trials: list[tuple[int, ...]]) -> int | None:
            return self.first_failing([make(t) for t in trials])

        kept, used = shrink(tuple(range(n)), first, max(0, self.budget - self.used))
        self.used += used
        if none and len(kept) == 1 and self.used < self.budget:
            self.used += 1
            kept = () if first([()]) == 0 else kept
        return kept

    def octets(self, data: bytes, make: Callable[[bytes], Interaction]) -> bytes:
        from trace_sandbox.host import shrink

        def first(trials: list[bytes]) -> int | None:
            return self.first_failing([make(t) for t in trials])

        kept, used = shrink(data, first, max(0, self.budget - self.used))
        self.used += used
        return kept

    def text(self, data: bytes, make: Callable[[bytes], Interaction]) -> bytes:
        """Lines first (whole lines are the likely units), then bytes."""
        lines = data.splitlines(keepends=True)
        kept = self.items(len(lines), lambda ix: make(b"".join(lines[i] for i in ix)))
        return self.octets(b"".join(lines[i] for i in kept), make)


def _replacing(call: Interaction, name: str) -> Callable[[bytes], Interaction]:
    def make(data: bytes) -> Interaction:
        return call.with_file(name, data)

    return make


def minimise(call: Interaction, shrinker: Shrinker) -> Interaction:
    """The smallest call the budget found that still fails as `shrinker.failure` says."""
    call = call.with_args(shrinker.items(len(call.args), call.with_args, none=True))
    call = call.with_env(shrinker.items(len(call.env), call.with_env, none=True))
    for name, content in call.files:
        call = call.with_file(name, shrinker.text(content, _replacing(call, name)))
    if call.stdin is not None:
        call = call.with_stdin(shrinker.text(call.stdin, call.with_stdin))
    return call
