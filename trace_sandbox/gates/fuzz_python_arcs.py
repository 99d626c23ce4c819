"""A Python run's coverage, for the fuzz loop (fuzz_python.py): `ArcTracer`, a sys.settrace
hook that counts every *arc* (the line before, the line now) run in the package's own files and
stops the run (`_Hang`) past its budget of traced events; `ArcMap`, which numbers the arcs and
turns one execution's counts into fuzz features, bucketed as the C path's edge map is
(fuzz.BUCKETS), one 8-bit slot per arc.
"""

from __future__ import annotations

import os
from types import FrameType

from .fuzz import BUCKETS

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

Arc = tuple[str, int, int]


class _Hang(BaseException):
    """Raised in the target by the tracer (past its steps) or fuzz_python's alarm (WALL_LIMIT)."""


class ArcTracer:
    """sys.settrace over the files under `roots` only: (file, line before, line now) counts.
    `mine` (filename -> under the roots) may be shared between tracers: it never changes."""

    def __init__(
        self, roots: tuple[str, ...], mine: dict[str, bool] | None = None, *, steps: int
    ) -> None:
        self.roots = roots
        self.mine = {} if mine is None else mine
        self.counts: dict[Arc, int] = {}
        self.left = [steps]  # events before the run is a hang (_Hang): fuzz_python.STEPS

    def _ours(self, filename: str) -> bool:
        known = self.mine.get(filename)
        if known is None:
            known = self.mine[filename] = os.path.realpath(filename).startswith(self.roots)
        return known

    def __call__(self, frame: FrameType, event: str, arg: Any) -> Any:
        left = self.left
        left[0] -= 1
        if left[0] < 0:
            raise _Hang
        filename = frame.f_code.co_filename
        if event != "call" or not self._ours(filename):
            return None
        last = -frame.f_code.co_firstlineno  # entering the function
        counts = self.counts

        def local(frame: FrameType, event: str, arg: Any) -> Any:
            nonlocal last
            if event == "line":
                left[0] -= 1
                if left[0] < 0:
                    raise _Hang
                arc = (filename, last, frame.f_lineno)
                counts[arc] = counts.get(arc, 0) + 1
                last = frame.f_lineno
            elif event == "return":
                arc = (filename, last, -frame.f_code.co_firstlineno)
                counts[arc] = counts.get(arc, 0) + 1
            return local

        return local


class ArcMap:
    """Arcs numbered in the order first seen (per runner: the same inputs, the same numbers);
    an execution's counts as fuzz features (one byte of bucket bits per arc)."""

    def __init__(self) -> None:
        self.ids: dict[Arc, int] = {}

    def features(self, counts: dict[Arc, int]) -> int:
        for arc in counts:
            self.ids.setdefault(arc, len(self.ids))
        raw = bytearray(len(self.ids))
        for arc, n in counts.items():
            raw[self.ids[arc]] = min(n, 255)
        return int.from_bytes(bytes(raw).translate(BUCKETS), "little")
