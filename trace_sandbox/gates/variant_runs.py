"""Every variant of the plan against one build, in ONE derivation (`variant-post`, `variant-pre`).

A derivation per variant per side was most of a cold verify's derivations (2 x the budget),
each paying Nix's per-build overhead for one harness run of a second. One derivation per side
runs them instead (a few at a time, PARALLEL), each exactly as the PoC's runs are: the verify
harness's `run` (with the same sanitizer, isolation, timeout and redaction of the PoC's
secrets) in a fresh working directory, its reproducer in namespaces of its own, its own
record. A variant's script is trace's own, so it runs without the reproducer's sandbox and
shell when its form allows (trace_sandbox/harness/direct.py: the requests its wrappers would
have sent, the shell's record byte for byte); a run the shell would have reported a signal
for is run again the usual way. The harness is loaded once into this process and serves
every run (a harness process per run paid its interpreter's start and imports each time); each
run has its own socket, threads and files, and shares no state with the others. One launcher
process (the harness's `serving`, started with the first run that needs one) starts every
run's reproducer in its namespaces, a fork of it per run, instead of a launcher interpreter per
run. A reproducer sees neither the other runs' temporary directories
(`only`: their common parent shows its own alone; each is removed when its run ends) nor this
derivation's `$out`, where the others' records are (`hide`).

`symbolize=0` in the derivation's environment (the pre-fix side, `variant-pre`) leaves the
targets' sanitizer reports unsymbolized (the harness's `run`): the gate only counts the pre-fix
build's crashes and compares their kinds, and symbolizing a crash's report costs more than the
rest of its run. The post-fix side symbolizes: a variant that still crashes it is bundled as a
new reproducer, its frames shown.

`$out/v/<n>/` is what a per-variant step used to be: `outcome.json` (trace.run/v1),
`variant.json` (the plan's variant) and `variant/` (its `repro.sh` and `data/`: what a bundle
carries when it still fails). `$out/outcome.json` (trace.variant-runs/v1) lists every variant's
index, id and run record (and whether the reports were symbolized), so a replay that rebuilds
the step compares every run, the crashing one included. `run_dirs` expands a step's output
into those per-variant directories for the gates (variant_gate, mutant_variants, mutation).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections.abc import Mapping
from types import ModuleType

from .modules import load_json_object
from .scratch import runs_root

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

SCHEMA = "trace.variant-runs/v1"
# Runs at a time. A harness run is mostly waiting (process start-ups, hand-offs over its socket),
# not computing, so a few at once finish much sooner on a loaded machine; each run still has its
# own working directory, process, timeout and record, and the records do not depend on it.
PARALLEL = 4


def harness() -> ModuleType:
    """The verify harness's entry module (trace_sandbox.harness.main), imported on first use
    only: a gate that runs no reproducer does not pay for the harness's imports."""
    from ..harness import main

    return main


def launcher_server() -> Any:
    """ONE launcher process for the reproducer runs of this process (the harness's `serving`,
    for the derivation's harness and this interpreter): a launcher interpreter per run cost more
    than the rest of the launcher's work."""
    return harness().serving(os.path.realpath(sys.executable))


def run_harness(
    variant: str,
    out: str,
    *,
    hide: str = "",
    runs: str | None = None,
    base: Mapping[str, str] | None = None,
) -> None:
    """Variant directory `variant` (repro.sh, data/) under the verify harness into `out`, in a
    fresh temporary directory (in `runs`, whose other entries its reproducer does not see)
    removed afterwards; the rest of the harness's environment (target, harness, timeout, tools,
    taint, symbolize) is `base`'s, by default the derivation's."""
    base = os.environ if base is None else base
    data = sorted(os.path.join(variant, "data", n) for n in os.listdir(f"{variant}/data"))
    env = dict(base)
    env.update(out=out, script=os.path.join(variant, "repro.sh"), data=" ".join(data))
    if hide:
        env["hide"] = hide
    if runs:
        env["only"] = runs
    # trace wrote the variant's script: run without a shell when its form allows (direct.py);
    # a run whose record would not be the shell's is run again the usual way, from scratch
    for direct in ("1", "0"):
        tmp = tempfile.mkdtemp(prefix="v-", dir=runs or base.get("TMPDIR", "/tmp"))
        try:
            harness().run({**env, "TMPDIR": tmp, "direct": direct})
            return
        except harness().DirectFallback:
            continue
        finally:
            remove(tmp)


def remove(path: str) -> None:
    """Remove a run's directory tree, read-only parts too (the harness's copy of a package
    keeps the store's modes: a Python package's directories are not writable)."""
    for root, dirs, _ in os.walk(path):
        for d in dirs:
            full = os.path.join(root, d)
            if not os.path.islink(full):
                os.chmod(full, 0o700)
    shutil.rmtree(path)


def _indices(plan: str) -> list[int]:
    root = os.path.join(plan, "v")
    return sorted(int(n) for n in os.listdir(root) if n.isdigit()) if os.path.isdir(root) else []


def run_side(plan: str, out: str, *, parallel: int = PARALLEL) -> dict[str, Any]:
    """Run every variant of `plan` against the derivation's target, `parallel` at a time;
    write `out` (see above)."""
    from concurrent.futures import ThreadPoolExecutor  # only here: the gates import run_dirs

    os.makedirs(os.path.join(out, "v"))
    indices = _indices(plan)
    # the runs' directories on a memory file system when it has room for them (scratch.py)
    target = os.environ.get("target", "")  # noqa: SIM112 (a derivation attribute)
    parent = runs_root([target], parallel, os.environ.get("TMPDIR", "/tmp"))
    runs_dir = tempfile.mkdtemp(prefix="runs-", dir=parent)

    def one(n: int) -> None:
        dest = os.path.join(out, "v", str(n))
        run_harness(os.path.join(plan, "v", str(n)), dest, hide=out, runs=runs_dir)

    if indices:
        with launcher_server(), ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
            list(pool.map(one, indices))  # a run that failed to start raises here
    remove(runs_dir)
    runs = []
    for index in indices:
        src = os.path.join(plan, "v", str(index))
        dest = os.path.join(out, "v", str(index))
        shutil.copyfile(os.path.join(src, "variant.json"), os.path.join(dest, "variant.json"))
        os.makedirs(os.path.join(dest, "variant"))
        shutil.copyfile(os.path.join(src, "repro.sh"), os.path.join(dest, "variant", "repro.sh"))
        shutil.copytree(os.path.join(src, "data"), os.path.join(dest, "variant", "data"))
        meta = load_json_object(os.path.join(dest, "variant.json"))
        record = load_json_object(os.path.join(dest, "outcome.json"))
        runs.append({"index": index, "id": meta.get("id"), "outcome": record})
    summary = {
        "schema": SCHEMA,
        "variants": len(runs),
        "symbolized": os.environ.get("symbolize") != "0",  # noqa: SIM112 (a derivation attribute)
        "runs": runs,
    }
    with open(os.path.join(out, "outcome.json"), "w", encoding="utf-8") as fh:
        json.dump(summary, fh, indent=2, sort_keys=True)
        fh.write("\n")
    return summary


def run_dirs(dirs: list[str]) -> list[str]:
    """The per-variant run directories of variant-run step outputs: `<d>/v/<n>` of a batched
    step's output, in index order; a directory without `v/` is one run itself."""
    out: list[str] = []
    for d in dirs:
        root = os.path.join(d, "v")
        if os.path.isdir(root):
            out += [os.path.join(root, str(n)) for n in _indices(d)]
        else:
            out.append(d)
    return out
