"""How a recorded run failed, read from its harness record (trace.run/v1): the first failed
invocation of the recorded program. Its signature is what minimisation keeps (the sanitizer
kind and the faulting function; without a sanitizer, the fatal signal, else the exit code, with
the faulting function where the report names one), and its `[expect]` is what the skeleton
states: the sanitizer, the signal or the exit code, and one stderr pattern (the faulting
function's frame, else the last line the program printed)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Failure:
    target: str  # bin/<program>
    exit_code: int | None
    signal: str | None
    sanitizer: str | None  # "Tool: kind", as `[expect] sanitizer` takes it
    function: str | None  # the innermost frame of the package's own code
    message: str | None  # the last non-empty line of its stderr (else stdout)
    message_on_stderr: bool = True

    def signature(self) -> tuple[str, str, str]:
        """What must stay the same for a smaller input to count as the same failure."""
        where = self.function or ""
        if self.sanitizer:
            return ("sanitizer", self.sanitizer, where)
        if self.signal:
            return ("signal", self.signal, where)
        return ("exit", str(self.exit_code), where)

    def describe(self) -> str:
        how = self.sanitizer or self.signal or f"exit {self.exit_code}"
        if self.sanitizer and self.exit_code is not None:
            how += f", exit {self.exit_code}"
        return f"{self.target}: {how}" + (f" in {self.function}" if self.function else "")

    def pattern(self) -> str | None:
        """A regex the target's stderr matches: the faulting function's frame (`#1 0x… in f`
        or `File "…", line n, in f`), else the last line it printed."""
        if self.function:
            return rf"\bin {re.escape(self.function)}\b"
        if self.message:
            return re.escape(self.message)
        return None

    def expect(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.sanitizer:
            out["sanitizer"] = self.sanitizer
        if self.signal:
            out["signal"] = self.signal
        if self.exit_code is not None:
            out["exit_code"] = self.exit_code
        pattern = self.pattern()
        if pattern is not None:
            out["stderr" if self.function or self.message_on_stderr else "stdout"] = pattern
        return out


def _last_line(text: str) -> str | None:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:200] if lines else None


def failure_of(record: dict[str, Any], program: str) -> Failure | None:
    """The first failed invocation of bin/<program> in the record, or None."""
    from trace_sandbox.host import invocation_failed, own_frames

    target = f"bin/{program}"
    for inv in record.get("invocations") or []:
        if inv.get("target") != target or not invocation_failed(inv):
            continue
        san = inv.get("sanitizer")
        kind = f"{san.get('tool')}: {san.get('kind')}" if isinstance(san, dict) else None
        own = own_frames(list(inv.get("frames") or []), 1)
        stderr, stdout = str(inv.get("stderr") or ""), str(inv.get("stdout") or "")
        message = _last_line(stderr)
        return Failure(
            target=target,
            exit_code=inv.get("exit_code"),
            signal=inv.get("signal"),
            sanitizer=kind,
            function=str(own[0].get("function")) if own else None,
            message=message or _last_line(stdout),
            message_on_stderr=message is not None,
        )
    return None


def run_summary(record: dict[str, Any], program: str, frames: int = 8) -> dict[str, Any]:
    """What record.json keeps of the recorded run: each invocation of bin/<program> with its
    exit, signal, sanitizer report, first own frames and output, as the harness recorded
    them (normalised, redacted and capped in the sandbox)."""
    from trace_sandbox.host import own_frames

    keep = ("args", "exit_code", "signal", "sanitizer", "ended", "stdout", "stderr")
    return {
        "target_ran": record.get("target_ran"),
        "timed_out": record.get("timed_out"),
        "invocations": [
            {**{k: inv.get(k) for k in keep},
             "frames": own_frames(list(inv.get("frames") or []), frames)}
            for inv in record.get("invocations") or []
            if inv.get("target") == f"bin/{program}"
        ],
    }  # fmt: skip
