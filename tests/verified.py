"""One verified copy of the fixture fork per test session (issue 30: the suite's time).

The calibration table (tests/test_gates_calibration.py) and tests/test_verify.py read the same
verdicts of the same candidates: each candidate of tests/fixtures/fork is verified once per
session, by a real `trace verify` in one copy of the fork (its own state directory, `.trace`),
the first time a test asks for it; every later reader takes the result file that run wrote and
decides on that state. A test that edits the fork or adds a candidate uses its own copy: the
shared one is only read (and `trace decide` writes its decision records there).
"""

from __future__ import annotations

import io
import json
import shutil
from collections.abc import Iterator, Mapping
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import tomli

from engine.verify_result import VerifyResult

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "fork"
CANDIDATES = "trace/candidates"


def copy_fork(dest: Path) -> Path:
    """A copy of the fixture fork without any state or result links."""
    shutil.copytree(FIXTURE, dest, ignore=shutil.ignore_patterns(".trace", "result*"))
    return dest


def cheap_gates(fork: Path) -> None:
    """The fork's own signing policy (FORK/trace/policy/signing.toml, which verify's gates
    apply): the shipped one with 2 variants and 20 fuzz executions, for a test that reads a
    verify's claims, steps or machines, never a gate's verdict (issue 30: the full budgets run
    24 variants per surviving mutant, most of a cold verify's time). tests/test_verify.py's
    broken inputs and tests/test_verify_isolation.py's deceptive reproducers use it, and
    tests/test_trust_boundary.py's forged rows (its wrong fix's mutation score is 0 on any
    budget). Not for a test whose claim is a gate's verdict: it may differ on 2 variants."""
    shipped = FIXTURE.parents[2] / "policy"
    text = (shipped / "signing.toml").read_text()
    cheap = text.replace("\nbudget = 24 ", "\nbudget = 2 ").replace(
        "\nexecutions = 500\n", "\nexecutions = 20\n"
    )
    assert cheap.count("budget = 2 ") == 1 and "executions = 20\n" in cheap
    (fork / "trace" / "policy").mkdir(parents=True)
    (fork / "trace" / "policy" / "signing.toml").write_text(cheap)
    # its `catalogue = "reasons.toml"` is read beside it (verify's table prints the codes)
    shutil.copyfile(shipped / "reasons.toml", fork / "trace" / "policy" / "reasons.toml")


class VerifiedFork:
    """A copy of the fixture fork whose candidates are verified on first use, once."""

    def __init__(self, fork: Path) -> None:
        self.fork = fork
        self.codes: dict[str, int] = {}
        self.outputs: dict[str, str] = {}

    @property
    def state(self) -> Path:
        return self.fork / ".trace"

    def names(self) -> list[str]:
        return sorted(
            p.name for p in (self.fork / CANDIDATES).iterdir() if (p / "candidate.toml").is_file()
        )

    def candidate(self, name: str) -> Path:
        return self.fork / CANDIDATES / name / "candidate.toml"

    def verify(self, name: str) -> int:
        """`trace verify` of the candidate (the first call only): its exit code, 0 or 1."""
        if name not in self.codes:
            from engine.cli import main

            out, err = io.StringIO(), io.StringIO()
            with redirect_stdout(out), redirect_stderr(err):
                code = main(["verify", str(self.candidate(name)), "--fork", str(self.fork), "-q"])
            self.outputs[name] = out.getvalue() + err.getvalue()
            assert code in (0, 1), self.outputs[name]
            self.codes[name] = code
        return self.codes[name]

    def result_file(self, name: str) -> Path:
        self.verify(name)
        cid = tomli.loads(self.candidate(name).read_text())["id"]
        return self.state / "verify" / f"{cid}.json"

    def result_doc(self, name: str) -> dict[str, Any]:
        doc: dict[str, Any] = json.loads(self.result_file(name).read_text())
        return doc

    def result(self, name: str) -> VerifyResult:
        return VerifyResult.model_validate_json(self.result_file(name).read_text())


class Results(Mapping[str, VerifyResult]):
    """Every candidate's VerifyResult, verified when first read (a lazy `dict`)."""

    def __init__(self, verified: VerifiedFork) -> None:
        self.verified = verified
        self.cache: dict[str, VerifyResult] = {}

    def __getitem__(self, name: str) -> VerifyResult:
        if name not in self.cache:
            if not self.verified.candidate(name).is_file():
                raise KeyError(name)
            self.cache[name] = self.verified.result(name)
        return self.cache[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.verified.names())

    def __len__(self) -> int:
        return len(self.verified.names())
