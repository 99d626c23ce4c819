"""Issue 25 part B: no machine paths in signed payloads. The same candidate verified from two
copies of the fixture fork in two directories gives byte-identical payload files; the statement
differs only in its run metadata (startedOn, finishedOn, invocationId) and the digest of the
run's per-step timings, which are outside the payload."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from engine.cli import main
from engine.evidence import PAYLOAD_DIR, STATEMENT_FILE
from engine.evidence.portable import portable_path, portable_refs
from engine.evidence.timings import BYPRODUCT
from engine.paths import data_dir
from tests.test_e2e_bundle import CAND, FIXTURE, payload_files

MACHINE_DIRS = ("/tmp", "/root", "/work", "/home")


def test_portable_path_names_files_by_the_fork_the_data_dir_or_nothing(tmp_path: Path) -> None:
    fork = tmp_path / "fork"
    assert portable_path(str(fork / "trace.toml"), fork) == "trace.toml"
    assert portable_path(str(fork), fork) == "."
    assert portable_path(str(fork / ".trace" / "policy" / "x.toml"), fork) == ".trace/policy/x.toml"
    shipped = data_dir() / "policy" / "signing.toml"
    assert portable_path(str(shipped), fork) == "trace:policy/signing.toml"
    assert portable_path("/nix/store/abc-x/bin/y", fork) == "/nix/store/abc-x/bin/y"
    assert portable_path("/elsewhere/w.toml", fork) == "outside-fork:w.toml"
    assert portable_path("trace:policy/reasons.toml", fork) == "trace:policy/reasons.toml"
    # a fork inside the data directory (a checkout's fixture) is named relative to the fork
    inside = data_dir() / "tests" / "fixtures" / "fork"
    assert portable_path(str(inside / "trace.toml"), inside) == "trace.toml"


def test_portable_refs_rewrites_only_policy_reference_paths(tmp_path: Path) -> None:
    ref = {"name": "n", "version": "1", "digest": "d", "path": str(tmp_path / "p" / "s.toml")}
    doc = {"policy": ref, "detail": str(tmp_path / "kept"), "list": [dict(ref)]}
    out = portable_refs(doc, tmp_path)
    assert out["policy"]["path"] == "p/s.toml" and out["list"][0]["path"] == "p/s.toml"
    assert out["detail"] == str(tmp_path / "kept")


def _bundle(fork: Path, out: Path, waivers: Path) -> None:
    cli = ["verify", str(fork / CAND), "--fork", str(fork), "-q", "--bundle", str(out)]
    with contextlib.redirect_stdout(io.StringIO()):
        rc = main([*cli, "--waivers", str(waivers)])
    assert rc == 0


def _digests(bundle: Path) -> dict[str, str]:
    return {p: hashlib.sha256(d).hexdigest() for p, d in payload_files(bundle).items()}


def _differences(a: Any, b: Any, at: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        return [
            d
            for k in sorted(a.keys() | b.keys())
            for d in _differences(a.get(k), b.get(k), f"{at}/{k}")
        ]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [
            d
            for i, (x, y) in enumerate(zip(a, b, strict=True))
            for d in _differences(x, y, f"{at}[{i}]")
        ]
    return [] if a == b else [at]


@pytest.mark.nix
def test_one_candidate_in_two_checkouts_gives_the_same_payload(tmp_path: Path) -> None:
    bundles = []
    for name in ("first-checkout", "another/dir/second"):
        fork = tmp_path / name / "fork"
        shutil.copytree(FIXTURE, fork, ignore=shutil.ignore_patterns(".trace", "result*"))
        # a waiver file outside the fork: its path is named in the decision (waivers_file)
        waivers = tmp_path / name / "waivers.toml"
        shutil.copy(data_dir() / "policy" / "waivers.toml", waivers)
        out = tmp_path / name / "bundle"
        _bundle(fork, out, waivers)
        bundles.append((fork, out))
    (_, a), (_, b) = bundles
    assert _digests(a) == _digests(b)
    for fork, bundle in bundles:
        for rel, data in payload_files(bundle).items():
            text = data.decode("utf-8", errors="replace")
            assert str(fork) not in text, rel
            assert not [d for d in MACHINE_DIRS if f"{d}/" in text], rel
    result = json.loads((a / PAYLOAD_DIR / "verify-result.json").read_bytes())
    assert (result["candidate_file"], result["graph"]) == (CAND, "trace.toml")
    signing = json.loads((a / PAYLOAD_DIR / "decisions" / "signing.json").read_bytes())
    assert signing["waivers_file"]["path"] == "outside-fork:waivers.toml"
    # the statement: the same subjects; only the run's own metadata differs (per run, honestly)
    sa = json.loads((a / STATEMENT_FILE).read_bytes())
    sb = json.loads((b / STATEMENT_FILE).read_bytes())
    assert sa["subject"] == sb["subject"]
    meta = "/predicate/runDetails/metadata/"
    # and the digest of the run's per-step timings (informational, measured per run: issue 31)
    names = [b.get("name") for b in sa["predicate"]["runDetails"]["byproducts"]]
    timings = f"/predicate/runDetails/byproducts[{names.index(BYPRODUCT)}]/digest/sha256"
    per_run = [timings] + [meta + k for k in ("finishedOn", "invocationId", "startedOn")]
    assert _differences(sa, sb) == per_run
