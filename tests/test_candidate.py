"""The candidate file: paths checked, patches that change nothing refused, clear errors."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from engine.candidate import load_candidate
from engine.errors import InputError

REPO = Path(__file__).resolve().parent.parent
PAGER = REPO / "tests" / "fixtures" / "fork" / "trace" / "candidates" / "pager-last-page"


@pytest.fixture
def cand(tmp_path: Path) -> Path:
    shutil.copytree(PAGER, tmp_path / "c")
    return tmp_path / "c"


def test_the_fixture_candidate_loads(cand: Path) -> None:
    c = load_candidate(cand / "candidate.toml")
    assert c.spec.package == "pager" and c.context()["patches"] == [str(cand / "fix.patch")]


@pytest.mark.parametrize(
    ("patch", "problem"),
    [
        ("garbage\n", "names no file"),
        ("--- a/x.py\n+++ b/x.py\n", "has no hunk"),
        ("--- a/x.py\n+++ b/x.py\n@@ -1,1 +1,1 @@\n same\n", "adds and removes no line"),
    ],
)
def test_a_patch_that_changes_nothing_is_refused(cand: Path, patch: str, problem: str) -> None:
    (cand / "fix.patch").write_text(patch)
    with pytest.raises(InputError) as info:
        load_candidate(cand / "candidate.toml")
    assert problem in info.value.message and info.value.key == "patches.0"
    assert info.value.line is not None and "unified diff" in (info.value.hint or "")


def test_missing_file_names_the_key(cand: Path) -> None:
    (cand / "repro.py").unlink()
    with pytest.raises(InputError) as info:
        load_candidate(cand / "candidate.toml")
    assert info.value.key == "reproducer.data" and "does not exist" in info.value.message


def test_unknown_signal_is_rejected(cand: Path) -> None:
    text = (cand / "candidate.toml").read_text().replace("exit_code = 1", 'signal = "SIGFOO"')
    (cand / "candidate.toml").write_text(text)
    with pytest.raises(InputError, match="unknown signal 'SIGFOO'"):
        load_candidate(cand / "candidate.toml")
