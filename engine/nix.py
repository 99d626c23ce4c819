"""A thin layer over the nix CLI (via subprocess): instantiate, realise, check, read logs.

Every call adds the graph's Nix settings as `--option`s. Output parsing is limited to the few
stable messages Nix prints for build starts, builder failures and `--check` differences.

Store paths go to Nix on its command line in batches of at most ARGV_BUDGET bytes, so a graph of
any size stays under the kernel's argument limit. `nix-store --realise` exits 100-107 when builds
failed (the steps' own failures); any other non-zero status (bad options, interrupted, killed, out
of disk) is Nix's own failure, reported by the caller as such with Nix's stderr.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from engine.errors import NixError
from engine.graphtypes import NixConfig
from engine.machine import Machine, load_machine
from engine.nixreport import RealiseReport, printable
from engine.storelock import store_lock, store_of

_BUILDING = re.compile(r"^building '(/nix/store/[^']+\.drv)'(?: on '([^']+)')?")
_COPYING = re.compile(r"^copying path '(/nix/store/[^']+)' from '([^']+)'")
_FAILED = re.compile(r"builder for '(/nix/store/[^']+\.drv)' failed")
_NO_OUTPUT = re.compile(r"builder for '(/nix/store/[^']+\.drv)' failed to produce output path")
_NONDET = re.compile(r"derivation '(/nix/store/[^']+\.drv)' may not be deterministic")
_OUT = re.compile(r'^Derive\(\[\("out","(/nix/store/[^"]+)"')
_MODIFIED = re.compile(r"path '(/nix/store/[^']+)' was modified!")
_TRACED = re.compile(r"^trace: trace-drv ([0-9a-f]+) (\d+) (/nix/store/[^ ]+\.drv)$")

# `Nix.build`'s expression: the generated file's list, each element traced as it is evaluated
# (`trace: trace-drv TAG INDEX DRV`, TAG new per call so no template can forge a line), then
# built, all by one nix-build.
BUILD_EXPR = (
    "{ file, tag }: let xs = import (/. + file); in builtins.genList (i: let d = "
    'builtins.elemAt xs i; in builtins.trace "trace-drv ${tag} ${toString i} ${d.drvPath}" d) '
    "(builtins.length xs)"
)


# Last on every call, so nothing overrides them: the sandbox on; a substituted path only with a
# signature by a trusted key (engine/machine.py says where caches and keys come from); and
# a cache that fails (unreachable, or a NAR that does not match its signed hash) is never a
# reason to fail: the step is built here instead (`fallback`).
ENFORCED = (
    "--option", "sandbox", "true",
    "--option", "require-sigs", "true",
    "--option", "fallback", "true",
)  # fmt: skip
NO_SUBSTITUTES = ("--option", "substituters", "")
NIX_COMMAND = ("--extra-experimental-features", "nix-command")
ARGV_BUDGET = 256 * 1024  # bytes of store paths per nix-store call (Linux allows ~2 MB in all)


def batches(paths: Sequence[str], budget: int | None = None) -> list[list[str]]:
    """`paths` in order, cut into runs whose total length (with separators) fits the budget."""
    budget = ARGV_BUDGET if budget is None else budget
    out: list[list[str]] = []
    size = 0
    for p in paths:
        if not out or size + len(p) + 1 > budget:
            out.append([])
            size = 0
        out[-1].append(p)
        size += len(p) + 1
    return out


def store_uri(spec: str) -> str:
    """The store URI of a Nix builder specification (`URI system key jobs ...`): its first field,
    with the key file (third field, when not `-`) as the `ssh-key` store parameter."""
    fields = spec.split()
    uri = fields[0]
    if len(fields) > 2 and fields[2] != "-" and "ssh-key=" not in uri:
        uri += ("&" if "?" in uri else "?") + f"ssh-key={fields[2]}"
    return uri


def check_groups(
    drvs: Sequence[str], pool: Sequence[str], built_on: Mapping[str, str]
) -> dict[str, list[str]]:
    """Which check builder rebuilds which derivation: one that did not build it when there is
    one (else any), spread over those by the derivation's hash (stable from run to run)."""
    groups: dict[str, list[str]] = {}
    for drv in drvs:
        others = [s for s in pool if store_uri(s) != built_on.get(drv)] or list(pool)
        pick = int(hashlib.sha256(drv.encode()).hexdigest()[:8], 16) % len(others)
        groups.setdefault(others[pick], []).append(drv)
    return groups


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


def stop(proc: subprocess.Popen[str], grace: float = 10.0) -> None:
    """End a Nix process: SIGTERM first (Nix then stops its builders and releases its locks), then
    SIGKILL if it is still there after `grace` seconds."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class _Cmd:
    """One Nix program, run with subprocess (plumbum cost ~60 ms of imports on every build)."""

    __slots__ = ("path",)

    def __init__(self, path: str) -> None:
        self.path = path

    def run(self, args: Sequence[str]) -> tuple[int, str, str]:
        """(exit status, stdout, stderr); a non-zero status is the caller's to judge."""
        proc = subprocess.run(
            [self.path, *args], capture_output=True, text=True, errors="replace", check=False
        )
        return proc.returncode, proc.stdout, proc.stderr

    def popen(self, args: Sequence[str], **kwargs: Any) -> subprocess.Popen[str]:
        return subprocess.Popen([self.path, *args], **kwargs)


class Nix:
    def __init__(
        self,
        settings: NixConfig,
        jobs: int | None = None,
        *,
        substitute: bool = True,
        machine: Machine | None = None,
    ) -> None:
        """`substitute=False`: no binary cache at all (a replay must rebuild, not download);
        `machine`: the machine config (default: the one in force, engine/machine.py)."""
        self.settings = settings
        self.substitute = substitute
        self.machine = machine if machine is not None else load_machine()
        # -j, then the machine's max-jobs (0: only the builders build), then the pipeline's
        self.jobs: int | None = jobs
        if jobs is None:
            self.jobs = self.machine.max_jobs
        if self.jobs is None:
            self.jobs = settings.jobs

    def option_args(self) -> list[str]:
        """The graph's settings, the machine's cache and builder settings, then the ones trace
        enforces (last, so nothing overrides them): the sandbox on, signatures required."""
        args: list[str] = []
        for k, v in sorted(self.settings.options.items()):
            args += ["--option", k, v]
        if self.settings.extra_sandbox_paths:
            args += ["--option", "extra-sandbox-paths", " ".join(self.settings.extra_sandbox_paths)]
        for k, v in self.machine.nix_options():
            args += ["--option", k, v]
        if not self.substitute:
            args += NO_SUBSTITUTES
        return [*args, *ENFORCED]

    def _cmd(self, name: str) -> _Cmd:
        import shutil

        # looked up on the PATH of now, and run with the environment of now
        path = shutil.which(name)
        if path is None:
            raise NixError(
                f"'{name}' not found on PATH",
                hint="run scripts/setup (installs Nix) or put nix on PATH",
            )
        return _Cmd(path)

    def works(self) -> tuple[bool, str]:
        """Whether Nix, with this run's options and environment, can evaluate `1` at all (its
        store opens, its settings parse), and its stderr: an evaluation that failed while this
        works is the graph's error; else Nix's own (exit 4)."""
        rc, _, err = self._cmd("nix-instantiate").run(["--eval", "-E", "1", *self.option_args()])
        return rc == 0, str(err)

    def instantiate(self, expr_file: Path) -> tuple[int, list[str], str]:
        """Evaluate a file whose value is a list of derivations; return (rc, drv paths, stderr)."""
        cmd = self._cmd("nix-instantiate")
        rc, out, err = cmd.run([*self.option_args(), str(expr_file)])
        return int(rc), [line for line in out.splitlines() if line.strip()], str(err)

    def build(
        self,
        expr_file: Path,
        *,
        on_event: Callable[[str, str], None] | None = None,
        on_traced: Callable[[int, str], None] | None = None,
        wait: bool = True,
    ) -> RealiseReport | None:
        """Evaluate a file whose value is a list of derivations and build them, with
        --keep-going, in ONE nix-build (not nix-instantiate, then nix-store --realise).

        Each element's .drv is learned as Nix evaluates it (`report.traced`, `on_traced` as it
        comes), before any build starts, so builds and failures are still told apart by step;
        the .drv paths are the ones nix-instantiate of the same file gives. An evaluation
        error is exit 1 with some elements untraced: the caller evaluates again to blame it.
        nix-build holds the store's build lock while it evaluates too: `wait=False` returns None,
        having started nothing, when another trace process holds it (the caller then evaluates
        unlocked first, and waits only to realise: engine/run.py `_build`)."""
        import secrets

        tag = secrets.token_hex(8)
        args = ["--no-out-link", "-E", BUILD_EXPR, "--argstr", "file", str(expr_file.resolve())]
        args += ["--argstr", "tag", tag, "--keep-going", *self.option_args()]
        args += ["--max-jobs", "auto" if self.jobs is None else str(self.jobs)]
        with store_lock(store_of(args), wait=wait) as held:  # as `_stream`, or not at all
            if not held:
                return None
            return self._follow_new(args, False, on_event, "nix-build", tag, on_traced)

    def realise(
        self,
        drvs: Sequence[str],
        *,
        on_event: Callable[[str, str], None] | None = None,
        check: bool = False,
        built_on: Mapping[str, str] | None = None,
    ) -> RealiseReport:
        """Build (or `--check`) derivations with --keep-going, in as few calls as argv allows.

        A `--check` goes to the machine's check pool when it has one (Machine.check_pool),
        each derivation to a check builder other than the one that built it (`built_on`).
        Stops at the first call in which Nix itself failed (see RealiseReport.nix_failed)."""
        report = RealiseReport(returncode=0)
        pool = self.machine.check_pool() if check else []
        if pool:  # every check builder gets its share, none the machine that built the drv
            parts = (
                self._check_on(spec, group)
                for spec, group in check_groups(drvs, pool, built_on or {}).items()
            )
        else:
            parts = (self._realise(b, on_event=on_event, check=check) for b in batches(drvs))
            if check:  # a local --check prints no `building` line: it ran here
                report.built_on = dict.fromkeys(drvs, "local")
        for part in parts:
            report.merge(part)
            if part.nix_failed:
                break
        return report

    def _realise(
        self,
        drvs: Sequence[str],
        *,
        on_event: Callable[[str, str], None] | None = None,
        check: bool = False,
    ) -> RealiseReport:
        args = ["--realise", *drvs, "--keep-going", *self.option_args()]
        # unset: one build per core (Nix's own default is a single build at a time)
        args += ["--max-jobs", "auto" if self.jobs is None else str(self.jobs)]
        if check:  # rebuilt and compared HERE: a remote --check via the build hook compares
            args += ["--check", "--option", "builders", ""]  # nothing (see _check_on)
        return self._stream(args, check=check, on_event=on_event)

    def _check_on(self, spec: str, drvs: Sequence[str]) -> RealiseReport:
        """`--check` the derivations on another machine: copy their build closure AND the outputs
        built here to that store, then `nix-store --store URI --realise --check` there, so its
        rebuild is compared with this machine's bits by that machine's Nix. (Nix 2.8's build hook
        does not compare a remote `--check` rebuild with anything: a nondeterministic derivation
        passes it, hence not `--max-jobs 0` with the builders.)"""
        uri = store_uri(spec)
        closure: set[str] = set()
        for batch in batches(drvs):
            rc, out, err = self._cmd("nix-store").run(
                ["--query", "--requisites", "--include-outputs", *batch]
            )
            if rc != 0:
                return RealiseReport(returncode=int(rc), stderr_tail=str(err).splitlines()[-40:])
            closure |= set(str(out).split())
        # the derivations (with their own closure of .drv files and sources), then the outputs
        plain = sorted(p for p in closure if not p.endswith(".drv"))
        for how, paths in ((["--derivation"], list(drvs)), ([], plain)):
            for batch in batches(paths):
                rc, _, err = self._cmd("nix").run(
                    [*NIX_COMMAND, "copy", *how, "--no-check-sigs", "--to", uri, *batch],
                )
                if rc != 0:
                    tail = [f"copying the build closure to the check builder {uri} failed:"]
                    return RealiseReport(
                        returncode=int(rc), stderr_tail=tail + str(err).split("\n")
                    )
        args = ["--store", uri, "--realise", *drvs, "--keep-going", "--check"]
        # the check builder builds itself: not on further builders
        args += [*self.option_args(), "--option", "builders", "", "--max-jobs", "1"]
        report = self._stream(args, check=True, on_event=None)
        report.built_on = dict.fromkeys(drvs, uri)
        if report.returncode == 1 and report.failed:  # the remote's status is not passed on
            report.returncode = 104  # 100 + 4: a --check differed
        return report

    def _stream(
        self,
        args: list[str],
        *,
        check: bool,
        on_event: Callable[[str, str], None] | None,
        program: str = "nix-store",
        tag: str | None = None,
        on_traced: Callable[[int, str], None] | None = None,
    ) -> RealiseReport:
        """Run `nix-store ARGS` (or `program`), following its stderr for builds, failures and
        substitutions, and (given `tag`) the .drv paths Nix.build's expression traces."""
        # one realise or build per store among the user's trace processes (engine/storelock.py:
        # two Nix calls of overlapping derivations can deadlock on their output locks)
        with store_lock(store_of(args)):
            return self._follow_new(args, check, on_event, program, tag, on_traced)

    def _follow_new(
        self,
        args: list[str],
        check: bool,
        on_event: Callable[[str, str], None] | None,
        program: str,
        tag: str | None,
        on_traced: Callable[[int, str], None] | None,
    ) -> RealiseReport:
        """Start `program ARGS` (the caller holds the store's lock) and follow it (`_follow`)."""
        cmd = self._cmd(program)
        proc = cmd.popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            return self._follow(proc, RealiseReport(returncode=0), check, on_event, tag, on_traced)
        except BaseException:  # SIGINT, SIGTERM (engine.cli), a bug: Nix does not outlive trace
            stop(proc)
            raise

    def _follow(
        self,
        proc: subprocess.Popen[str],
        report: RealiseReport,
        check: bool,
        on_event: Callable[[str, str], None] | None,
        tag: str | None,
        on_traced: Callable[[int, str], None] | None,
    ) -> RealiseReport:
        assert proc.stderr is not None
        tail: list[str] = []
        for raw in proc.stderr:
            line = raw.rstrip("\n")
            tail.append(line)
            if line.startswith("error:"):
                report.last_error = line
            if len(tail) > 200:
                del tail[:100]
            if m := _BUILDING.match(line):
                report.built.add(m.group(1))
                if m.group(2):  # sent to a remote builder (which then prints its own line)
                    report.built_on[m.group(1)] = m.group(2)
                else:
                    report.built_on.setdefault(m.group(1), "local")
                if on_event:
                    on_event("building", m.group(1))
            elif m := _FAILED.search(line):
                report.failed.add(m.group(1))
                if _NO_OUTPUT.search(line):
                    report.no_output.add(m.group(1))
                if on_event:
                    on_event("failed", m.group(1))
            elif m := _COPYING.match(line):
                report.substituted[m.group(1)] = m.group(2)
            elif check and (m := _NONDET.search(line)):
                report.failed.add(m.group(1))
                report.differs.add(m.group(1))
            elif tag is not None and (m := _TRACED.match(line)) and m.group(1) == tag:
                index, drv = int(m.group(2)), m.group(3)
                seen = report.traced.setdefault(index, drv)
                if seen != drv:  # evaluated twice, differently: trust neither
                    report.traced[index] = None
                elif on_traced is not None:
                    on_traced(index, drv)
        report.returncode = proc.wait()
        report.stderr_tail = tail[-40:]
        return report

    def invalid(self, paths: Sequence[str]) -> set[str]:
        """The paths that are not valid store paths (failed builds may leave unregistered dirs)."""
        found: set[str] = set()
        for batch in batches(paths):
            rc, out, err = self._cmd("nix-store").run(
                ["--check-validity", "--print-invalid", *batch]
            )
            if rc != 0:
                raise NixError(f"nix-store --check-validity failed: {printable(str(err).strip())}")
            found |= set(str(out).split())
        return found

    def modified(self, paths: Sequence[str]) -> set[str]:
        """The valid store paths whose contents no longer match the NAR hash Nix registered for
        them (one `nix-store --verify-path`, which rehashes each path: keep the list to small
        outputs). Raises NixError when a path is not valid: check validity first."""
        if not paths:
            return set()
        rc, _, err = self._cmd("nix-store").run(["--verify-path", *paths])
        found = set(_MODIFIED.findall(str(err)))
        if rc != 0 and (not found or "is not valid" in str(err)):
            raise NixError(f"nix-store --verify-path failed: {str(err).strip()[-500:]}")
        return found

    def read_log(self, drv: str, lines: int = 25) -> str:
        rc, out, _ = self._cmd("nix-store").run(["--read-log", drv])
        if rc != 0:
            return ""
        return printable("\n".join(str(out).splitlines()[-lines:]))

    def version(self) -> str:
        rc, out, err = self._cmd("nix").run(["--version"])
        if rc != 0:
            raise NixError(f"nix --version failed: {printable(err.strip()[-500:])}")
        return out.strip()
