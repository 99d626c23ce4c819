"""Cold vs substituted: the fixture fork on "machine A" and then on "machine B" (issue 17).

One run, on this machine, with a `file://` binary cache:

1. salt a copy of tests/fixtures/fork (a new file in every package's source), so every
   derivation is new;
2. machine A (its own state dir): `trace fork NAMES` cold;
3. `trace push` A's results to the cache, signed with a fresh `nix-store
   --generate-binary-cache-key` key;
4. delete A's outputs and the determinism claims push signed from the store (its GC roots
   first);
5. machine B (a fresh state dir, a machine config that trusts the key): `trace fork NAMES`.

B must build no result and rebuild no `check` step with `--check` (A's signed determinism claims
came with the outputs), and reach A's decisions. Times are wall clock of the CLI; the load
average (`/proc/loadavg`) before and after is printed, the machine being shared.

    .venv/bin/python bench/cache_bench.py [--candidates pager-last-page,roster-wrong-field]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
TRACE = [sys.executable, "-m", "engine.cli"]


def salted_fork(work: Path) -> Path:
    fork = work / "fork"
    shutil.copytree(REPO / "tests" / "fixtures" / "fork", fork)
    for src in (fork / "pkgs").glob("*/src"):
        (src / "BENCH-SALT").write_text(uuid.uuid4().hex + "\n")
    (fork / ".gitignore").write_text("/.trace*\n")  # the two machines' state dirs
    git = ["git", "-C", str(fork), "-c", "user.name=bench", "-c", "user.email=bench@trace.test"]
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "salted fixture fork"]):
        subprocess.run([*git, *cmd], check=True, capture_output=True, timeout=120)
    return fork


def trace(*args: str, env: dict[str, str] | None = None) -> tuple[float, str]:
    t = time.monotonic()
    proc = subprocess.run(
        [*TRACE, *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, **(env or {})},
        timeout=7200,
    )
    took = time.monotonic() - t
    if proc.returncode not in (0, 1):  # 1: a candidate denied, as the fixture intends
        sys.exit(f"trace {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return took, proc.stdout


def counts(report: dict[str, Any]) -> dict[str, int]:
    total: dict[str, int] = {}
    for c in report.get("candidates", []):
        for k in ("built", "substituted", "reused", "cached"):
            total[k] = total.get(k, 0) + int(c.get(k, 0))
    return total


def decisions(report: dict[str, Any]) -> dict[str, str]:
    return {str(c["candidate"]): str(c.get("decision")) for c in report["candidates"]}


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--candidates", default="pager-last-page,roster-wrong-field")
    args = ap.parse_args()
    names = [n for n in args.candidates.split(",") if n]
    load0 = _load()
    sys.path.insert(0, str(REPO))
    with tempfile.TemporaryDirectory(prefix="trace-cache-bench-") as tmp:
        work = Path(tmp)
        fork = salted_fork(work)
        sec, pub = work / "bench.sec", work / "bench.pub"
        subprocess.run(
            ["nix-store", "--generate-binary-cache-key", "bench-1", str(sec), str(pub)],
            check=True,
            timeout=60,
        )
        cache = work / "cache"
        machine = work / "machine-b.toml"
        key = pub.read_text().strip()
        machine.write_text(f'substituters = ["file://{cache}"]\ntrusted-public-keys = ["{key}"]\n')
        common = ["--fork", str(fork), "--no-sign", "--json", "--quiet"]
        no_cache = {"TRACE_MACHINE_CONFIG": ""}
        a_state, b_state = str(fork / ".trace-a"), str(fork / ".trace-b")
        cold_s, a_out = trace("fork", *names, *common, "--state-dir", a_state, env=no_cache)
        to = f"file://{cache}"
        push_s, pushed = trace(
            "push", "--state-dir", a_state, "--to", to, "--key", str(sec), "--json", env=no_cache
        )
        from tests.storekit import checked_on, delete_outputs, outputs

        results, gone = len(outputs(Path(a_state))), len(delete_outputs(Path(a_state)))
        claims = json.loads(pushed)["claims"]
        subprocess.run(["nix-store", "--delete", *claims], capture_output=True, timeout=600)
        env = {"TRACE_MACHINE_CONFIG": str(machine)}
        sub_s, b_out = trace("fork", *names, *common, "--state-dir", b_state, env=env)
        a, b = json.loads(a_out), json.loads(b_out)
        nars = len(list(cache.glob("*.narinfo")))
        print(f"candidates: {', '.join(names)}")
        print(f"{'machine':<34} {'seconds':>8}  steps")
        print(f"{'A: cold, no cache':<34} {cold_s:8.1f}  {counts(a)}")
        print(f"{'A: trace push (sign + nix copy)':<34} {push_s:8.1f}  {nars} paths in the cache")
        print(f"{'B: fresh state, signed cache':<34} {sub_s:8.1f}  {counts(b)}")
        print(f"deleted {gone} of A's {results} outputs before B ran (others are held elsewhere)")
        print(f"ratio B/A: {sub_s / cold_s:.3f}")
        where = checked_on(Path(b_state))
        rebuilt = sum(1 for w in where if not w.startswith("claim:"))
        print(f"B --check: {len(where) - rebuilt} claims taken, {rebuilt} rebuilt")
        print(f"load average before: {load0}; after: {_load()}")
        same = decisions(a) == decisions(b)
        print(f"decisions: A {decisions(a)}; B the same: {same}")
        if counts(b).get("built", 0) or rebuilt or not same:
            sys.exit("B built or --checked results or decided differently")
        subprocess.run(["chmod", "-R", "u+w", str(work)], timeout=60)


if __name__ == "__main__":
    main()
