"""The reason catalogue's rule table as a gate step reads it: JSON made once from the catalogue
(`python3 -m trace_sandbox.gates.main rules-json`, templates/lib/gate.nix), the same rules in
the same order as the catalogue itself, with no tomllib imported to read it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from trace_sandbox.gates import codes

REPO = Path(__file__).resolve().parent.parent
CATALOGUE = REPO / "policy" / "reasons.toml"


@pytest.fixture
def fresh_rules() -> Iterator[None]:
    codes.rules.cache_clear()
    yield
    codes.rules.cache_clear()


def _table(tmp_path: Path, catalogue: Path = CATALOGUE) -> Path:
    out = tmp_path / "rules.json"
    cmd = [sys.executable, "-S", "-B", "-m", "trace_sandbox.gates.main", "rules-json"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run([*cmd, str(catalogue), str(out)], check=True, env=env)
    return out


def test_the_json_table_is_the_catalogues_rules_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_rules: None
) -> None:
    from_toml = list(codes.rules().items())
    table = _table(tmp_path)
    monkeypatch.setenv(codes.CATALOGUE_ENV, str(table))
    codes.rules.cache_clear()
    assert list(codes.rules().items()) == from_toml
    assert len(from_toml) >= 43
    assert codes.read_rule_table(str(table)) == codes.read_rule_table(str(CATALOGUE))


def test_a_gate_follows_the_table_it_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_rules: None
) -> None:
    """An edited rule in the JSON table: the record follows the table, not the checkout."""
    table = _table(tmp_path)
    rows = json.loads(table.read_text())
    row = next(r for r in rows if r["rule"] == "coverage.no-executable-lines")
    row["code"] = "coverage-below-threshold"
    table.write_text(json.dumps(rows))
    monkeypatch.setenv(codes.CATALOGUE_ENV, str(table))
    record = codes.gate_record(
        "coverage", ["coverage.no-executable-lines"], measurable=False, score=None, details={}
    )
    assert record["reasons"] == ["coverage-below-threshold"]


def test_reading_the_table_imports_no_tomllib(tmp_path: Path) -> None:
    table = _table(tmp_path)
    probe = (
        "import sys; from trace_sandbox.gates import codes; "
        "r = codes.rules(); print(len(r), 'tomllib' in sys.modules)"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), codes.CATALOGUE_ENV: str(table)}
    got = subprocess.run(
        [sys.executable, "-S", "-B", "-c", probe], env=env, capture_output=True, text=True
    )
    count, imported = got.stdout.split()
    assert int(count) >= 43 and imported == "False"


def test_a_broken_table_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_rules: None
) -> None:
    bad = tmp_path / "rules.json"
    bad.write_text("[{")
    monkeypatch.setenv(codes.CATALOGUE_ENV, str(bad))
    with pytest.raises(RuntimeError, match=r"rule catalogue .*rules\.json cannot be read"):
        codes.rules()
