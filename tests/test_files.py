"""engine.files.write_atomic: the one way trace writes a result file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine.files import write_atomic


def test_writes_through_a_rename_and_leaves_no_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "deep" / "result.json"
    assert write_atomic(target, "{}\n") is True
    assert target.read_text() == "{}\n"
    assert sorted(p.name for p in target.parent.iterdir()) == ["result.json"]


def test_if_changed_leaves_an_identical_file_untouched(tmp_path: Path) -> None:
    target = tmp_path / "r.json"
    write_atomic(target, b"same")
    os.utime(target, (1_000_000, 1_000_000))
    assert write_atomic(target, b"same", if_changed=True) is False
    assert target.stat().st_mtime == 1_000_000
    assert write_atomic(target, b"other", if_changed=True) is True
    assert target.read_bytes() == b"other"


def test_permissions_follow_the_umask_unless_a_mode_is_given(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        write_atomic(tmp_path / "a", "x")
        write_atomic(tmp_path / "b", "x", mode=0o600, durable=True)
    finally:
        os.umask(old)
    assert (tmp_path / "a").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "b").stat().st_mode & 0o777 == 0o600


def test_a_failed_write_keeps_the_old_file_and_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "r.json"
    write_atomic(target, "old")

    def boom(src: object, dst: object) -> None:
        raise OSError("rename refused")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="rename refused"):
        write_atomic(target, "new")
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]
