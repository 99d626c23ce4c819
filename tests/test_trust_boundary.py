"""The state directory is a cache of pointers, never evidence (issue 11, item 1).

The audit: after a real `trace verify` of a wrong fix, editing rows of `.trace/state.db` made
`trace decide` ALLOW, `trace bundle --key` sign and `trace verify --bundle` sign, although the
store's own outcome records said the gates failed. Now every row is checked against the
derivation the graph instantiates now and the store's valid, unmodified output, and every
outcome is re-read from the store: a forged row is refused, nothing is signed.

The fork copy gets a unique reproducer comment, so its derivations are its own: the test that
modifies a store output touches no path another test (or engineer) builds.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import stat
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from engine.evidence import SIGNATURE_FILE
from engine.signing.keys import keygen
from tests.enginekit import cli
from tests.verified import cheap_gates

pytestmark = pytest.mark.nix

REPO = Path(__file__).resolve().parent.parent
FIXTURE = REPO / "tests" / "fixtures" / "fork"
CAND = "trace/candidates/cparse-wrong-fix/candidate.toml"


@dataclass
class World:
    fork: Path
    cand: Path
    key: Path
    db: Path
    pristine: bytes


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    base = tmp_path_factory.mktemp("trust")
    fork = base / "fork"
    shutil.copytree(FIXTURE, fork, ignore=shutil.ignore_patterns(".trace", "result*"))
    cand = fork / CAND
    repro = cand.parent / "repro.sh"
    repro.write_text(repro.read_text() + f"\n# {uuid.uuid4()}\n")
    # 2 variants and 20 fuzz executions: the forged rows are the claim here, and the wrong fix's
    # mutation score is 0 on any budget (its mutants are never killed: the calibration row)
    cheap_gates(fork)
    key, _, _ = keygen(base / "keys" / "signer.key")
    rc, out, err = cli("verify", str(cand), "--fork", str(fork), "-q")
    assert rc == 0, out + err  # the wrong fix passes verify; its gates fail (mutation score 0)
    rc, out, err = cli("decide", str(cand), "--fork", str(fork))
    assert rc == 1 and "DENY" in out and "mutation-score-below-threshold" in out, out + err
    db = fork / ".trace" / "state.db"
    return World(fork, cand, key, db, _snapshot(db))


def _snapshot(db: Path) -> bytes:
    con = sqlite3.connect(db)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    return db.read_bytes()


@pytest.fixture
def fresh(world: World) -> World:
    """The state db as `trace verify` left it, before and after each test."""
    world.db.write_bytes(world.pristine)
    yield world
    world.db.write_bytes(world.pristine)


def _rows(db: Path) -> dict[str, tuple[str, str, Any]]:
    con = sqlite3.connect(db)
    rows = {
        sid: (drv, out, json.loads(o) if o else None)
        for sid, drv, out, o in con.execute("SELECT step_id, drv, out, outcome FROM results")
    }
    con.close()
    return rows


def _set(db: Path, step: str, **cols: Any) -> None:
    con = sqlite3.connect(db, isolation_level=None)
    for col, value in cols.items():
        if col == "outcome":
            value = json.dumps(value, sort_keys=True)
        con.execute(f"UPDATE results SET {col} = ? WHERE step_id = ?", (value, step))
    con.close()


def _passing(record: dict[str, Any]) -> dict[str, Any]:
    return record | {"passed": True, "measurable": True, "score": 1.0, "reasons": []}


def _forge_gates(db: Path) -> None:
    rows = _rows(db)
    for step in ("gate-mutation", "gate-coverage"):
        _set(db, step, outcome=_passing(rows[step][2]))


def _assert_nothing_signed(world: World, tmp: Path) -> None:
    """decide, bundle --key and verify --bundle --key: refused, nothing written or signed."""
    rc, out, err = cli("decide", str(world.cand), "--fork", str(world.fork))
    assert rc == 2 and "ALLOW" not in out, out + err
    assert "does not match the Nix store" in err, err
    common = ["--fork", str(world.fork), "--key", str(world.key)]
    rc, out, err = cli("bundle", str(world.cand), *common, "--out", str(tmp / "b"))
    assert rc == 2 and "does not match the Nix store" in err, out + err
    assert not (tmp / "b").exists()
    rc, out, err = cli("verify", str(world.cand), *common, "-q", "--bundle", str(tmp / "v"))
    assert rc == 2 and "does not match the Nix store" in err, out + err
    assert not (tmp / "v" / SIGNATURE_FILE).exists()


def test_forged_gate_rows_sign_nothing(fresh: World, tmp_path: Path) -> None:
    _forge_gates(fresh.db)
    _assert_nothing_signed(fresh, tmp_path)
    _, _, err = cli("decide", str(fresh.cand), "--fork", str(fresh.fork))
    assert "step gate-mutation: the recorded outcome is not the store's" in err, err


def test_a_row_pointing_at_another_output_is_refused(fresh: World, tmp_path: Path) -> None:
    """The pointer itself forged: the mutation gate's row names another step's derivation and
    output (a real, valid, unmodified store path whose record passes)."""
    rows = _rows(fresh.db)
    drv, out, _ = rows["gate-scope"]  # a passing gate record of this very candidate
    forged = rows["gate-mutation"][2] | {"passed": True, "score": 1.0, "reasons": []}
    _set(fresh.db, "gate-mutation", drv=drv, out=out, outcome=forged)
    _set(fresh.db, "gate-coverage", drv=drv, out=out, outcome=rows["gate-scope"][2])
    _assert_nothing_signed(fresh, tmp_path)
    _, _, err = cli("decide", str(fresh.cand), "--fork", str(fresh.fork))
    assert "step gate-mutation: recorded" in err and "the graph instantiates" in err, err


def test_a_modified_store_output_is_refused(fresh: World, tmp_path: Path) -> None:
    """Row and store output forged alike (an attacker who can also write the store): the
    output no longer hashes to the NAR hash Nix registered."""
    rows = _rows(fresh.db)
    out = Path(rows["gate-mutation"][1]) / "outcome.json"
    original = out.read_bytes()
    forged = _passing(json.loads(original))
    mode = stat.S_IMODE(out.parent.stat().st_mode)
    try:
        os.chmod(out.parent, mode | stat.S_IWUSR)
        os.chmod(out, 0o644)
        out.write_text(json.dumps(forged, sort_keys=True))
        _set(fresh.db, "gate-mutation", outcome=forged)
        _set(fresh.db, "gate-coverage", outcome=_passing(rows["gate-coverage"][2]))
        rc, stdout, err = cli("decide", str(fresh.cand), "--fork", str(fresh.fork))
        assert rc == 2 and "ALLOW" not in stdout, stdout + err
        assert "was modified after Nix built it" in err, err
    finally:
        out.write_bytes(original)
        os.chmod(out, 0o444)
        os.chmod(out.parent, mode)


def test_the_index_determinism_flag_is_never_believed(fresh: World) -> None:
    """A forged `--check` result in the index: decide measures determinism again."""
    _set(fresh.db, "post-fix-run@1", deterministic=0)
    rc, out, err = cli("decide", str(fresh.cand), "--fork", str(fresh.fork))
    assert rc == 1 and "mutation-score-below-threshold" in out, out + err
    assert "nondeterministic" not in out


def test_a_decision_record_the_policy_does_not_reproduce_signs_nothing(
    fresh: World, tmp_path: Path
) -> None:
    """Item 2: `trace bundle --decision FILE` signed whatever the record said; the record is now
    only a cross-check of the decision made in-process."""
    record = tmp_path / "decision.json"
    rc, out, err = cli("decide", str(fresh.cand), "--fork", str(fresh.fork), "--out", str(record))
    assert rc == 1 and "DENY" in out, out + err
    doc = json.loads(record.read_text())
    assert doc["decision"] == "deny"
    doc |= {"decision": "allow", "reasons": []}
    record.write_text(json.dumps(doc))
    common = ["--fork", str(fresh.fork), "--key", str(fresh.key), "--out", str(tmp_path / "b")]
    rc, out, err = cli("bundle", str(fresh.cand), *common, "--decision", str(record))
    assert rc == 2, out + err
    assert "the decision record is not what the signing policy decides now" in err, err
    assert "decision" in err and "now DENY" in err
    assert not (tmp_path / "b").exists()


def test_trace_fork_refuses_forged_rows_too(fresh: World, tmp_path: Path) -> None:
    """`trace fork` answers from the same index: a forged gate row is refused there as well
    (the candidate's row says why), and nothing is signed."""
    import subprocess

    git = ["git", "-C", str(fresh.fork), "-c", "user.name=t", "-c", "user.email=t@t.invalid"]
    if not (fresh.fork / ".git").exists():  # `trace fork` runs in a git checkout of the fork
        subprocess.run([*git, "init", "-q"], check=True)
        subprocess.run([*git, "add", "-A", "--", ".", ":!.trace"], check=True)
        subprocess.run([*git, "commit", "-qm", "fork"], check=True)
    _forge_gates(fresh.db)
    out = tmp_path / "bundles"
    rc, stdout, err = cli(
        "fork", fresh.cand.parent.name, "--fork", str(fresh.fork), "--allow-dirty", "-q",
        "--json", "--key", str(fresh.key), "--out", str(out),
    )  # fmt: skip
    assert rc != 0, stdout + err
    assert "does not match the Nix store" in err, err
    [row] = json.loads(stdout)["candidates"]
    assert row["signed"] == "no" and row["decision"] != "allow", row
    assert not list(out.rglob(SIGNATURE_FILE)) if out.exists() else True
