"""Hard deadlines around calls that may block on the network.

sigstore-python's Fulcio and Rekor clients call `requests` without a timeout: a silent network
hangs them forever. `call_with_deadline` runs the call in a daemon thread and gives up after
`seconds`, raising SigningError; the abandoned thread cannot keep the process alive.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import TypeVar

from engine.errors import SigningError

T = TypeVar("T")

DEFAULT_SECONDS = float(os.environ.get("TRACE_SIGNING_DEADLINE", "60"))


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
