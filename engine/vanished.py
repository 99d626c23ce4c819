"""What a build made is held at once; an output another process removed first is built again.

Nix runs without a daemon here: every Nix process opens the store itself, and nix-build holds
what it built only by temporary roots, which end with it. A result is held for good by the
state directory's GC root (Index.add_root), which the run used to add only when it recorded its
results, after reading outcomes and the --check rebuilds. In between, any other process on the
same store could delete it: another state directory's `nix-store --delete` of the same
derivation's output (the same candidate verified from another checkout of the same commit is
the same derivations), a `nix-collect-garbage`. The step was then reported built with its output
gone (no outcome: a gate missing from the verdict), or, beside a failed step, failed with no
build log. So, as soon as the build returns: every output that exists is rooted, and one that no
longer exists although Nix built it is realised once more (then rooted), its failure reported
as a build's. tests/test_engine_vanished.py reproduces both.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.cache import Index
    from engine.nix import Nix
    from engine.nixreport import RealiseReport


def hold(
    nix: Nix,
    index: Index,
    keys: Mapping[str, str],
    drv_of: Mapping[str, str],
    out_of: Mapping[str, str],
    rep: RealiseReport,
) -> tuple[set[str], int]:
    """After the build of `drv_of`'s steps (`rep`): root every output there is (by the step's
    key), build again the ones that vanished, and return (the outputs that are not valid, the
    Nix calls made). `rep` gains the second build's report."""
    calls = 0
    invalid: set[str] = set()
    if rep.returncode != 0:  # a failed build may leave an unregistered dir: ask Nix
        invalid = nix.invalid(list(out_of.values()))
        calls += 1
    gone = [s for s, out in out_of.items() if out not in invalid and not _held(index, keys[s], out)]
    if gone:
        again = nix.realise([drv_of[s] for s in gone])
        rep.merge(again)
        calls += 1
        if again.returncode != 0:
            invalid |= nix.invalid([out_of[s] for s in gone])
            calls += 1
        invalid |= {out_of[s] for s in gone if not _held(index, keys[s], out_of[s])}
    return invalid, calls


def _held(index: Index, key: str, out: str) -> bool:
    """Root `out` if it is there; whether it is (rooted first, then looked at: a delete that
    came before the root is seen, one after it is refused)."""
    index.add_root(key, out)
    if os.path.lexists(out):
        return True
    (index.gcroots / key).unlink(missing_ok=True)
    return False
