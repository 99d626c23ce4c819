"""The candidate loader's routing mode: what routing reads, and nothing it does not."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from engine.candidate import RoutingCandidate, load_candidate
from engine.errors import InputError
from engine.policy.routing import route_candidate

ADVISORY = (
    Path(__file__).parent / "fixtures/fork/trace/candidates/cparse-key-overflow/advisory.json"
)

EARLY = """\
id = "early"
package = "cparse"
patches = ["not-yet.patch"]
origin = "upstream"
scope = ["pkgs/cparse/**"]

[advisory]
osv = "advisory.json"
upstream_fix = "https://example.invalid/c/commit/1"
"""


@pytest.fixture
def early(tmp_path: Path) -> Path:
    shutil.copy(ADVISORY, tmp_path / "advisory.json")
    path = tmp_path / "candidate.toml"
    path.write_text(EARLY)
    return path


def test_the_strict_default_still_refuses_an_unfinished_candidate(early: Path) -> None:
    with pytest.raises(InputError) as exc:
        load_candidate(early)
    assert exc.value.key == "reproducer"  # required by the pipeline, absent here


def test_routing_mode_reads_advisory_package_and_origin_only(early: Path) -> None:
    cand = load_candidate(early, for_routing=True)
    assert isinstance(cand, RoutingCandidate)
    spec = cand.spec
    assert (spec.id, spec.package, spec.origin) == ("early", "cparse", "upstream")
    assert (spec.patches, spec.reproducer, spec.expect) == (["not-yet.patch"], None, None)
    decision = route_candidate(cand)
    assert decision.facts.upstream_fix is True and decision.facts.origin == "upstream"


@pytest.mark.parametrize(
    ("old", "new", "key"),
    [
        ('origin = "upstream"', 'origin = "upstream"\norign = "x"', "orign"),  # a typo
        ('package = "cparse"', 'package = "not a path"', "package"),
        ('package = "cparse"\n', "", "package"),
        ('osv = "advisory.json"', 'osv = "gone.json"', "advisory.osv"),
    ],
)
def test_routing_mode_still_checks_what_routing_reads(
    early: Path, old: str, new: str, key: str
) -> None:
    early.write_text(EARLY.replace(old, new))
    with pytest.raises(InputError) as exc:
        load_candidate(early, for_routing=True)
    assert exc.value.key == key
    assert exc.value.file == str(early)
