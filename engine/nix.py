"""A thin layer over the nix CLI (via plumbum): instantiate, realise, check, read logs.

Every call adds the graph's Nix settings as `--option`s. Output parsing is limited to the few
stable messages Nix prints for build starts, builder failures and `--check` differences.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from engine.errors import NixError
from engine.model import NixSettings

_BUILDING = re.compile(r"^building '(/nix/store/[^']+\.drv)'")
_FAILED = re.compile(r"builder for '(/nix/store/[^']+\.drv)' failed")
_NONDET = re.compile(r"derivation '(/nix/store/[^']+\.drv)' may not be deterministic")
_OUT = re.compile(r'^Derive\(\[\("out","(/nix/store/[^"]+)"')


ENFORCED = ("--option", "sandbox", "true", "--option", "substituters", "")


@dataclass
class RealiseReport:
    returncode: int
    built: set[str] = field(default_factory=set)
    failed: set[str] = field(default_factory=set)
    stderr_tail: list[str] = field(default_factory=list)


def output_of(drv: str) -> str:
    """The `out` output path of a derivation, read from the .drv file (no nix process)."""
    with open(drv, encoding="utf-8") as fh:
        head = fh.read(4096)
    m = _OUT.match(head)
    if not m:
        raise NixError(
            f"cannot find the 'out' output in {drv}",
            hint="templates must produce derivations with an 'out' output",
        )
    return m.group(1)


class Nix:
    def __init__(self, settings: NixSettings, jobs: int | None = None) -> None:
        self.settings = settings
        self.jobs = jobs or settings.jobs

    def option_args(self) -> list[str]:
        """The graph's settings, then the ones trace enforces (last, so nothing overrides them):
        the sandbox on, and no substituters (a result must come from a build here)."""
        args: list[str] = []
        for k, v in sorted(self.settings.options.items()):
            args += ["--option", k, v]
        if self.settings.extra_sandbox_paths:
            args += ["--option", "extra-sandbox-paths", " ".join(self.settings.extra_sandbox_paths)]
        return [*args, *ENFORCED]

    def _cmd(self, name: str):  # type: ignore[no-untyped-def]
        from plumbum import local

        try:
            return local[name]
        except Exception as exc:  # plumbum's CommandNotFound
            raise NixError(
                f"'{name}' not found on PATH",
                hint="run scripts/setup (installs Nix) or put nix on PATH",
            ) from exc

    def instantiate(self, expr_file: Path) -> tuple[int, list[str], str]:
        """Evaluate a file whose value is a list of derivations; return (rc, drv paths, stderr)."""
        cmd = self._cmd("nix-instantiate")
        rc, out, err = cmd.run([*self.option_args(), str(expr_file)], retcode=None)
        return int(rc), [line for line in out.splitlines() if line.strip()], str(err)

    def realise(
        self,
        drvs: Sequence[str],
        *,
        on_event: Callable[[str, str], None] | None = None,
        check: bool = False,
    ) -> RealiseReport:
        """Build (or `--check`) derivations in one invocation with --keep-going."""
        cmd = self._cmd("nix-store")
        args = ["--realise", *drvs, "--keep-going", *self.option_args()]
        # unset: one build per core (Nix's own default is a single build at a time)
        args += ["--max-jobs", str(self.jobs) if self.jobs else "auto"]
        if check:
            args.append("--check")
        report = RealiseReport(returncode=0)
        proc = cmd.popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        assert proc.stderr is not None
        tail: list[str] = []
        for raw in proc.stderr:
            line = raw.rstrip("\n")
            tail.append(line)
            if len(tail) > 200:
                del tail[:100]
            if m := _BUILDING.match(line):
                report.built.add(m.group(1))
                if on_event:
                    on_event("building", m.group(1))
            elif m := _FAILED.search(line):
                report.failed.add(m.group(1))
                if on_event:
                    on_event("failed", m.group(1))
            elif check and (m := _NONDET.search(line)):
                report.failed.add(m.group(1))
        report.returncode = proc.wait()
        report.stderr_tail = tail[-40:]
        return report

    def invalid(self, paths: Sequence[str]) -> set[str]:
        """The paths that are not valid store paths (failed builds may leave unregistered dirs)."""
        if not paths:
            return set()
        rc, out, err = self._cmd("nix-store").run(
            ["--check-validity", "--print-invalid", *paths], retcode=None
        )
        if rc != 0:
            raise NixError(f"nix-store --check-validity failed: {str(err).strip()}")
        return set(str(out).split())

    def read_log(self, drv: str, lines: int = 25) -> str:
        rc, out, _ = self._cmd("nix-store").run(["--read-log", drv], retcode=None)
        if rc != 0:
            return ""
        return "\n".join(str(out).splitlines()[-lines:])

    def version(self) -> str:
        return str(self._cmd("nix").run(["--version"])[1]).strip()
