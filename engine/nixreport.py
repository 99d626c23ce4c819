"""What one Nix build call did (`RealiseReport`), and Nix's text made printable: engine/nix.py's
report, kept apart from the calls that fill it (engine/nix.py re-exports both names).

`nix-store --realise` exits 100-107 when builds failed (the steps' own failures); any other
non-zero status (bad options, interrupted, killed, out of disk) is Nix's own failure.
"""

from __future__ import annotations

import re

from engine.errors import NixError

# Nix's last `error:` line when what failed were builds (a builder that failed, or exited 0
# without creating its outputs: `nix-store` then exits 1, not 100-107), not Nix itself
_STEP_ERROR = re.compile(
    r"^error: (builder for '|build of '|\d+ dependencies of derivation '|cannot build derivation '"
    r"[^']+': \d+ dependencies couldn't be built)"
)
BUILD_FAILURE_CODES = range(100, 108)  # 100 + bits: 1 timeout, 2 hash mismatch, 4 --check differs

_UNPRINTABLE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")


def printable(text: str) -> str:
    """Log text safe for a terminal: control characters (ESC, NUL, CR, C1 ...) made visible."""

    def visible(m: re.Match[str]) -> str:
        c = ord(m.group(0))
        return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"

    return _UNPRINTABLE.sub(visible, text)


class RealiseReport:
    """What one Nix build call did: what it built, what failed, and its exit status. A plain
    class: a dataclass costs ~2-4M instructions to make at import (issue 30)."""

    __slots__ = (
        "built",
        "built_on",
        "differs",
        "failed",
        "last_error",
        "no_output",
        "returncode",
        "stderr_tail",
        "substituted",
        "traced",
    )

    def __init__(self, returncode: int, stderr_tail: list[str] | None = None) -> None:
        self.returncode = returncode
        self.built: set[str] = set()
        self.failed: set[str] = set()
        self.no_output: set[str] = set()  # failed: exited 0 without an output
        self.differs: set[str] = set()  # --check: rebuilt, and the output differs
        # drv -> the machine that built it ("local" or the remote builder's URI)
        self.built_on: dict[str, str] = {}
        # store path -> the binary cache it was substituted from (signature checked by Nix)
        self.substituted: dict[str, str] = {}
        self.stderr_tail: list[str] = stderr_tail or []
        self.last_error = ""  # the last line of Nix's stderr that starts with `error:`
        # Nix.build only: list index -> the .drv evaluation gave it (None: seen twice, differently)
        self.traced: dict[int, str | None] = {}

    def merge(self, part: RealiseReport) -> None:
        """Add a later call's report: its builds, failures and origins; the first non-zero exit
        status stays, unless the later call is Nix's own failure."""
        self.built |= part.built
        self.failed |= part.failed
        self.no_output |= part.no_output
        self.differs |= part.differs
        self.built_on.update(part.built_on)
        self.substituted.update(part.substituted)
        self.stderr_tail = part.stderr_tail
        self.last_error = part.last_error or self.last_error
        if part.returncode != 0 and (self.returncode == 0 or part.nix_failed):
            self.returncode = part.returncode

    @property
    def nix_failed(self) -> bool:
        """Nix itself failed (not only builds): bad options, interrupted, killed, out of disk.
        Exit status 1 with builds that failed and Nix's last error about them (a builder that
        exited 0 without creating its output) is those steps' failure, not Nix's."""
        rc = self.returncode
        if rc == 0 or rc in BUILD_FAILURE_CODES:
            return False
        return not (rc == 1 and self.failed and _STEP_ERROR.match(self.last_error))

    def nix_error(self, what: str) -> NixError:
        rc = self.returncode
        how = f"was killed by signal {-rc}" if rc < 0 else f"failed with exit status {rc}"
        tail = "\n    ".join(printable(ln) for ln in self.stderr_tail[-20:]) or "(no output)"
        return NixError(
            f"{what} {how}: Nix itself failed, not a step's build "
            f"(interrupted, killed, out of disk space, or bad options). Nix said:\n    {tail}",
            hint="fix what Nix reports (free disk space, [nix] options, -j) and run again; "
            "steps already built are kept",
        )
