"""Hard deadlines around calls that may block on the network.

sigstore-python's Fulcio and Rekor clients call `requests` without a timeout: a silent network
hangs them forever. `call_with_deadline` runs the call in a daemon thread and gives up after
`seconds`, raising SigningError; the abandoned thread cannot keep the process alive.
`Deadline` gives a whole sequence of such calls (trust root, Fulcio, Rekor) one deadline.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from engine.errors import SigningError

T = TypeVar("T")

DEFAULT_SECONDS = float(os.environ.get("TRACE_SIGNING_DEADLINE", "60"))


class Deadline:
    """One overall deadline for a sequence of calls: each gets only what is left of it."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return max(0.0, self.end - time.monotonic())

    def call(self, fn: Callable[[], T], what: str) -> T:
        left = self.left()
        if left <= 0:
            raise SigningError(
                f"{what}: the signing deadline of {self.seconds:g} s had already passed",
                hint="check the network and the --trust-config URLs; "
                "TRACE_SIGNING_DEADLINE sets the deadline in seconds",
            )
        return call_with_deadline(fn, left, what)


def call_with_deadline(fn: Callable[[], T], seconds: float, what: str) -> T:
    result: list[T] = []
    error: list[BaseException] = []

    def target() -> None:
        try:
            result.append(fn())
        except BaseException as exc:  # handed to the caller's thread below
            error.append(exc)

    worker = threading.Thread(target=target, name=f"deadline: {what}", daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        raise SigningError(
            f"{what} did not answer within {seconds:g} s",
            hint="check the network and the --trust-config URLs; "
            "TRACE_SIGNING_DEADLINE sets the deadline in seconds",
        )
    if error:
        raise error[0]
    return result[0]
