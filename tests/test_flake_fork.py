"""`trace fork` without nix: fork discovery, the clean-tree check, candidates, the generated entry
pipeline and the merged policy directory (real git repositories in temp dirs)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
from pathlib import Path

import pytest
import tomli

from engine.cli import main
from engine.errors import InputError, UsageError
from engine.fork import (
    check_clean,
    discover,
    make_config,
    merged_policy,
    pipeline_entry,
)
from engine.paths import data_dir

GIT_ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.invalid",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.invalid",
}


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, env=GIT_ENV)


def args_for(root: Path, **over: object) -> argparse.Namespace:
    base: dict[str, object] = {
        "fork": root,
        "config": "trace",
        "candidates": None,
        "steps": None,
        "policy": None,
        "package_set": ".",
        "state_dir": None,
        "out": None,
    }
    base.update(over)
    return argparse.Namespace(**base)


@pytest.fixture
def fork(tmp_path: Path) -> Path:
    root = tmp_path / "fork"
    for name in ("a", "b"):
        d = root / "trace" / "candidates" / name
        d.mkdir(parents=True)
        (d / "candidate.toml").write_text(f'id = "{name}"\n')
    (root / "trace" / "candidates" / "README.md").write_text("not a candidate\n")
    (root / "trace" / "candidates" / "c.toml").write_text('id = "c"\n')
    (root / "default.nix").write_text("{ ... }: { }\n")
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "init")
    return root


def test_config_finds_the_work_tree_root_from_a_subdirectory(fork: Path) -> None:
    cfg = make_config(args_for(fork / "trace" / "candidates"))
    assert cfg.root == fork.resolve()
    assert cfg.candidates == fork.resolve() / "trace" / "candidates"
    assert cfg.steps is None and cfg.policy is None
    assert cfg.state == fork.resolve() / ".trace"
    assert cfg.bundles == cfg.state / "bundles"


def test_outside_git_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="not inside a git work tree") as info:
        make_config(args_for(tmp_path))
    assert "nix run .#verify" in (info.value.hint or "")


def test_paths_may_not_leave_the_fork(fork: Path) -> None:
    with pytest.raises(UsageError, match="outside the fork"):
        make_config(args_for(fork, package_set="../elsewhere"))


def test_clean_tree_passes_and_trace_output_does_not_count(fork: Path) -> None:
    cfg = make_config(args_for(fork))
    (cfg.state / "verify").mkdir(parents=True)
    (cfg.state / "verify" / "a.json").write_text("{}")
    assert check_clean(cfg, allow_dirty=False) is False


@pytest.mark.parametrize("change", ["modified", "untracked", "staged"])
def test_dirty_tree_is_refused_unless_allowed(fork: Path, change: str) -> None:
    if change == "modified":
        (fork / "default.nix").write_text("{ ... }: { x = 1; }\n")
        path = "default.nix"
    elif change == "untracked":
        (fork / "pkgs").mkdir()
        (fork / "pkgs" / "new.nix").write_text("{ }\n")
        path = "pkgs/new.nix"
    else:
        (fork / "staged.nix").write_text("{ }\n")
        git(fork, "add", "staged.nix")
        path = "staged.nix"
    cfg = make_config(args_for(fork))
    with pytest.raises(InputError, match="uncommitted changes") as info:
        check_clean(cfg, allow_dirty=False)
    assert path in info.value.message
    assert "--allow-dirty" in (info.value.hint or "")
    assert check_clean(cfg, allow_dirty=True) is True


def test_cli_refuses_a_dirty_tree_with_exit_2(
    fork: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (fork / "default.nix").write_text("{ ... }: { y = 2; }\n")
    assert main(["fork", "--fork", str(fork)]) == 2
    err = capsys.readouterr().err
    assert "uncommitted changes" in err and "default.nix" in err


def test_candidates_all_or_named(fork: Path) -> None:
    cfg = make_config(args_for(fork))
    every = discover(cfg, [])
    assert [p.relative_to(cfg.candidates).as_posix() for p in every] == [
        "a/candidate.toml",
        "b/candidate.toml",
        "c.toml",
    ]
    assert discover(cfg, ["b"]) == [cfg.candidates / "b" / "candidate.toml"]
    with pytest.raises(UsageError, match="unknown candidate 'zz'") as info:
        discover(cfg, ["zz"])
    assert "a, b, c" in (info.value.hint or "")


def test_missing_candidates_folder_says_how_to_start(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q")
    with pytest.raises(UsageError, match="no candidates folder") as info:
        make_config(args_for(tmp_path))
    assert "#init" in (info.value.hint or "")


def test_entry_includes_the_standard_pipeline_and_the_fork_steps(fork: Path) -> None:
    steps = fork / "trace" / "steps.toml"
    steps.write_text('version = 1\n[nix]\npackage_set_exclude = ["docs"]\n')
    cfg = make_config(args_for(fork))
    entry = pipeline_entry(cfg, "a")
    assert entry == cfg.state / "fork" / "a" / "pipeline.toml"
    data = tomli.loads(entry.read_text())
    assert data["include"] == ["trace:graphs/verify.toml", str(steps.resolve())]
    assert data["nix"]["package_set_exclude"] == ["docs", "trace"]
    mtime = entry.stat().st_mtime_ns
    assert pipeline_entry(cfg, "a") == entry
    assert entry.stat().st_mtime_ns == mtime, "an unchanged entry is not rewritten"


def test_fork_trace_toml_replaces_the_standard_pipeline(fork: Path) -> None:
    (fork / "trace.toml").write_text('version = 1\ninclude = ["trace:graphs/verify.toml"]\n')
    cfg = make_config(args_for(fork))
    data = tomli.loads(pipeline_entry(cfg, "b").read_text())
    assert data["include"] == [str((fork / "trace.toml").resolve())]


def test_merged_policy_overlays_the_fork_files_on_the_shipped_ones(fork: Path) -> None:
    own = fork / "trace" / "policy"
    own.mkdir()
    (own / "signing.toml").write_text("# the fork's own\n")
    (own / "fork.pub").write_text("key\n")
    cfg = make_config(args_for(fork))
    merged = merged_policy(cfg)
    shipped = data_dir() / "policy"
    assert (merged / "signing.toml").read_text() == "# the fork's own\n"
    assert (merged / "fork.pub").read_text() == "key\n"
    assert (merged / "routing.toml").read_bytes() == (shipped / "routing.toml").read_bytes()
    (own / "fork.pub").unlink()
    merged_policy(cfg)
    assert not (merged / "fork.pub").exists(), "a file the fork removed leaves the merged set"


def test_state_and_bundle_dirs_inside_the_fork_are_left_out_of_the_package_set(fork: Path) -> None:
    """--state-dir/--out inside the fork change on every run: hashing them would make every
    run rebuild (an audit found the no-op broken that way)."""
    cfg = make_config(args_for(fork, state_dir=fork / "out" / "state", out=fork / "bundles"))
    data = tomli.loads(pipeline_entry(cfg, "a").read_text())
    assert data["nix"]["package_set_exclude"] == ["trace", "out/state", "bundles"]


def test_hints_print_the_command_that_works_in_the_fork(
    fork: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 13 item 6: a fork's hints said `trace schema candidate`, a command it does not have.
    The fork's apps set TRACE_CLI (lib.addApps) to the form that works there."""
    from engine.candidate import load_candidate

    bad = fork / "trace" / "candidates" / "a" / "candidate.toml"
    bad.write_text('id = "a"\npackage = "p"\nnot_a_key = 1\n')
    with pytest.raises(InputError) as plain:
        load_candidate(bad)
    assert "`trace schema candidate`" in (plain.value.hint or "")
    monkeypatch.setenv("TRACE_CLI", "nix run .#trace --")
    with pytest.raises(InputError) as in_fork:
        load_candidate(bad)
    assert "`nix run .#trace -- schema candidate`" in (in_fork.value.hint or "")


def fixture_fork(root: Path, candidates: dict[str, dict[str, str]]) -> Path:
    """The fixture fork's package set with copies of fixture candidates (name -> {file: text}
    replacing files in the copy), committed."""
    import shutil

    fixture = Path(__file__).parent / "fixtures" / "fork"
    root.mkdir()
    for name in ("default.nix", "lib.nix", "pkgs", "trace.toml"):
        src = fixture / name
        (shutil.copytree if src.is_dir() else shutil.copy2)(src, root / name)
    for name, files in candidates.items():
        base = files.get("from", name)
        dest = root / "trace" / "candidates" / name
        shutil.copytree(fixture / "trace" / "candidates" / base, dest)
        for rel, text in files.items():
            if rel != "from":
                (dest / rel).write_text(text)
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "fork")
    return root


@pytest.mark.nix
def test_a_missing_package_attribute_blames_the_candidate_file_and_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 13 item 8: `package = "strjoinn"` blamed the shipped verify.toml:57 and its
    template; the candidate's `package` key is what to fix."""
    fixture = Path(__file__).parent / "fixtures" / "fork" / "trace" / "candidates"
    text = (fixture / "pager-last-page" / "candidate.toml").read_text()
    assert 'package = "pager"' in text
    bad = text.replace('package = "pager"', 'package = "pagerr"')
    root = fixture_fork(tmp_path / "fork", {"pager-last-page": {"candidate.toml": bad}})
    cand = root / "trace" / "candidates" / "pager-last-page"
    rc = main(["fork", "--fork", str(root), "--no-sign", "--json", "-q"])
    err = capsys.readouterr().err
    assert rc == 2
    line = text.splitlines().index('package = "pager"') + 1
    assert f"{cand / 'candidate.toml'}:{line}" in err, err
    assert "key 'package'" in err
    assert "no attribute 'pagerr'" in err
    assert "verify.toml" not in err and ".nix.j2" not in err, err


@pytest.mark.nix
def test_a_patch_that_does_not_apply_names_its_hunk_and_log_and_skips_the_dependants(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 13 item 10: "Hunk 1 FAILED" was only in the result JSON, the table said
    `post-fix-build-broken` with no pointer to the log, and all 7 mutants were still built."""
    fixture = Path(__file__).parent / "fixtures" / "fork" / "trace" / "candidates"
    patch = (fixture / "pager-last-page" / "fix.patch").read_text()
    old = "-    return total // size\n"
    assert old in patch
    broken = patch.replace(old, "-    return total // size  # not what the file says\n")
    root = fixture_fork(tmp_path / "fork", {"pager-last-page": {"fix.patch": broken}})
    rc = main(["fork", "--fork", str(root), "--no-sign", "--json", "-q"])
    out = capsys.readouterr().out
    assert rc == 1
    report = json.loads(out)
    (row,) = report["candidates"]
    assert "post-fix-build-broken" in row["verify_reasons"]
    detail = next(d for d in row["verify_details"] if d.startswith("post-fix-build-broken"))
    assert "fix.patch does not apply: hunk #1 of pager/__init__.py failed" in detail, detail
    assert "(@@ -5,7 +5,7 @@)" in detail
    assert "full log: nix log /nix/store/" in detail and detail.endswith(".drv")
    result = json.loads((root / ".trace" / "verify" / f"{row['candidate']}.json").read_text())
    steps = result["steps"]
    dependants = [s for s in steps if s.split("@")[0] in ("mutant-runs", "coverage-run")]
    assert dependants, sorted(steps)
    for sid in dependants + [s for s in steps if s.startswith("post-fix-run")]:
        assert steps[sid]["status"] == "skipped", (sid, steps[sid])


FORK_REASONS = """\
[policy]
name = "fork-reasons"
version = "0.1.0"
schema = "trace.reasons/v1"
description = "This fork's own reason codes."

[[reasons]]
code = "fork-abi-changed"
message = "The fix changes the library's ABI."
solution = "Keep the ABI, or bump the soname."
effective_on = 2026-01-01
"""


def test_fork_reason_codes_extend_the_shipped_catalogue(fork: Path) -> None:
    """Issue 13 item 7: a fork gate's own code was `evidence-unknown-reason` until the fork
    copied the whole shipped reasons.toml."""
    from engine.policy.reasons import load_catalogue

    own = fork / "trace" / "policy"
    own.mkdir()
    (own / "reasons.toml").write_text(FORK_REASONS)
    merged = merged_policy(make_config(args_for(fork)))
    catalogue = load_catalogue(merged / "reasons.toml")
    shipped = load_catalogue(data_dir() / "policy" / "reasons.toml")
    assert "fork-abi-changed" in catalogue
    assert set(shipped.reasons) < set(catalogue.reasons), "every shipped code stays"
    assert catalogue.ref.name == "fork-reasons", "the fork's [policy] names the merged catalogue"
    # a full copy with one more code (what forks did before) is used as it is
    full = (data_dir() / "policy" / "reasons.toml").read_text()
    (own / "reasons.toml").write_text(full + FORK_REASONS.split("\n\n", 1)[1])
    merged_policy(make_config(args_for(fork)))
    assert (merged / "reasons.toml").read_text() == (own / "reasons.toml").read_text()


def test_a_fork_may_not_redefine_a_shipped_reason_code(fork: Path) -> None:
    own = fork / "trace" / "policy"
    own.mkdir()
    (own / "reasons.toml").write_text(
        FORK_REASONS.replace('code = "fork-abi-changed"', 'code = "pre-fix-did-not-fail"')
    )
    with pytest.raises(InputError, match="redefines shipped code") as info:
        merged_policy(make_config(args_for(fork)))
    assert info.value.file == str(own / "reasons.toml")
    assert "pre-fix-did-not-fail" in info.value.message


def test_rationale_is_documented_and_refused_as_a_file_path(
    fork: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 13 item 13: the schema said only "string"; a sentence failed with "does not exist"."""
    import shutil

    from engine.candidate import load_candidate

    assert main(["schema", "candidate"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert (
        "a FILE, path relative to the candidate file"
        in schema["properties"]["rationale"]["description"]
    )
    src = Path(__file__).parent / "fixtures" / "fork" / "trace" / "candidates" / "pager-last-page"
    dest = fork / "trace" / "candidates" / "p"
    shutil.copytree(src, dest)
    text = (dest / "candidate.toml").read_text()
    (dest / "candidate.toml").write_text(
        text.replace(
            'origin = "human"', 'origin = "human"\nrationale = "Rounds the page count up."'
        )
    )
    with pytest.raises(InputError) as info:
        load_candidate(dest / "candidate.toml")
    assert info.value.key == "rationale"
    assert "is a file path" in (info.value.hint or "")


@pytest.mark.nix
def test_a_structured_attrs_package_works_in_every_gate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 13 item 11: the mutant/coverage wrapper read $out from the environment, which a
    package with `__structuredAttrs = true` does not have. pkgs.cparse-structured is cparse
    with structured attributes; its real fix must verify and pass every gate, as cparse's does."""
    fixture = Path(__file__).parent / "fixtures" / "fork" / "trace" / "candidates"
    text = (fixture / "cparse-key-overflow" / "candidate.toml").read_text()
    assert 'package = "cparse"' in text
    cand = text.replace('package = "cparse"', 'package = "cparse-structured"')
    root = fixture_fork(
        tmp_path / "fork",
        {"cparse-structured": {"from": "cparse-key-overflow", "candidate.toml": cand}},
    )
    rc = main(["fork", "--fork", str(root), "--no-sign", "--json", "-q"])
    report = json.loads(capsys.readouterr().out)
    (row,) = report["candidates"]
    assert row["verified"] is True, row
    outcomes = Path(row["bundle"]) / "payload" / "outcomes"
    gates = {}
    for f in outcomes.glob("*.json"):
        record = json.loads(f.read_text())
        if record.get("schema") == "trace.gate/v1":
            gates[record["gate"]] = record
    assert {"scope", "mutation", "coverage"} <= set(gates), sorted(gates)
    for name, record in gates.items():
        assert record["passed"] is True, (name, record.get("reasons"), record.get("details"))
    mutants = [s for s in row["steps"] if s == "mutant-runs"]
    assert mutants, "the mutants were built from the structured package"
    assert rc == 0, row


@pytest.mark.nix
def test_a_real_cve_in_a_real_library_verified_end_to_end(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 13 item 13: cJSON 1.7.15 from Debian's source package (tarball digest pinned), its
    Makefile build (cc and ar run by make, AddressSanitizer through NIX_CFLAGS_COMPILE), and the
    real upstream fix for CVE-2023-53154, which applies only with an offset (GNU patch)."""
    name = "cjson-cve-2023-53154"
    root = fixture_fork(tmp_path / "fork", {name: {}})
    rc = main(["fork", "--fork", str(root), "--no-sign", "--json", "-q"])
    report = json.loads(capsys.readouterr().out)
    (row,) = report["candidates"]
    assert row["verified"] is True, row
    result = json.loads((root / ".trace" / "verify" / f"{row['candidate']}.json").read_text())
    claims = {c["claim"]: c for c in result["claims"]}
    assert claims["pre-fix-fails-as-expected"]["holds"] is True
    assert claims["post-fix-survives"]["holds"] is True
    pre = result["pre"]["runs"][0]
    assert pre["sanitizer"]["kind"] == "heap-buffer-overflow"
    outcomes = Path(row["bundle"]) / "payload" / "outcomes"
    gates = {}
    for f in outcomes.glob("*.json"):
        record = json.loads(f.read_text())
        if record.get("schema") == "trace.gate/v1":
            gates[record["gate"]] = record
    assert {"scope", "mutation", "coverage"} <= set(gates), sorted(gates)
    # the coverage flags reached the compilers make ran: the gate measured lines (before the
    # stdenv's cc wrapper it said coverage-not-measurable for this package)
    coverage = gates["coverage"]
    assert coverage["measurable"] is True, coverage
    assert "coverage-not-measurable" not in coverage["reasons"], coverage
    assert coverage["details"]["executable_changed_lines"] > 0
    assert coverage["details"]["covered_lines"] > 0
    assert rc in (0, 1)
