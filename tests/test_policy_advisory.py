"""OSV advisories: CVSS v3 base scores against published scores, levels, loader errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.advisory import (
    _roundup_30,
    _roundup_31,
    cvss3_base_score,
    level_of,
    load_advisory,
)
from engine.errors import InputError

# Vectors with the base scores NVD / the CVSS v3.1 calculator publish for them.
PUBLISHED = [
    ("AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H", 9.8, "critical"),
    ("AV:N/AC:L/PR:N/UI:N/S:C/C:H/I:H/A:H", 10.0, "critical"),
    ("AV:L/AC:L/PR:L/UI:N/S:U/C:H/I:H/A:H", 7.8, "high"),
    ("AV:L/AC:L/PR:N/UI:R/S:U/C:H/I:H/A:H", 7.8, "high"),
    ("AV:N/AC:L/PR:N/UI:R/S:U/C:H/I:H/A:H", 8.8, "high"),
    ("AV:N/AC:L/PR:N/UI:N/S:U/C:N/I:N/A:H", 7.5, "high"),
    ("AV:N/AC:L/PR:H/UI:N/S:U/C:H/I:H/A:H", 7.2, "high"),
    ("AV:N/AC:L/PR:N/UI:R/S:C/C:L/I:L/A:N", 6.1, "medium"),
    ("AV:N/AC:L/PR:L/UI:N/S:C/C:L/I:L/A:N", 6.4, "medium"),
    ("AV:N/AC:H/PR:N/UI:N/S:U/C:H/I:N/A:N", 5.9, "medium"),
    ("AV:N/AC:L/PR:N/UI:N/S:U/C:L/I:N/A:N", 5.3, "medium"),
    ("AV:P/AC:H/PR:H/UI:R/S:U/C:L/I:N/A:N", 1.6, "low"),
    ("AV:N/AC:L/PR:N/UI:N/S:U/C:N/I:N/A:N", 0.0, "none"),
]


@pytest.mark.parametrize(("vector", "score", "level"), PUBLISHED)
def test_base_score_matches_published(vector: str, score: float, level: str) -> None:
    for version in ("3.0", "3.1"):
        got = cvss3_base_score(f"CVSS:{version}/{vector}")
        assert got == score, (version, vector)
        assert level_of(got) == level


def test_temporal_metrics_do_not_change_the_base_score() -> None:
    base = "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H"
    assert cvss3_base_score(base + "/E:U/RL:O/RC:U/CR:H") == 9.8


def test_roundup_per_version() -> None:
    # v3.1 Appendix A: immune to float noise just above a one-decimal value
    assert _roundup_31(4.000000000000001) == 4.0
    assert _roundup_31(4.02) == 4.1
    assert _roundup_30(4.02) == 4.1
    assert _roundup_30(4.000000000000001) == 4.1


@pytest.mark.parametrize(
    ("vector", "needle"),
    [
        ("CVSS:2.0/AV:N/AC:L/Au:N/C:P/I:P/A:P", "not a CVSS v3 vector"),
        ("CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H", "base metric(s) A missing"),
        ("CVSS:3.1/AV:X/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H", "bad value 'X' for metric AV"),
        ("CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H/ZZ:1", "unknown CVSS v3 metric 'ZZ'"),
        ("CVSS:3.1/AV:N/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H", "metric AV given twice"),
        ("CVSS:3.1/AV:N/AC", "malformed metric 'AC'"),
    ],
)
def test_bad_vectors_are_rejected_with_the_json_path(
    tmp_path: Path, vector: str, needle: str
) -> None:
    path = tmp_path / "osv.json"
    path.write_text(json.dumps({"id": "X-1", "severity": [{"type": "CVSS_V3", "score": vector}]}))
    with pytest.raises(InputError) as exc:
        load_advisory(path)
    assert needle in exc.value.message
    assert exc.value.key == "severity[0].score"
    assert exc.value.file == str(path)


_METRIC = {
    "AV": "NALP",
    "AC": "LH",
    "PR": "NLH",
    "UI": "NR",
    "S": "UC",
    "C": "HLN",
    "I": "HLN",
    "A": "HLN",
}


@given(st.fixed_dictionaries({k: st.sampled_from(v) for k, v in _METRIC.items()}))
def test_score_bounds_and_impact_monotonicity(metrics: dict[str, str]) -> None:
    def vec(m: dict[str, str]) -> str:
        return "CVSS:3.1/" + "/".join(f"{k}:{m[k]}" for k in _METRIC)

    score = cvss3_base_score(vec(metrics))
    assert 0.0 <= score <= 10.0
    assert (score == 0.0) == all(metrics[k] == "N" for k in "CIA")
    for k in "CIA":  # raising one impact metric to High never lowers the score
        assert cvss3_base_score(vec({**metrics, k: "H"})) >= score


def _write(tmp_path: Path, doc: object) -> Path:
    path = tmp_path / "advisory.json"
    path.write_text(json.dumps(doc, indent=1))
    return path


def test_loader_reads_the_fields_routing_needs(tmp_path: Path) -> None:
    doc = {
        "schema_version": "1.6.0",
        "id": "GHSA-xxxx",
        "aliases": ["CVE-2026-1"],
        "summary": "overflow",
        "severity": [
            {"type": "CVSS_V3", "score": "CVSS:3.0/AV:N/AC:L/PR:N/UI:N/S:U/C:N/I:N/A:H"},
            {"type": "CVSS_V3", "score": "CVSS:3.1/AV:L/AC:L/PR:L/UI:N/S:U/C:H/I:H/A:H"},
            {"type": "CVSS_V4", "score": "CVSS:4.0/AV:N/AC:L/AT:N/PR:N/UI:N/VC:H/VI:H/VA:H"},
        ],
        "affected": [
            {"package": {"ecosystem": "PyPI", "name": "pager"}, "ranges": []},
            {"package": {"ecosystem": "Debian:12", "name": "pager"}},
        ],
        "references": [
            {"type": "REPORT", "url": "https://example.invalid/issues/1"},
            {"type": "FIX", "url": "https://example.invalid/commit/abc"},
            {"type": "FIX", "url": "https://example.invalid/commit/def"},
        ],
        "credits": [{"name": "someone"}],
    }
    adv = load_advisory(_write(tmp_path, doc))
    assert adv.cvss_vector is not None and adv.cvss_vector.startswith("CVSS:3.1/")
    assert adv.base_score == 7.8
    assert adv.level == "high"
    assert adv.ecosystems == ["Debian:12", "PyPI"]
    assert adv.upstream_fix == "https://example.invalid/commit/abc"
    assert adv.fix_references == [
        "https://example.invalid/commit/abc",
        "https://example.invalid/commit/def",
    ]


def test_level_falls_back_to_database_word_then_unknown(tmp_path: Path) -> None:
    adv = load_advisory(
        _write(tmp_path, {"id": "G-1", "database_specific": {"severity": "MODERATE"}})
    )
    assert (adv.base_score, adv.level) == (None, "medium")
    adv = load_advisory(_write(tmp_path, {"id": "G-2"}))
    assert (adv.level, adv.upstream_fix) == ("unknown", None)


def test_loader_errors_name_file_line_and_key(tmp_path: Path) -> None:
    path = tmp_path / "advisory.json"
    path.write_text('{\n  "id": "X",\n  "aliases": [,]\n}\n')
    with pytest.raises(InputError) as exc:
        load_advisory(path)
    assert exc.value.line == 3 and "invalid JSON" in exc.value.message

    with pytest.raises(InputError) as exc:
        load_advisory(_write(tmp_path, ["not", "an", "object"]))
    assert "JSON object" in exc.value.message

    with pytest.raises(InputError) as exc:
        load_advisory(_write(tmp_path, {"summary": "no id"}))
    assert exc.value.key == "id"

    bad_range = {"id": "X", "affected": [{"ranges": [{"type": "SVN", "events": [{}]}]}]}
    with pytest.raises(InputError) as exc:
        load_advisory(_write(tmp_path, bad_range))
    assert exc.value.key == "affected[0].ranges[0].type"

    with pytest.raises(InputError, match="not found"):
        load_advisory(tmp_path / "missing.json")
