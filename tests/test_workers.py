"""Parallel runs (pytest-xdist, tests/conftest.py "parallel runs"): which tests must share a
worker. Explicit fakes of pytest's collected items: the rule is pure logic."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from tests.conftest import group_for_workers, worker_group


def fixturedef(scope: str, baseid: str) -> Any:
    return SimpleNamespace(scope=scope, baseid=baseid)


def item(**defs: Any) -> Any:
    """A collected test that uses the fixtures `defs` (name -> fixturedef)."""
    info = SimpleNamespace(
        names_closure=sorted(defs), name2fixturedefs={k: (v,) for k, v in defs.items()}
    )
    marks: list[pytest.Mark] = []
    return SimpleNamespace(
        _fixtureinfo=info,
        marks=marks,
        add_marker=lambda m: marks.append(m.mark),
        get_closest_marker=lambda name: next((m for m in marks if m.name == name), None),
    )


MODULE = "tests/test_x.py"


def test_the_verified_fork_s_readers_share_one_worker() -> None:
    # through another fixture (test_verify's module-scoped `fork` reads verified_fork)
    reader = item(fork=fixturedef("module", MODULE), verified_fork=fixturedef("session", "tests"))
    assert worker_group(reader) == "verified-fork"


def test_a_module_s_shared_fixture_keeps_its_users_together() -> None:
    assert worker_group(item(built=fixturedef("module", MODULE))) == MODULE
    assert worker_group(item(c=fixturedef("class", f"{MODULE}::TestC"))) == f"{MODULE}::TestC"


def test_function_fixtures_and_pytest_s_own_leave_a_test_free() -> None:
    free = item(
        tmp_path=fixturedef("function", ""),
        tmp_path_factory=fixturedef("session", ""),  # pytest's own: nothing built to share
        project=fixturedef("function", MODULE),
    )
    assert worker_group(free) is None


def config(dist: str | None, loadgroup: bool | None) -> Any:
    """The controller's config (`--dist`), or a worker's (dist "no", the `loadgroup` flag)."""
    option = SimpleNamespace() if loadgroup is None else SimpleNamespace(loadgroup=loadgroup)
    return SimpleNamespace(option=option, getoption=lambda name, default=None: dist)


@pytest.mark.parametrize(
    ("dist", "loadgroup", "marked"),
    [
        ("loadgroup", None, True),  # the controller
        ("no", True, True),  # a worker of a --dist loadgroup run
        ("no", False, False),  # a worker of another --dist
        ("load", None, False),
        (None, None, False),  # no xdist
    ],
)
def test_items_are_marked_only_when_xdist_groups_them(
    dist: str | None, loadgroup: bool | None, marked: bool
) -> None:
    shared, free = item(built=fixturedef("module", MODULE)), item()
    group_for_workers(config(dist, loadgroup), [shared, free])
    got = shared.get_closest_marker("xdist_group")
    assert (got.args if got else None) == ((MODULE,) if marked else None)
    assert free.get_closest_marker("xdist_group") is None
