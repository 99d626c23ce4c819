"""`trace watch`'s loop between rounds (engine/watch.py, engine/inotify.py): one inotify
descriptor for the whole watch (its watches and queued events kept across rounds, started afresh
after a loss; closing one per round cost ~20 ms between an edit and its build), and an edit made
while a round builds is never lost."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any, ClassVar

from engine import watch
from engine.inotify import Changes

PAST = 1_600_000_000_000_000_000


class _Result:
    ok = True
    steps: ClassVar[dict[str, Any]] = {}


def _file(tmp: Path, name: str = "in.txt") -> tuple[Path, list[tuple[Path, list[str]]]]:
    d = tmp / "data"
    d.mkdir(parents=True, exist_ok=True)
    f = d / name
    f.write_text("one\n")
    os.utime(f, ns=(PAST, PAST))
    time.sleep(0.02)  # the utime's ctime is not "during the first load"
    return f, [(f, [])]


class _Waiter:
    """A waiter that records its calls; `wait` reports a change at once."""

    def __init__(self, log: list[str]) -> None:
        self.ok, self.log = True, log
        log.append("made")

    def watch(self, reads: Any) -> None:
        self.log.append("watch")

    def wait(self, timeout: float) -> str:
        self.log.append("wait")
        return "changed"

    def close(self) -> None:
        self.log.append("close")


def test_one_waiter_for_the_whole_watch(tmp_path: Path) -> None:
    """The waiter is made once, each later round adds its reads to it, it is closed once; an
    edit made while a round builds (after its snapshot) is the next round's change."""
    f, reads = _file(tmp_path)
    log: list[str] = []
    whys: list[list[str]] = []

    def load_and_run(loaded: Any, why: list[str]) -> _Result:
        whys.append(why)
        loaded(reads)
        f.write_text(f"edit {len(whys)}\n")  # during the build: the next round must see it
        return _Result()

    assert watch.watch(load_and_run, lambda r: None, rounds=4, changes=lambda r: _Waiter(log)) == 4
    assert log.count("made") == 1 and log.count("close") == 1, log
    assert log.count("watch") == 3, log  # rounds 2-4 add their reads to the same waiter
    assert whys[1:] == [[str(f)]] * 3, whys


def test_changes_keeps_its_watches_and_queued_events_across_rounds(tmp_path: Path) -> None:
    a, reads_a = _file(tmp_path / "a")
    b, reads_b = _file(tmp_path / "b")
    ch = Changes(reads_a)
    try:
        assert ch.ok and ch.wait(0.05) == "timeout"
        a.write_text("during the build\n")  # no one waiting: the event stays queued
        assert ch.wait(0) == "changed"
        ch.watch(reads_a + reads_b)  # the next round read b too
        assert ch.ok and ch.wait(0.05) == "timeout"
        b.write_text("b\n")
        assert ch.wait(5) == "changed"
        a.write_text("a again\n")  # a's watch was kept
        assert ch.wait(5) == "changed"
        shutil.rmtree(tmp_path / "b" / "data")  # a watched directory gone: events lost
        got = ch.wait(5)
        while got == "changed":  # the files' own events may come first
            got = ch.wait(5)
        assert got == "lost" and not ch.ok
        ch.watch(reads_a)  # started afresh on what is still read
        assert ch.ok and ch.wait(0.05) == "timeout"
        a.write_text("after the loss\n")
        assert ch.wait(5) == "changed"
    finally:
        ch.close()
