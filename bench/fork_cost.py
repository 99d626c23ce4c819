"""What one candidate of a fork costs, phase by phase (issue 17, docs/scale.md).

For one candidate of tests/fixtures/fork, each repetition salts a git copy of the fork (a
comment appended to the package's source, new every time: every derivation is new) and runs:

1. `cold`: the candidate as `trace fork` verifies it, in two timed halves on one state dir:
   the base steps alone (the two package builds and the reproducer runs), then the whole
   candidate (`verify_candidate`: the gates' steps are what is left to build, then judge,
   route, decide, bundle, sign with a local key). Inside both, the time in `Nix.build` (one
   `nix-build`: rendered file evaluated and built), in `evaluate` (rendering +
   `nix-instantiate`: the trusted re-evaluation, or a failed nix-build's fallback), in
   `nix-store --realise` and in `--check`, and in signing are summed separately;
2. `no-op`: the same candidate again on the same state dir (nothing changed);
3. `other machine`: a fresh state dir on the same store (every output already valid: what a
   runner pays when a shared binary cache has every output, minus the download).

    .venv/bin/python bench/fork_cost.py [--candidate pager-last-page] [--repeat 1]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from gates_cost import base_only, salted_fork  # noqa: E402

import engine.run  # noqa: E402
from engine.cache import Index  # noqa: E402
from engine.candidate import load_candidate  # noqa: E402
from engine.fork import discover, make_config, merged_policy  # noqa: E402
from engine.fork.entry import pipeline_entry, signing_source  # noqa: E402
from engine.fork.one_candidate import Signer, verify_candidate  # noqa: E402
from engine.graph import load_graph  # noqa: E402
from engine.hashing import StatCache  # noqa: E402
from engine.nix import Nix  # noqa: E402
from engine.signing.keys import keygen  # noqa: E402
from engine.verify.fork_graph import project_root, verify_context  # noqa: E402

Clock = dict[str, float]


@contextmanager
def timers(clock: Clock) -> Iterator[None]:
    """Sum the time spent in build / evaluate / realise / realise --check / sign into `clock`."""
    saved: list[tuple[Any, str, Any]] = []

    def wrap(owner: Any, name: str, label: Callable[..., str]) -> None:
        inner = getattr(owner, name)

        def timed(*a: Any, **kw: Any) -> Any:
            start = time.monotonic()
            try:
                return inner(*a, **kw)
            finally:
                clock[label(*a, **kw)] += time.monotonic() - start

        saved.append((owner, name, inner))
        setattr(owner, name, timed)

    wrap(engine.run, "evaluate", lambda *a, **kw: "eval")
    wrap(Nix, "build", lambda *a, **kw: "eval+build")
    wrap(Nix, "realise", lambda *a, **kw: "check" if kw.get("check") else "realise")
    wrap(Signer, "sign", lambda *a, **kw: "sign")
    try:
        yield
    finally:
        for owner, name, inner in saved:
            setattr(owner, name, inner)


def git_fork(work: Path, package: str) -> Path:
    fork = salted_fork(work, package)
    (fork / ".gitignore").write_text("/.trace/\n")
    env = ["-c", "user.name=bench", "-c", "user.email=bench@example.invalid"]
    for cmd in (["init", "-q"], ["add", "-A"], [*env, "commit", "-q", "-m", "salted"]):
        subprocess.run(["git", "-C", str(fork), *cmd], check=True, capture_output=True)
    return fork


def one(fork: Path, name: str, state: Path, key: Path, clock: Clock, base_first: bool) -> str:
    ns = argparse.Namespace(
        fork=fork, config="trace", candidates=None, steps=None, policy=None, package_set=".",
        state_dir=state, out=None, key=key, identity_token=None, trust_config=None, no_sign=False,
    )  # fmt: skip
    cfg = make_config(ns)
    policy = merged_policy(cfg)
    file = discover(cfg, [name])[0]
    with timers(clock):
        if base_first:  # the graph loaded exactly as verify_candidate loads it: the same keys
            start = time.monotonic()
            cand = load_candidate(file)
            entry = pipeline_entry(cfg, cand.spec.id)
            with Index(cfg.state) as index:
                graph = load_graph(
                    entry,
                    root=project_root(cfg.package_set),
                    context=verify_context(cand, cfg.package_set, signing_source(cfg, policy)),
                    hasher=StatCache(index.db),
                    variant=cand.spec.id,
                )
                base = engine.run.run_graph(base_only(graph), index)
            clock["base total"] += time.monotonic() - start
            clock["base steps built"] += base.count("built")
            for name in ("eval+build", "eval", "realise"):  # the base half's, apart
                if name in clock:
                    clock[f"{name} (base)"] = clock.pop(name)
        start = time.monotonic()
        out = verify_candidate(
            cfg, file, policy, Signer(ns), dirty=False, jobs=None, progress=False, wait=0
        )
        clock["total"] += time.monotonic() - start
    clock["steps built"] += out.built
    clock["steps reused"] += out.reused
    clock["steps cached"] += out.cached
    return f"{out.decision} ({out.signed})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--candidate", default="pager-last-page")
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args(argv)
    runs: dict[str, list[Clock]] = defaultdict(list)
    with tempfile.TemporaryDirectory(prefix="trace-fork-bench-") as tmp:
        work = Path(tmp)
        key, _, _ = keygen(work / "keys" / "bench.key")
        toml = REPO / "tests/fixtures/fork/trace/candidates" / args.candidate / "candidate.toml"
        package = load_candidate(toml).spec.package
        for rep in range(args.repeat):
            fork = git_fork(work, package)
            state = fork / ".trace" / "a"
            for what, st, base_first in (
                ("cold", state, True),
                ("no-op", state, False),
                ("other machine", fork / ".trace" / "b", False),
            ):
                clock: Clock = defaultdict(float)
                verdict = one(fork, args.candidate, st, key, clock, base_first)
                runs[what].append(clock)
                shown = ", ".join(f"{k} {v:.2f}" for k, v in sorted(clock.items()))
                print(f"rep {rep + 1} {what}: {verdict}; {shown}", flush=True)
    print(f"\ncandidate {args.candidate}, medians of {args.repeat} (seconds; counts are steps):")
    for what, clocks in runs.items():
        keys = sorted({k for c in clocks for k in c})
        med = {k: statistics.median(c.get(k, 0.0) for c in clocks) for k in keys}
        print(f"  {what:14s} " + ", ".join(f"{k} {v:.2f}" for k, v in med.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
