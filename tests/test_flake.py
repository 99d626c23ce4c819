"""The flake, end to end: `nix flake show`, and `nix run .#verify` in a fixture nixpkgs fork.

No nixpkgs can be fetched here, so every nix call overrides trace's `nixpkgs` input with the test
stand-in in tests/fixtures/flake-standin (it wraps this test environment's Python). The flake is
consumed from a temp copy of the git-tracked files (a `path:` input of the checkout would copy
.venv into the store). One fixture fork per module; four `nix run` calls in all.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.flakekit import (
    FORK_FIXTURE,
    REPO,
    copy_flake_src,
    make_standin,
    ok,
    run,
    sandbox_paths,
)

CANDIDATES = ["cparse-key-overflow", "pager-last-page", "cparse-other-failure"]
SYSTEMS = ["x86_64-linux", "aarch64-linux"]

pytestmark = pytest.mark.nix

# The fork's policy override: sign when the expectation gate and the fork's own gate hold (the
# shipped policy also wants scope, mutation and coverage gates, which this fork does not run).
SIGNING_OVERRIDE = """\
catalogue = "reasons.toml"

[policy]
name = "fork-signing"
version = "0.1.0"
schema = "trace.signing/v1"
description = "Test fork: the expectation gate and the fork's same-files gate."

[signing]
routes = ["auto-merge-eligible", "human-review-required"]
min_runs = 3
require_determinism_check = true

[gates.expectation]
required = true

[gates.same-files]
required = true
"""

PURE_ONLY = """\
{ config ? "none given", overlays ? "none given", system ? "none given", ... }@args:
assert (config == { } && overlays == [ ] && system == "x86_64-linux")
  || throw "impure import of the package set: ${builtins.toJSON args}";
import ./package-set.nix { }
"""

SANDBOX = """
[nix]  # test fixture only: the fixture package set borrows the host's gcc and python3
extra_sandbox_paths = ["/usr", "/lib64", "/bin", "/lib"]
"""


@pytest.fixture(scope="module")
def flake_src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_flake_src(tmp_path_factory.mktemp("trace-src"))


@pytest.fixture(scope="module")
def standin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_standin(tmp_path_factory.mktemp("nixpkgs-standin"))


@pytest.fixture(scope="module")
def fork(flake_src: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A fixture nixpkgs fork: the fixture package set, flake.nix and trace/ from templates.fork,
    three candidates, a policy override with a signing key; committed."""
    from engine.signing.keys import keygen

    root = tmp_path_factory.mktemp("fork")
    for name in ("default.nix", "lib.nix", "pkgs"):
        src = FORK_FIXTURE / name
        if src.is_dir():
            shutil.copytree(src, root / name)
        else:
            shutil.copy2(src, root / name)
    for c in CANDIDATES:
        shutil.copytree(
            FORK_FIXTURE / "trace" / "candidates" / c, root / "trace" / "candidates" / c
        )
    # the package set refuses anything but a pure import (issue 13 item 11): user config and
    # overlays must not reach it, and the system is named
    os.rename(root / "default.nix", root / "package-set.nix")
    (root / "default.nix").write_text(PURE_ONLY)
    ok(["git", "init", "-q"], root)
    ok(["nix", "flake", "init", "-t", f"path:{flake_src}#fork"], root)
    flake = root / "flake.nix"
    text = flake.read_text()
    placeholder = 'inputs.trace.url = "github:OWNER/trace";'
    assert placeholder in text, "the template's trace URL is the one thing to set"
    flake.write_text(text.replace(placeholder, f'inputs.trace.url = "path:{flake_src}";'))
    with open(root / "trace" / "steps.toml", "a") as fh:
        fh.write(SANDBOX)
    policy = root / "trace" / "policy"
    (policy / "signing.toml").write_text(SIGNING_OVERRIDE)
    keys = tmp_path_factory.mktemp("keys")
    private, public, _ = keygen(keys / "fork.key")
    shutil.copy2(public, policy / "fork.pub")
    identity = {
        "schema": "trace.signing-identity/v1",
        "version": "0.1.0",
        "keyless": [],
        "keys": [{"name": "fork", "public_key": "fork.pub"}],
        "policy_versions": {},
    }
    (policy / "signing-identity.json").write_text(json.dumps(identity, indent=2))
    ok(["git", "add", "-A"], root)
    ok(["git", "commit", "-q", "-m", "fixture fork"], root)
    return {"root": root, "key": private}


def nix_run_verify(
    fork: dict[str, Path], standin: Path, *args: str
) -> tuple[int, dict[str, Any] | None, str]:
    proc = run(
        [
            "nix",
            "run",
            ".#verify",
            "--override-input",
            "trace/nixpkgs",
            f"path:{standin}",
            "--",
            "--key",
            str(fork["key"]),
            "--json",
            *args,
        ],
        fork["root"],
    )
    report = json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else None
    return proc.returncode, report, proc.stderr


def by_name(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {Path(c["file"]).parent.name: c for c in report["candidates"]}


@pytest.fixture(scope="module")
def first_run(fork: dict[str, Path], standin: Path) -> tuple[int, dict[str, Any], str]:
    rc, report, stderr = nix_run_verify(fork, standin)
    assert report is not None, f"no JSON report (exit {rc}):\n{stderr[-3000:]}"
    return rc, report, stderr


def test_flake_show_lists_every_output(flake_src: Path, standin: Path) -> None:
    override = ["--override-input", "nixpkgs", f"path:{standin}"]
    shown = json.loads(ok(["nix", "flake", "show", "--json", *override], flake_src))
    for system in SYSTEMS:
        assert shown["packages"][system]["default"]["type"] == "derivation"
        assert shown["packages"][system]["default"]["name"].startswith("trace-engine-")
        for app in ("default", "trace", "init", "verify"):
            assert shown["apps"][system][app]["type"] == "app", app
        assert shown["devShells"][system]["default"]["type"] == "derivation"
        assert set(shown["checks"][system]) == {"trace", "cli"}
    assert shown["templates"]["fork"]["type"] == "template"
    assert "lib" in shown
    for fn in ("mkVerifyApp", "addApps", "mkCliApp"):
        is_fn = ok(
            ["nix", "eval", "--json", f".#lib.{fn}", "--apply", "builtins.isFunction", *override],
            flake_src,
        )
        assert json.loads(is_fn) is True, fn


def test_the_default_app_is_the_cli_and_verify_the_fork_verifier(
    flake_src: Path, standin: Path
) -> None:
    """Issue 13 item 6: `nix run <trace> -- mutants …` ran the verify app; the CLI had no app."""
    override = ["--override-input", "nixpkgs", f"path:{standin}"]
    version = ok(["nix", "run", ".", *override, "--", "--version"], flake_src)
    assert version.startswith("trace ")
    schema = json.loads(
        ok(["nix", "run", ".#trace", *override, "--", "schema", "candidate"], flake_src)
    )
    assert "package" in schema["properties"]
    verify = ok(["nix", "run", ".#verify", *override, "--", "--help"], flake_src)
    assert "usage: trace fork" in verify, "apps.verify runs `trace fork`"
    init = ok(["nix", "run", ".#init", *override, "--", "--help"], flake_src)
    assert "usage: trace init" in init, "apps.init runs `trace init`"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ("{ }", "pass `system`"),
        ('{ system = "riscv64-linux"; }', "is not one trace supports"),
        ('{ system = "x86_64-linux"; extraArg = [ ]; }', "unknown argument(s) extraArg"),
        ('{ system = "x86_64-linux"; extraArgs = "--no-sign"; }', "must be a list of strings"),
        ('{ system = "x86_64-linux"; config = /srv/trace; }', "not a Nix path"),
    ],
)
def test_mk_verify_app_checks_its_arguments(
    flake_src: Path, standin: Path, args: str, message: str
) -> None:
    """Issue 13 item 9: `mkVerifyApp {}` failed with "value is null while a string was expected"."""
    proc = run(
        [
            "nix",
            "eval",
            "--raw",
            ".#lib.mkVerifyApp",
            "--apply",
            f"f: (f {args}).program",
            "--override-input",
            "nixpkgs",
            f"path:{standin}",
        ],
        flake_src,
    )
    assert proc.returncode != 0
    assert "trace.lib.mkVerifyApp: " in proc.stderr and message in proc.stderr, proc.stderr[-2000:]


def test_the_documented_no_sign_flag_reaches_trace_fork(flake_src: Path, standin: Path) -> None:
    """The extraArgs example is a flag `trace fork` has (item 9: it documented `--sign never`)."""
    from engine.cli import build_parser

    doc = (flake_src / "nix" / "verify-app.nix").read_text()
    assert 'extraArgs = [ "--no-sign" ]' in doc and "--sign never" not in doc
    script = ok(
        [
            "nix",
            "eval",
            "--raw",
            ".#lib.mkVerifyApp",
            "--apply",
            'f: builtins.readFile (f { system = "x86_64-linux"; '
            'extraArgs = [ "--no-sign" ]; }).program',
            "--override-input",
            "nixpkgs",
            f"path:{standin}",
        ],
        flake_src,
    )
    assert "'--no-sign'" in script
    assert build_parser().parse_args(["fork", "--no-sign"]).no_sign is True


def test_nix_flake_check_builds_the_package_and_runs_the_cli(
    flake_src: Path, standin: Path
) -> None:
    proc = run(
        [
            "nix",
            "flake",
            "check",
            "--override-input",
            "nixpkgs",
            f"path:{standin}",
            "--option",
            "extra-sandbox-paths",
            sandbox_paths(),
        ],
        flake_src,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = ok(
        [
            "nix",
            "eval",
            "--raw",
            ".#checks.x86_64-linux.cli.outPath",
            "--override-input",
            "nixpkgs",
            f"path:{standin}",
        ],
        flake_src,
    )
    schema = json.loads(Path(out.strip()).read_text())  # built by the check above
    assert "rationale" in schema["properties"]


def test_flake_lock_pins_the_nixpkgs_revision() -> None:
    lock = json.loads((REPO / "flake.lock").read_text())
    assert lock["version"] == 7
    node = lock["nodes"][lock["nodes"][lock["root"]]["inputs"]["nixpkgs"]]
    assert node["locked"] == {
        "lastModified": 1778430510,
        "narHash": "sha256-Ti+ZBvW6yrWWAg2szExVTwCd4qOJ3KlVr1tFHfyfi8Q=",
        "owner": "NixOS",
        "repo": "nixpkgs",
        "rev": "8fd9daa3db09ced9700431c5b7ad0e8ba199b575",
        "type": "github",
    }


def test_nix_run_verify_gives_the_expected_verdicts(
    first_run: tuple[int, dict[str, Any], str], fork: dict[str, Path]
) -> None:
    rc, report, _ = first_run
    assert rc == 1, "one candidate is denied, so the app must exit non-zero"
    assert report["dirty"] is False
    head = ok(["git", "rev-parse", "HEAD"], fork["root"]).strip()
    assert report["commit"] == head
    rows = by_name(report)
    assert set(rows) == set(CANDIDATES)
    for name in ("cparse-key-overflow", "pager-last-page"):
        assert rows[name]["verified"] is True
        assert rows[name]["decision"] == "allow", rows[name]
        assert rows[name]["signed"] == "key"
    bad = rows["cparse-other-failure"]
    assert bad["verified"] is False
    assert "pre-fix-wrong-failure" in bad["verify_reasons"]
    assert bad["decision"] == "deny"
    assert bad["signed"] == "no"
    for row in rows.values():
        assert "same-files" in row["steps"], "the fork's own step runs for every candidate"
        assert Path(row["bundle"]).parent == fork["root"] / ".trace" / "bundles"


def test_bundles_carry_the_fork_step_and_pin_the_package_data(
    first_run: tuple[int, dict[str, Any], str],
) -> None:
    _, report, _ = first_run
    row = by_name(report)["pager-last-page"]
    payload = Path(row["bundle"]) / "payload"
    gate = json.loads((payload / "outcomes" / "same-files.json").read_text())
    assert gate["schema"] == "trace.gate/v1"
    assert gate["gate"] == "same-files"
    assert gate["passed"] is True
    assert gate["details"]["files"] > 0
    signing = json.loads((payload / "decisions" / "signing.json").read_text())
    assert signing["policy"]["name"] == "fork-signing", "the fork's policy override decided"
    replay = json.loads((payload / "replay.json").read_text())
    assert replay["package_set"]["dirty"] is False
    # the package set came from the flake's own source store path (issue 13 items 11, 12)
    source = replay["source"]
    assert source["store_path"].startswith("/nix/store/")
    assert source["store_path"].endswith("-fork-source")
    assert source["system"] == "x86_64-linux"
    assert source["nar_hash"].startswith("sha256-")
    assert not (Path(source["store_path"]) / "trace").exists(), "candidates are not in it"
    assert (Path(source["store_path"]) / "pkgs" / "cparse").is_dir()
    assert replay["package_set"]["commit"] == report["commit"]
    # issue 14: the app passes its Nix's version (no `nix --version` of trace's own), in the
    # words `nix --version` uses, and the system it imported the package set for
    version = subprocess.run(["nix", "--version"], capture_output=True, text=True, check=True)
    assert replay["nix_version"] == version.stdout.strip()
    assert replay["system"] == source["system"]
    # the standard pipeline came from the package's data dir in the store, not from a checkout
    # (pinned by its store path today, or by its `trace:` reference)
    pins = [f["path"] for f in replay["graph_files"]]
    assert any("-trace-engine-" in p or p == "trace:graphs/verify.toml" for p in pins), pins


def test_trace_verify_bundle_accepts_signed_bundles_and_rejects_the_unsigned(
    first_run: tuple[int, dict[str, Any], str], fork: dict[str, Path]
) -> None:
    from engine.cli import main

    _, report, _ = first_run
    identity = fork["root"] / ".trace" / "policy" / "signing-identity.json"
    rows = by_name(report)
    for name in ("cparse-key-overflow", "pager-last-page"):
        assert main(["verify-bundle", rows[name]["bundle"], "--identity", str(identity)]) == 0
    unsigned = rows["cparse-other-failure"]["bundle"]
    assert main(["verify-bundle", unsigned, "--identity", str(identity)]) == 1


def test_second_run_rebuilds_nothing(
    first_run: tuple[int, dict[str, Any], str], fork: dict[str, Path], standin: Path
) -> None:
    """Also issue 13 item 12: a git-ignored `result` link and scratch file at the fork root made
    every step re-evaluate (the package set's digest covered the whole work tree)."""
    first = by_name(first_run[1])
    root = fork["root"]
    (root / ".git" / "info" / "exclude").write_text("result\nscratch.txt\n")
    (root / "result").symlink_to(first_run[1]["candidates"][0]["bundle"])
    (root / "scratch.txt").write_text("notes\n")
    rc, report, stderr = nix_run_verify(fork, standin)
    assert report is not None, stderr[-3000:]
    assert rc == 1
    for name, row in by_name(report).items():
        assert row["built"] == 0 and row["reused"] == 0, (name, row)
        assert row["cached"] == len(row["steps"])
        assert row["decision"] == first[name]["decision"]
        assert row["signed"] == first[name]["signed"]


def test_a_changed_candidate_rebuilds_only_its_own_steps(
    first_run: tuple[int, dict[str, Any], str], fork: dict[str, Path], standin: Path
) -> None:
    # change the pager candidate's patch (a note above the diff), commit, run the app again
    patch = fork["root"] / "trace" / "candidates" / "pager-last-page" / "fix.patch"
    patch.write_text("Backported for the fork.\n\n" + patch.read_text())
    ok(["git", "commit", "-q", "-am", "pager: note on the patch"], fork["root"])
    _, report, stderr = nix_run_verify(fork, standin)
    assert report is not None, stderr[-3000:]
    rows = by_name(report)
    pager = rows["pager-last-page"]
    assert pager["decision"] == "allow"
    result = json.loads(
        (fork["root"] / ".trace" / "verify" / f"{pager['candidate']}.json").read_text()
    )
    assert result["steps"]["post-fix"]["status"] in ("built", "reused")
    assert result["steps"]["pre-fix"]["status"] == "cached", "the pre-fix side stays cached"
    for name in ("cparse-key-overflow", "cparse-other-failure"):
        assert rows[name]["built"] + rows[name]["reused"] == 0, rows[name]


def test_a_dirty_tree_is_refused(
    first_run: tuple[int, dict[str, Any], str], fork: dict[str, Path], standin: Path
) -> None:
    target = fork["root"] / "pkgs" / "cparse" / "default.nix"
    original = target.read_text()
    target.write_text(original + "# local edit\n")
    try:
        rc, report, stderr = nix_run_verify(fork, standin)
    finally:
        target.write_text(original)
    assert rc == 2
    assert report is None
    assert "uncommitted changes" in stderr
    assert "pkgs/cparse/default.nix" in stderr
    assert "--allow-dirty" in stderr


def test_the_standin_refuses_a_dependency_major_nixos_does_not_ship(
    flake_src: Path, tmp_path: Path
) -> None:
    """The stand-in pins nixos-25.11's majors (sigstore 4): a host with sigstore 3 fails here,
    as it would fail against the real nixpkgs in a user's fork."""
    standin = make_standin(tmp_path / "standin-old")
    host = json.loads((standin / "host.json").read_text())
    assert host["versions"]["sigstore"].split(".")[0] == "4", "this environment matches nixos"
    host["versions"]["sigstore"] = "3.6.1"
    (standin / "host.json").write_text(json.dumps(host))
    proc = run(
        [
            "nix",
            "eval",
            "--raw",
            ".#packages.x86_64-linux.trace.drvPath",
            "--override-input",
            "nixpkgs",
            f"path:{standin}",
        ],
        flake_src,
    )
    assert proc.returncode != 0
    assert "the host has sigstore 3.6.1, nixos-25.11 ships 4.x" in proc.stderr, proc.stderr[-2000:]
