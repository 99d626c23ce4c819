"""`trace fork --shard I/N` and `--merge DIR…` (issue 17): real builds on a git copy of the fixture
fork. The shards run with state dirs of their own (as separate CI machines would); merged, their
rows, findings page and bundles equal those of one unsharded run. Then every way shards of
different runs, a missing or doubled shard, or a doctored shard directory must be refused."""

from __future__ import annotations

import contextlib
import io
import json
import random
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from engine.cli import main
from engine.errors import InputError, UsageError
from engine.fork.merge import merge
from engine.fork.shard import MANIFEST, parse_spec, select, shard_of
from engine.signing.keys import keygen
from engine.verify.cached import evidence_view
from engine.verify_result import VerifyResult
from tests.test_flake_fork import git

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "fork"
# by the rule: N=2 -> {pager, other-failure} and {textcols}; N=3 -> {other-failure},
# {pager, textcols} and an empty shard 3 (asserted below, so a changed rule shows here)
NAMES = ["pager-last-page", "cparse-other-failure", "textcols-zero-width"]
EXPECTED = {2: [1, 1, 2], 3: [2, 1, 2]}
RUN_STATS = ("bundle", "built", "reused", "cached")  # where and how, not what


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(argv))
    return rc, out.getvalue(), err.getvalue()


@dataclass
class Runs:
    root: Path
    key: Path
    whole: dict[str, Any]  # the unsharded run's --json report
    whole_report: Path
    whole_state: Path
    whole_rc: int
    shards: dict[int, list[Path]]  # N -> shard dirs 1..N
    other_commit: Path  # shard 2/2 of a later commit


def fork_run(r: Path, key: Path, state: str, *extra: str) -> tuple[int, str, str]:
    return run(
        "fork", "--fork", str(r), *NAMES, "-q", "--key", str(key), "--state-dir",
        str(r / ".trace" / state), *extra,
    )  # fmt: skip


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    tmp = tmp_path_factory.mktemp("shard")
    root = tmp / "fork"
    shutil.copytree(FIXTURE, root, ignore=shutil.ignore_patterns(".trace", "result*"))
    (root / ".gitignore").write_text("/.trace/\n")  # as `trace init` adds it
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "fixture")
    key, _, _ = keygen(tmp / "keys" / "signer.key")
    rc, out, err = fork_run(root, key, "whole", "--json", "--report", str(tmp / "whole-report"))
    assert rc == 1, err  # the other-failure candidate is denied
    shards: dict[int, list[Path]] = {}
    for n in (2, 3):
        shards[n] = []
        for i in range(1, n + 1):
            dest = tmp / f"n{n}" / f"shard-{i}"
            s_rc, s_out, s_err = fork_run(
                root, key, f"s{i}of{n}", "--shard", f"{i}/{n}", "--shard-dir", str(dest)
            )
            assert s_rc in (0, 1), s_err
            assert f"shard {i}/{n}: {dest}" in s_out
            shards[n].append(dest)
    # a later commit that leaves the package set as it is (only the trace folder changes)
    (root / "trace" / "NOTE").write_text("a later commit\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "note")
    other = tmp / "later" / "shard-2"
    o_rc, _, o_err = fork_run(root, key, "later", "--shard", "2/2", "--shard-dir", str(other))
    assert o_rc == 0, o_err
    l_rc, _, l_err = fork_run(
        root, key, "later1", "--shard", "1/2", "--shard-dir", str(tmp / "later" / "shard-1")
    )
    assert l_rc == 1, l_err
    return Runs(root, key, json.loads(out), tmp / "whole-report", root / ".trace" / "whole",
                rc, shards, other)  # fmt: skip


def rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k not in RUN_STATS} for r in report["candidates"]]


def payload(bundle: Path, state: Path) -> dict[str, Any]:
    """A bundle's payload files, with the run's own state dir written as STATE; replay.json
    (times) left out, signing.json's digest of verify-result.json (which names that dir) too, and
    verify-result.json as its evidence view (without step statuses)."""
    files: dict[str, Any] = {}
    for f in sorted((bundle / "payload").rglob("*")):
        rel = f.relative_to(bundle).as_posix()
        if not f.is_file() or rel == "payload/replay.json":
            continue
        text = f.read_text(encoding="utf-8").replace(str(state), "STATE")
        # payload paths are relative to the fork now (engine/evidence/portable.py): the state dir
        # inside it is named `.trace/<its name>`
        text = text.replace(f'"{state.parent.name}/{state.name}/', '"STATE/')
        if rel == "payload/verify-result.json":
            # a step's status (built here, or reused: another state dir built it first) is the
            # run's history, not evidence: compare what the verdict rests on
            text = json.dumps(evidence_view(VerifyResult.model_validate_json(text)), sort_keys=True)
        if rel == "payload/decisions/signing.json":
            doc = json.loads(text)
            doc["evidence"] = [
                e for e in doc["evidence"] if e["path"] != "payload/verify-result.json"
            ]
            text = json.dumps(doc, sort_keys=True)
        files[rel] = text
    return files


def merged(runs: Runs, tmp: Path, dirs: list[Path]) -> tuple[int, dict[str, Any], Path]:
    out = tmp / "merged-report"
    rc, text, err = run(
        "fork", "--merge", *map(str, dirs), "--json", "--report", str(out), "--key", str(runs.key)
    )
    assert f"findings: {out / 'index.html'}" in err
    return rc, json.loads(text), out


def test_the_rule_places_the_test_candidates_as_the_test_expects() -> None:
    for n, shard in EXPECTED.items():
        assert [shard_of(name, n) for name in NAMES] == shard


@pytest.mark.nix
@pytest.mark.parametrize("n", [2, 3])
def test_merged_shards_equal_the_unsharded_run(runs: Runs, n: int, tmp_path: Path) -> None:
    dirs = runs.shards[n]
    sizes = [len(json.loads((d / "report.json").read_text())["candidates"]) for d in dirs]
    assert sizes == [EXPECTED[n].count(i) for i in range(1, n + 1)]  # N=3: shard 3 is empty
    rc, report, page = merged(runs, tmp_path, list(reversed(dirs)))  # any order
    assert rc == runs.whole_rc == 1
    assert rows(report) == rows(runs.whole)
    assert [r["candidate"] for r in report["candidates"]] == [
        r["candidate"] for r in runs.whole["candidates"]
    ]
    assert (report["commit"], report["dirty"]) == (runs.whole["commit"], runs.whole["dirty"])
    # the findings page: the same rows, verdicts and signers, byte for byte
    assert (page / "index.html").read_bytes() == (runs.whole_report / "index.html").read_bytes()
    for mine, theirs in zip(report["candidates"], runs.whole["candidates"], strict=True):
        if theirs["bundle"] is None:
            assert mine["bundle"] is None
            continue
        b = Path(mine["bundle"])
        assert b.is_relative_to(dirs[0].parent) and b.is_dir()
        state = b.parent.parent  # the shard dir: its bundle names its own state dir
        manifest = json.loads((state / MANIFEST).read_text())
        shard_state = runs.root / ".trace" / f"s{manifest['shard']}of{n}"
        assert payload(b, shard_state) == payload(Path(theirs["bundle"]), runs.whole_state)
    allowed = [r for r in report["candidates"] if r["decision"] == "allow"]
    assert allowed and all(r["signed"] == "key" for r in allowed)


@pytest.mark.nix
def test_the_merged_table(runs: Runs) -> None:
    rc, out, _ = run("fork", "--merge", *map(str, runs.shards[2]))
    assert rc == 1
    assert "2 shard(s)" in out and "2 of 3 candidates allowed" in out


def doctored(src: Path, tmp: Path, name: str) -> Path:
    dest = tmp / name
    shutil.copytree(src, dest, symlinks=True)
    return dest


def edit_json(path: Path, change: Any) -> None:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


def refused(dirs: list[Path], *words: str) -> str:
    with pytest.raises(InputError) as exc:
        merge(dirs)
    text = exc.value.render()
    for w in words:
        assert w in text, text
    return text


@pytest.mark.nix
def test_shards_of_another_commit_are_refused(runs: Runs) -> None:
    one, _ = runs.shards[2]
    refused([one, runs.other_commit], "fork commit", str(runs.other_commit))


@pytest.mark.nix
def test_a_merge_at_the_fork_checks_its_commit_and_policy(runs: Runs, tmp_path: Path) -> None:
    later = [runs.other_commit.parent / "shard-1", runs.other_commit]
    page = tmp_path / "page"
    argv = ["fork", "--merge", *map(str, later), "--fork", str(runs.root), "--key", str(runs.key)]
    rc, out, err = run(*argv, "--report", str(page))
    assert rc == 1 and "not at a fork" not in err, err
    # the pager bundle, key-signed, verifies against the fork's own signing identity
    assert 'data-verified="true"' in (page / "TRACE-2026-0002-pager.html").read_text()
    assert "2 of 3 candidates allowed" in out
    # shards of the fork's previous commit
    rc, _, err = run("fork", "--merge", *map(str, runs.shards[2]), "--fork", str(runs.root))
    assert rc == 2 and "the shards verified commit" in err, err
    # the fork's policy now differs from the one the shards ran under
    own = runs.root / "trace" / "policy" / "routing.toml"
    shipped = Path(__file__).resolve().parent.parent / "policy" / "routing.toml"
    own.parent.mkdir()
    try:
        own.write_text(shipped.read_text() + "\n# stricter, later\n")
        rc, _, err = run(*argv)
        assert rc == 2 and "another policy" in err, err
    finally:
        shutil.rmtree(own.parent)
    # not at a fork: the shards' own policy copy, said so
    rc, _, err = run("fork", "--merge", *map(str, later))
    assert rc == 1 and "not at a fork" in err


@pytest.mark.nix
def test_a_missing_or_doubled_shard_is_refused(runs: Runs, tmp_path: Path) -> None:
    one, two = runs.shards[2]
    refused([one], "shard(s) 2 of 2 missing")
    refused([one, one], "shard 1 of 2 given twice")
    three = runs.shards[3]
    refused([three[0], three[1]], "shard(s) 3 of 3 missing")  # the empty one counts too
    refused([one, two, three[2]], "shard count N differs")
    # the CLI: exit 2, the reason on stderr, no page written
    out = tmp_path / "page"
    rc, _, err = run("fork", "--merge", str(one), "--report", str(out))
    assert rc == 2 and "missing" in err and not out.exists()


@pytest.mark.nix
def test_a_different_policy_or_engine_is_refused(runs: Runs, tmp_path: Path) -> None:
    one, two = runs.shards[2]
    # a shard decided under another policy (its manifest consistent with its copy)
    other = doctored(two, tmp_path, "policy")
    signing = other / "policy" / "signing.toml"
    signing.write_text(signing.read_text() + "\n# stricter\n")
    from engine.fork.shard import policy_digest

    edit_json(other / MANIFEST, lambda d: d.update(policy_digest=policy_digest(other / "policy")))
    refused([one, other], "policy digest differs")
    # the policy copy changed after the run, the manifest not
    forged = doctored(two, tmp_path, "forged-policy")
    (forged / "policy" / "signing.toml").write_text("[policy]\n")
    refused([one, forged], "does not match the manifest's policy_digest")
    newer = doctored(two, tmp_path, "engine")
    edit_json(newer / MANIFEST, lambda d: d.update(engine="0.2.0+0000"))
    refused([one, newer], "engine version differs")
    moved = doctored(two, tmp_path, "source")
    edit_json(moved / MANIFEST, lambda d: d.update(source_nar_hash="sha256-other"))
    refused([one, moved], "narHash")


@pytest.mark.nix
def test_a_candidate_twice_or_in_the_wrong_shard_is_refused(runs: Runs, tmp_path: Path) -> None:
    one, two = runs.shards[2]
    twice = doctored(two, tmp_path, "twice")
    pager = next(r for r in json.loads((one / "report.json").read_text())["candidates"])
    # as two candidate folders with the same id would leave it: the row and its bundle
    cid = pager["candidate"]
    only = next((twice / "bundles").iterdir())
    only.rename(only.parent / cid)
    edit_json(
        twice / "report.json",
        lambda d: d["candidates"][0].update(candidate=cid, bundle=f"bundles/{cid}"),
    )
    refused([one, twice], f"candidate '{pager['candidate']}' is in two shards")
    wrong = doctored(two, tmp_path, "wrong")
    edit_json(wrong / MANIFEST, lambda d: d.update(names=["pager-last-page"]))
    refused([one, wrong], "shard 2 of 2 ran pager-last-page", "the rule gives it")
    dropped = doctored(two, tmp_path, "dropped")
    edit_json(dropped / "report.json", lambda d: d.update(candidates=[]))
    refused([one, dropped], "not the manifest's candidates")


@pytest.mark.nix
def test_a_doctored_shard_directory_is_refused(runs: Runs, tmp_path: Path) -> None:
    one, two = runs.shards[2]
    lost = doctored(two, tmp_path, "lost")
    shutil.rmtree(next((lost / "bundles").iterdir()))
    refused([one, lost], "is missing")
    escape = doctored(two, tmp_path, "escape")
    edit_json(
        escape / "report.json",
        lambda d: d["candidates"][0].update(bundle=str(one / "bundles" / "x")),
    )
    refused([one, escape], "is not under bundles/")
    refused([one, tmp_path], "is not a shard directory")
    typed = doctored(two, tmp_path, "typed")
    edit_json(typed / "report.json", lambda d: d["candidates"][0].update(candidate=["x"]))
    refused([one, typed], "not a shard report", "candidates.0.candidate")
    swapped = doctored(one, tmp_path, "swapped")

    def swap(d: dict[str, Any]) -> None:
        first, second = d["candidates"]
        first["bundle"] = second["bundle"]

    edit_json(swapped / "report.json", swap)
    refused([swapped, two], "points at the bundle of")
    bad = doctored(two, tmp_path, "bad")
    edit_json(bad / MANIFEST, lambda d: d.update(shard="two"))
    refused([one, bad], "not a shard manifest", "shard")


def test_shard_specs() -> None:
    assert parse_spec("2/3") == (2, 3)
    for bad in ("0/2", "3/2", "a/b", "2", "1/2/3", "-1/2", "1/0", ""):
        with pytest.raises(UsageError):
            parse_spec(bad)


def test_the_split_is_stable_under_order_and_additions() -> None:
    names = [f"cand-{i}" for i in range(60)]
    files = [Path(f"/f/trace/candidates/{n}/candidate.toml") for n in names]
    n = 4
    before = {f.parent.name: i for i in range(1, n + 1) for f in select(files, i, n)}
    assert sorted(before) == sorted(names)  # every candidate in exactly one shard
    assert all(1 <= i <= n for i in before.values())
    assert len(set(before.values())) == n  # 60 names fill all 4 shards
    shuffled = files[:] + [Path(f"/f/trace/candidates/new-{i}.toml") for i in range(10)]
    random.Random(7).shuffle(shuffled)
    after = {
        (f.parent.name if f.name == "candidate.toml" else f.stem): i
        for i in range(1, n + 1)
        for f in select(shuffled, i, n)
    }
    assert {k: v for k, v in after.items() if k in before} == before


def test_option_mistakes_exit_2(tmp_path: Path) -> None:
    rc, _, err = run("fork", "--fork", str(tmp_path), "--shard-dir", str(tmp_path / "x"))
    assert rc == 2 and "--shard-dir goes with --shard" in err
    rc, _, err = run("fork", "--merge", str(tmp_path), "--shard", "1/2")
    assert rc == 2 and "--merge does not go with --shard" in err
    rc, _, err = run("fork", "--fork", str(tmp_path), "--shard", "3/2")
    assert rc == 2 and "is not I/N" in err


# ---- the fork template's CI workflow (nix/templates/fork/.github/workflows/trace.yml) ----

WORKFLOW = Path(__file__).resolve().parent.parent / "nix/templates/fork/.github/workflows/trace.yml"
NIX_RUN = re.compile(r"\bnix run \.#(?P<app>verify|trace) -- (?P<args>.*)$")
EXPR = re.compile(r"\$\{\{\s*(?P<e>[^}]*?)\s*\}\}")


def workflow() -> dict[Any, Any]:
    yaml = pytest.importorskip("yaml")
    doc = yaml.safe_load(WORKFLOW.read_text())
    assert isinstance(doc, dict)
    return doc


def invocations(doc: dict[Any, Any], values: dict[str, str]) -> list[tuple[str, list[str]]]:
    """Every `nix run .#verify|trace -- …` line of every `run:` step, as trace's argv, with the
    workflow's ${{ … }} expressions replaced by `values` (anything else: X)."""
    found: list[tuple[str, list[str]]] = []
    for name, job in doc["jobs"].items():
        for step in job["steps"]:
            for line in str(step.get("run", "")).splitlines():
                m = NIX_RUN.search(line)
                if m is None:
                    continue
                text = EXPR.sub(lambda e: values.get(e.group("e"), "X"), m.group("args"))
                argv = shlex.split(text)
                found.append((name, ["fork", *argv] if m.group("app") == "verify" else argv))
    return found


def test_the_workflow_parses_and_shards_over_its_whole_matrix() -> None:
    doc = workflow()
    assert set(doc.get("on", doc.get(True))) >= {"push", "pull_request"}
    assert doc["permissions"]["id-token"] == "write"  # keyless signing in CI
    verify, merge_job = doc["jobs"]["verify"], doc["jobs"]["merge"]
    assert merge_job["needs"] == "verify" and merge_job["if"] == "always()"
    assert verify["strategy"]["fail-fast"] is False
    shards = verify["strategy"]["matrix"]["shard"]
    n = len(shards)
    assert shards == list(range(1, n + 1)) and n >= 2
    uploads = [s for s in verify["steps"] if str(s.get("uses", "")).startswith("actions/upload")]
    assert uploads and uploads[0]["if"] == "always()"  # a denied shard still reports
    downloads = [s for s in merge_job["steps"] if "download-artifact" in str(s.get("uses"))]
    assert downloads[0]["with"]["pattern"] == uploads[0]["with"]["name"].split("$")[0] + "*"


def test_the_workflow_runs_real_trace_commands() -> None:
    from engine.cli import build_parser

    doc = workflow()
    shards = doc["jobs"]["verify"]["strategy"]["matrix"]["shard"]
    parser = build_parser()
    seen: dict[str, int] = {}
    for i in shards:
        values = {"matrix.shard": str(i), "strategy.job-total": str(len(shards))}
        for job, argv in invocations(doc, values):
            args = parser.parse_args(argv)  # argparse exits (fails the test) on a wrong option
            seen[args.command] = seen.get(args.command, 0) + 1
            if job == "verify" and args.command == "fork":
                assert parse_spec(args.shard) == (i, len(shards))
                assert args.shard_dir is not None and args.merge is None
            if job == "merge":
                assert args.command == "fork" and args.merge and args.report is not None
                assert args.shard is None
    assert seen.get("fork", 0) == 2 * len(shards)  # a shard run and the merge, per value
    assert seen.get("push", 0) == len(shards)  # each shard fills the shared cache
    push = next(argv for _, argv in invocations(doc, {}) if argv[0] == "push")
    assert {"--to", "--key"} <= set(push)  # the cache and the key it signs with


def test_init_adds_the_workflow_and_keeps_an_own_one(tmp_path: Path) -> None:
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    git(fresh, "init", "-q")
    rc, out, _ = run("init", "--fork", str(fresh), "--trace-url", "path:/x", "--no-lock")
    assert rc == 0, out
    target = fresh / ".github" / "workflows" / "trace.yml"
    assert target.read_bytes() == WORKFLOW.read_bytes()
    assert "added .github/workflows/trace.yml" in out
    staged = subprocess.run(
        ["git", "-C", str(fresh), "diff", "--cached", "--name-only"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert ".github/workflows/trace.yml" in staged
    own = tmp_path / "own"
    (own / ".github" / "workflows").mkdir(parents=True)
    (own / ".github" / "workflows" / "trace.yml").write_text("name: ours\n")
    git(own, "init", "-q")
    rc, out, _ = run("init", "--fork", str(own), "--trace-url", "path:/x", "--no-lock")
    assert rc == 0 and "kept .github/workflows/trace.yml" in out
    assert (own / ".github" / "workflows" / "trace.yml").read_text() == "name: ours\n"


def test_candidates_that_do_not_load_are_sharded_and_merged_by_name(tmp_path: Path) -> None:
    """Error rows carry the candidate's name (its id is unknown): two broken `<name>.toml`
    candidates in two shards are two rows, not one candidate twice (no nix needed)."""
    root = tmp_path / "fork"
    cands = root / "trace" / "candidates"
    cands.mkdir(parents=True)
    assert (shard_of("a", 2), shard_of("d", 2)) == (1, 2)
    for name in ("a", "d"):
        (cands / f"{name}.toml").write_text("id = [not toml\n")
    (root / ".gitignore").write_text("/.trace/\n")
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "broken")
    dirs = [tmp_path / "s1", tmp_path / "s2"]
    name_of = {1: "a", 2: "d"}
    for i, d in enumerate(dirs, 1):
        rc, out, err = run(
            "fork", "--fork", str(root), "-q", "--no-sign", "--shard", f"{i}/2", "--shard-dir",
            str(d), "--json",
        )  # fmt: skip
        assert rc == 2 and f"{name_of[i]}.toml" in err, err
        rows = json.loads(out)["candidates"]
        assert [(r["candidate"], r["decision"]) for r in rows] == [(name_of[i], "error")]
    rc, out, err = run("fork", "--merge", *map(str, dirs), "--fork", str(root), "--json")
    assert rc == 2, err
    merged_rows = json.loads(out)["candidates"]
    assert [(r["candidate"], r["decision"]) for r in merged_rows] == [
        ("a", "error"),
        ("d", "error"),
    ]
