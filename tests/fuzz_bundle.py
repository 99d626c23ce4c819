"""The fuzzing gate's bundle, end to end (tests/test_e2e_fuzz.py, tests/test_e2e_fuzz_python.py).

A candidate whose PoC alone is fixed, verified with real builds in the session's verified fork
(tests/verified.py: the calibration table reads the same verify), is bundled with `trace bundle
--key`; the fuzzing gate found a crashing input and the signing policy denies with
fuzz-found-crash. `FuzzBundle` reads the gate's first found input out of the
bundle, checks the bundle's records against its files offline, and replays it (the found
input's run rebuilt against the post-fix build). Each test module says what the input and the
rebuilt run must show for its target.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.audit.consistency import record_checks
from engine.audit.replay import replay_checks
from engine.cli import main
from engine.evidence import PAYLOAD_DIR, STATEMENT_FILE
from engine.evidence.statement import Statement
from engine.signing.keys import keygen
from tests.verified import VerifiedFork

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class FuzzBundle:
    """A signed bundle of a candidate the fuzzing gate denied, and its fork."""

    fork: Path
    bundle: Path

    @property
    def payload(self) -> Path:
        return self.bundle / PAYLOAD_DIR

    @property
    def gate(self) -> dict[str, Any]:
        gate: dict[str, Any] = json.loads((self.payload / "gates" / "fuzz.json").read_text())
        return gate

    @property
    def first(self) -> dict[str, Any]:
        """The gate's first input that still fails the post-fix build."""
        first: dict[str, Any] = self.gate["details"]["still_failing"][0]
        return first

    @property
    def found(self) -> Path:
        """The first found input as the bundle carries it (repro.sh, data/)."""
        return self.payload / "fuzz" / self.first["id"]

    def data(self, name: str) -> bytes:
        """A data file of the found input, checked against the digest the gate recorded."""
        data = (self.found / "data" / name).read_bytes()
        assert hashlib.sha256(data).hexdigest() == self.first["files"][name]
        return data

    def statement(self) -> Statement:
        return Statement.model_validate_json((self.bundle / STATEMENT_FILE).read_bytes())

    def records_agree(self) -> tuple[bool, str]:
        """The offline check that the bundle's files are the ones its records name."""
        checks = record_checks(self.statement(), self.payload, [REPO / "policy"])
        (agree,) = [c for c in checks if c.name == "records agree"]
        return agree.ok, agree.detail

    def replayed_run(self) -> dict[str, Any]:
        """Replay the bundle (it must agree), and the rebuilt fuzz-post run of the first found
        input: the replay reran it, not only read it."""
        (replayed,) = replay_checks(self.statement(), self.payload, root=self.fork)
        assert replayed.ok, replayed.detail
        replay = json.loads((self.payload / "replay.json").read_text())
        assert "fuzz-post" in replay["steps"]
        rebuilt = json.loads((self.payload / "outcomes" / "fuzz-post.json").read_text())
        (run,) = [r for r in rebuilt["runs"] if r["index"] == self.first["index"]]
        outcome: dict[str, Any] = run["outcome"]
        return outcome


def bundle_denied_by_fuzz(verified: VerifiedFork, tmp_path: Path, name: str) -> FuzzBundle:
    """Candidate `name` of the session's verified fork (tests/verified.py: the calibration table
    verifies the same candidate, once) bundled and signed with `trace bundle --key`: every claim
    holds (the PoC alone is fixed), the fuzzing gate found a crash, and the signing policy denies
    it (the bundle is written unsigned, for review)."""
    assert verified.verify(name) == 0, verified.outputs[name]
    assert "PASS: every claim holds" in verified.outputs[name]  # the PoC alone is fixed
    assert "gate: fuzz" in verified.outputs[name]
    key, _, _ = keygen(tmp_path / "signer.key")
    bundle = tmp_path / "bundle"
    args = ["bundle", str(verified.candidate(name)), "--fork", str(verified.fork)]
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main([*args, "--out", str(bundle), "--key", str(key)])
    out = buf.getvalue()
    assert rc == 1, out
    assert "fuzz-found-crash" in out and "DENY" in out, out
    return FuzzBundle(verified.fork, bundle)
