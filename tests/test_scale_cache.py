"""Binary caches trusted by signature (issue 17), on this machine only (`file://` caches).

"Machine A" and "machine B" are two state directories on one store: A verifies a candidate,
bundles it and `trace push`es its results to a cache signed with a key made by
`nix-store --generate-binary-cache-key`; its outputs are then deleted from the store; B (a fresh
state directory whose machine config trusts the key) verifies the same candidate: every result
comes from the cache (0 builds), with the same .drv paths, the same verdict and the same bundle.
An unsigned cache, or one signed by a key B does not trust, is refused: B builds instead.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from engine.cli import main
from engine.errors import InputError
from engine.evidence import PAYLOAD_DIR
from engine.graphtypes import NixConfig
from engine.machine import Machine, load_machine
from engine.nix import Nix
from tests.enginekit import make_project
from tests.storekit import delete_outputs, outputs

REPO = Path(__file__).resolve().parent.parent
FIXTURE = REPO / "tests" / "fixtures" / "fork"
CAND = "trace/candidates/pager-last-page/candidate.toml"
PAGER_ID = "TRACE-2026-0002-pager"


def cache_key(where: Path, name: str) -> tuple[Path, str]:
    """A binary-cache key pair: (secret key file, public key text)."""
    sec, pub = where / f"{name}.sec", where / f"{name}.pub"
    subprocess.run(
        ["nix-store", "--generate-binary-cache-key", name, str(sec), str(pub)],
        check=True,
        timeout=60,
    )
    return sec, pub.read_text().strip()


def machine_file(path: Path, cache: Path, *keys: str) -> Path:
    path.write_text(
        f'substituters = ["file://{cache}"]\ntrusted-public-keys = {json.dumps(list(keys))}\n'
    )
    return path


def cli(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(list(args))
    return rc, out.getvalue()


def two_steps() -> str:
    """Two steps whose derivations are this call's own (a unique message)."""
    salt = uuid.uuid4().hex
    return (
        f'[steps.a]\nkind = "text"\nparams = {{ message = "{salt}" }}\n'
        '[steps.b]\nkind = "text"\nneeds = ["a"]\n'
    )


# ---- the machine config: where caches and keys come from, and what is refused ----


def test_no_machine_config_leaves_nix_its_own_settings(tmp_path: Path) -> None:
    assert load_machine() == Machine()  # conftest: TRACE_MACHINE_CONFIG=""
    args = Nix(NixConfig(), machine=Machine()).option_args()
    assert "substituters" not in args and "trusted-public-keys" not in args
    assert args[-6:-3] == ["--option", "require-sigs", "true"]


def test_the_machine_config_comes_before_what_trace_enforces(tmp_path: Path) -> None:
    _, pub = cache_key(tmp_path, "k1")
    cfg = load_machine(machine_file(tmp_path / "m.toml", tmp_path / "c", pub))
    args = Nix(NixConfig(options={"cores": "1"}), machine=cfg).option_args()
    assert args == [
        "--option", "cores", "1",
        "--option", "substituters", f"file://{tmp_path / 'c'}",
        "--option", "trusted-public-keys", pub,
        "--option", "sandbox", "true",
        "--option", "require-sigs", "true",
        "--option", "fallback", "true",
    ]  # fmt: skip
    # a replay rebuilds: no cache at all, whatever the machine says
    replay = Nix(NixConfig(), machine=cfg, substitute=False).option_args()
    # (after the machine's own list: the last setting of an option is the one Nix uses)
    assert replay[-12:-9] == ["--option", "substituters", ""]


def test_the_config_is_found_by_env_then_xdg(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, pub = cache_key(tmp_path, "k1")
    xdg = tmp_path / "xdg"
    (xdg / "trace").mkdir(parents=True)
    machine_file(xdg / "trace" / "machine.toml", tmp_path / "xdg-cache", pub)
    monkeypatch.delenv("TRACE_MACHINE_CONFIG")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(xdg))
    assert load_machine().substituters == [f"file://{tmp_path / 'xdg-cache'}"]
    monkeypatch.setenv(
        "TRACE_MACHINE_CONFIG", str(machine_file(tmp_path / "m.toml", tmp_path, pub))
    )
    assert load_machine().substituters == [f"file://{tmp_path}"]


@pytest.mark.parametrize(
    ("text", "key", "fragment"),
    [
        ("require-sigs = false\n", "require-sigs", "unsigned cache contents"),
        ('substituters = ["file:///srv/c"]\n', "substituters", "without trusted-public-keys"),
        (
            'substituters = ["file:///srv/c"]\ntrusted-public-keys = ["k:bm90LWEta2V5"]\n',
            "trusted-public-keys.1",
            "not a Nix binary-cache public key",
        ),
        ('substituters = ["/srv/c"]\ntrusted-public-keys = []\n', "substituters.1", "store URL"),
        ('builders = ["ssh-ng://a ; ssh-ng://b"]\n', "builders.1", "one builder"),
        ("sandbox = false\n", "sandbox", "unknown key"),
        ('substituters = "file:///srv/c"\n', "substituters", "valid list"),
        ("max-jobs = 0\n", "max-jobs", "no builders are listed"),
        ("max-jobs = -1\n", "max-jobs", "greater than or equal to 0"),
    ],
)
def test_a_machine_config_that_weakens_trust_is_refused(
    tmp_path: Path, text: str, key: str, fragment: str
) -> None:
    path = tmp_path / "machine.toml"
    path.write_text(text)
    with pytest.raises(InputError) as info:
        load_machine(path)
    assert info.value.key == key and fragment in info.value.message
    assert info.value.file == str(path) and info.value.hint


def test_a_bad_machine_config_stops_a_run_before_anything_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    graph = make_project(tmp_path / "p", '[steps.a]\nkind = "text"\n')
    bad = tmp_path / "machine.toml"
    bad.write_text('substituters = ["file:///srv/c"]\nrequire-sigs = false\n')
    monkeypatch.setenv("TRACE_MACHINE_CONFIG", str(bad))
    state = tmp_path / "state"
    assert main(["run", str(graph), "--root", str(graph.parent), "--state-dir", str(state)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "require-sigs" in err
    assert not state.exists()


def test_the_documented_machine_config_is_one_trace_accepts(tmp_path: Path) -> None:
    text = (REPO / "docs" / "machines.md").read_text()
    block = text.split("```toml\n", 1)[1].split("```", 1)[0]
    path = tmp_path / "machine.toml"
    path.write_text(block)
    cfg = load_machine(path)
    assert cfg.substituters and cfg.trusted_public_keys and cfg.check_builders and cfg.push_to


# ---- trace push: errors ----


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A built two-step project: (graph, state dir)."""
    base = tmp_path_factory.mktemp("small")
    graph = make_project(
        base / "p",
        two_steps(),
    )
    state = base / "state"
    rc, _ = cli("run", str(graph), "--root", str(graph.parent), "--state-dir", str(state))
    assert rc == 0
    return graph, state


@pytest.mark.nix
def test_push_refuses_a_missing_or_wrong_key_and_an_unreachable_cache(
    small: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, state = small
    sec, _ = cache_key(tmp_path, "k1")
    to = f"file://{tmp_path / 'cache'}"
    cases = [
        (["--to", to], "no signing key"),
        (["--to", to, "--key", str(tmp_path / "absent.sec")], "does not exist"),
        (["--to", to, "--key", str(tmp_path / "k1.pub")], "not a Nix binary-cache secret key"),
        (["--key", str(sec)], "no cache to push to"),
        (["--to", "http://127.0.0.1:9", "--key", str(sec)], "unreachable"),
        (["--to", f"file://{tmp_path / 'k1.sec'}/x", "--key", str(sec)], "unreachable"),
    ]
    for extra, fragment in cases:
        capsys.readouterr()
        assert main(["push", "--state-dir", str(state), *extra]) == 2, extra
        assert fragment in capsys.readouterr().err, extra
    assert not (tmp_path / "cache").exists()
    empty = tmp_path / "empty-state"
    empty.mkdir()
    assert main(["push", "--state-dir", str(empty), "--to", to, "--key", str(sec)]) == 2
    assert "nothing to push" in capsys.readouterr().err


# ---- an unsigned or wrongly signed cache is refused ----


@pytest.mark.nix
@pytest.mark.parametrize("how", ["unsigned", "other-key", "tampered"])
def test_an_unsigned_wrongly_signed_or_tampered_cache_is_refused(tmp_path: Path, how: str) -> None:
    """unsigned / other-key: nothing is taken from the cache; tampered (a NAR changed after it
    was signed by the TRUSTED key): that path is refused and built here (fallback), with its
    true content."""
    graph = make_project(tmp_path / "p", two_steps())
    a_state, b_state, cache = tmp_path / "A", tmp_path / "B", tmp_path / "cache"
    rc, _ = cli(
        "run", str(graph), "--root", str(graph.parent), "--state-dir", str(a_state), "--json"
    )
    assert rc == 0
    trusted_sec, trusted = cache_key(tmp_path, "trusted")
    a_out = outputs(a_state)
    outs = sorted(out for _, out in a_out.values())
    genuine = {sid: Path(out, "text").read_bytes() for sid, (_, out) in a_out.items()}
    to = f"file://{cache}?compression=none"
    if how == "unsigned":  # what `trace push` never writes: paths without a signature
        subprocess.run(["nix", "copy", "--to", to, *outs], check=True, timeout=300)
    else:
        key = cache_key(tmp_path, "other")[0] if how == "other-key" else trusted_sec
        rc, _ = cli("push", "--state-dir", str(a_state), "--to", to, "--key", str(key))
        assert rc == 0
    assert len(list(cache.glob("*.narinfo"))) >= len(outs)
    forged = next(sid for sid in a_out if sid.endswith("/a"))
    other = next(sid for sid in a_out if sid.endswith("/b"))  # its text holds a's text too
    if how == "tampered":  # step a's outcome, changed in the cache after signing
        nars = [p for p in (cache / "nar").iterdir() if genuine[forged] in p.read_bytes()]
        (nar,) = [p for p in nars if genuine[other] not in p.read_bytes()]
        nar.write_bytes(nar.read_bytes().replace(genuine[forged], genuine[forged].upper()))
    gone = delete_outputs(a_state)
    assert gone == set(outs)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRACE_MACHINE_CONFIG", str(machine_file(tmp_path / "m.toml", cache, trusted)))
        rc, out = cli(
            "run", str(graph), "--root", str(graph.parent), "--state-dir", str(b_state), "--json"
        )
    assert rc == 0
    steps = json.loads(out)["steps"]
    if how == "tampered":
        # the forged path was not taken: built here; the untouched one came from the cache
        assert steps["a"]["status"] == "built" and steps["a"]["built_on"] == "local"
        assert steps["b"]["status"] == "substituted"
    else:  # nothing came from the cache: B built every step itself
        assert {s["status"] for s in steps.values()} == {"built"}
        assert {s["built_on"] for s in steps.values()} == {"local"}
    assert {sid: Path(s["out"], "text").read_bytes() for sid, s in steps.items()} == {
        sid.rsplit("/", 1)[-1]: text for sid, text in genuine.items()
    }


# ---- determinism claims: only a trusted key's signature stands in for a --check ----


@pytest.mark.nix
def test_a_claims_store_path_is_the_one_nix_gives_its_text() -> None:
    from engine.remote.attest import claim_name, claim_text, text_path

    drv = "/nix/store/" + "a" * 32 + "-x.drv"
    text = claim_text(drv, "/nix/store/" + "b" * 32 + "-x", "sha256-AAAA")
    assert "$" not in text  # a JSON string is then a Nix string with the same value
    expr = f"builtins.toFile {json.dumps(claim_name(drv))} {json.dumps(text)}"
    proc = subprocess.run(
        ["nix-instantiate", "--eval", "-E", expr], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == text_path(claim_name(drv), text)


@pytest.mark.nix
@pytest.mark.parametrize("how", ["signed", "unsigned", "other-key"])
def test_a_determinism_claim_is_taken_only_with_a_trusted_signature(
    tmp_path: Path, how: str
) -> None:
    """A checks step b and pushes; B substitutes b's output. B takes A's claim instead of
    rebuilding b only when the claim is signed by a key B trusts: a claim whose signature was
    stripped in the cache (Nix itself substitutes a content-addressed path without one) or
    replaced by another key's is refused, and B rebuilds b with --check here."""
    graph = make_project(
        tmp_path / "p", two_steps().replace('needs = ["a"]', 'needs = ["a"]\ncheck = true')
    )
    a_state, b_state, cache = tmp_path / "A", tmp_path / "B", tmp_path / "cache"
    rc, out = cli(
        "run", str(graph), "--root", str(graph.parent), "--state-dir", str(a_state), "--json"
    )
    assert rc == 0 and json.loads(out)["steps"]["b"]["deterministic"] is True
    sec, pub = cache_key(tmp_path, "trusted")
    to = f"file://{cache}?compression=none"
    rc, out = cli("push", "--state-dir", str(a_state), "--to", to, "--key", str(sec), "--json")
    assert rc == 0
    (claim,) = json.loads(out)["claims"]
    narinfo = cache / f"{Path(claim).name.split('-', 1)[0]}.narinfo"
    lines = [ln for ln in narinfo.read_text().splitlines() if not ln.startswith("Sig:")]
    if how != "signed":
        narinfo.write_text("\n".join(lines) + "\n")
    if how == "other-key":
        other, _ = cache_key(tmp_path, "other")
        subprocess.run(
            ["nix", "store", "sign", "--store", to, "--key-file", str(other), claim],
            check=True,
            timeout=120,
        )
        assert "Sig: other:" in narinfo.read_text()
    delete_outputs(a_state)
    subprocess.run(["nix-store", "--delete", claim], check=True, timeout=120)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRACE_MACHINE_CONFIG", str(machine_file(tmp_path / "m.toml", cache, pub)))
        rc, out = cli(
            "run", str(graph), "--root", str(graph.parent), "--state-dir", str(b_state), "--json"
        )
    assert rc == 0
    b = json.loads(out)["steps"]["b"]
    assert b["status"] == "substituted" and b["deterministic"] is True
    if how == "signed":
        assert b["checked_on"] == f"claim:{claim}"
    else:  # Nix took the unsigned path from the cache; trace did not take its word
        assert b["checked_on"] == "local"


# ---- machine A pushes, machine B verifies by substitution ----


@dataclass
class Machines:
    fork: Path
    a_state: Path
    b_state: Path
    a_result: dict[str, Any]
    b_result: dict[str, Any]
    a_bundle: Path
    b_bundle: Path
    a_outputs: dict[str, tuple[str, str]]
    b_outputs: dict[str, tuple[str, str]]
    gone: set[str]
    push_out: dict[str, Any]


@pytest.fixture(scope="module")
def machines(tmp_path_factory: pytest.TempPathFactory) -> Machines:
    base = tmp_path_factory.mktemp("machines")
    fork = base / "fork"
    shutil.copytree(FIXTURE, fork, ignore=shutil.ignore_patterns(".trace", "result*"))
    # the package's source differs from every other test's, so its derivations are this test's
    (fork / "pkgs" / "pager" / "src" / "SALT").write_text(uuid.uuid4().hex + "\n")
    cand = str(fork / CAND)
    sec, pub = cache_key(base, "machine-a")
    rc, _ = cli("keygen", str(base / "signer"))
    assert rc == 0
    cache = base / "cache"
    a_state, b_state = base / "A", base / "B"

    def verify_and_bundle(state: Path, bundle: Path) -> dict[str, Any]:
        rc, out = cli("verify", cand, "--fork", str(fork), "--state-dir", str(state), "--json")
        assert rc == 0, out
        rc, _ = cli(
            "bundle", cand, "--fork", str(fork), "--state-dir", str(state), "--out",
            str(bundle), "--key", str(base / "signer"), "--today", "2026-12-01",
        )  # fmt: skip
        assert rc == 0
        return dict(json.loads(out))

    a_result = verify_and_bundle(a_state, base / "bundle-a")
    rc, out = cli(
        "push", "--state-dir", str(a_state), "--to", f"file://{cache}", "--key", str(sec), "--json"
    )
    assert rc == 0, out
    a_outputs = outputs(a_state)
    gone = delete_outputs(a_state)
    # and the determinism claims push added to the store: B has only what the cache has
    subprocess.run(["nix-store", "--delete", *json.loads(out)["claims"]], timeout=600, check=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRACE_MACHINE_CONFIG", str(machine_file(base / "machine-b.toml", cache, pub)))
        b_result = verify_and_bundle(b_state, base / "bundle-b")
    return Machines(
        fork, a_state, b_state, a_result, b_result, base / "bundle-a", base / "bundle-b",
        a_outputs, outputs(b_state), gone, json.loads(out),
    )  # fmt: skip


@pytest.mark.nix
def test_machine_b_builds_nothing_and_substitutes_what_a_built(machines: Machines) -> None:
    # every result of A went to the cache, and (most of) them were deleted from the store
    pushed = set(machines.push_out["outputs"])
    assert pushed == {out for _, out in machines.a_outputs.values()}
    assert len(machines.gone) > len(pushed) // 2
    statuses = {sid: s["status"] for sid, s in machines.b_result["steps"].items()}
    assert "built" not in statuses.values()
    # nor --check rebuilt: A's signed determinism claims came with the outputs (pushed too)
    checked = {sid: s for sid, s in machines.b_result["steps"].items() if s["checked_on"]}
    assert set(checked) >= {"post-fix", "post-fix-run@1"}
    for sid, step in checked.items():
        assert step["checked_on"].startswith("claim:/nix/store/"), sid
        assert step["deterministic"] is True
        assert step["checked_on"].removeprefix("claim:") in machines.push_out["claims"]
    a_checked = {sid for sid, s in machines.a_result["steps"].items() if s["checked_on"]}
    assert a_checked == set(checked)
    assert {
        s["checked_on"] for sid, s in machines.a_result["steps"].items() if s["checked_on"]
    } == {"local"}
    for step in machines.b_result["steps"].values():
        # deleted outputs came from the cache; the few another state dir still holds were found
        want = "substituted" if step["out"] in machines.gone else "reused"
        assert step["status"] == want, step
    # A built them
    assert {s["status"] for s in machines.a_result["steps"].values()} <= {"built", "reused"}


@pytest.mark.nix
def test_machine_b_instantiates_the_same_derivations(machines: Machines) -> None:
    assert machines.b_outputs == machines.a_outputs
    a = {sid: s["drv"] for sid, s in machines.a_result["steps"].items()}
    b = {sid: s["drv"] for sid, s in machines.b_result["steps"].items()}
    assert a == b and all(a.values())


@pytest.mark.nix
def test_machine_b_reaches_the_same_verdict_and_bundle(machines: Machines) -> None:
    from engine.verify.cached import evidence_view
    from engine.verify_result import VerifyResult

    a = VerifyResult.model_validate(machines.a_result)
    b = VerifyResult.model_validate(machines.b_result)
    assert a.passed and b.passed and b.deterministic is True
    assert evidence_view(a) == evidence_view(b)

    def payload(bundle: Path) -> dict[str, bytes]:
        root = bundle / PAYLOAD_DIR
        return {
            p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()
        }

    assert payload(machines.a_bundle) == payload(machines.b_bundle)
    subjects = [
        json.loads((b / "statement.json").read_text())["subject"]
        for b in (machines.a_bundle, machines.b_bundle)
    ]
    assert subjects[0] == subjects[1] and len(subjects[0]) > 10

    # the statements (signed, not payload) say where each side's results came from
    def machines_of(bundle: Path) -> dict[str, dict[str, str]]:
        doc = json.loads((bundle / "statement.json").read_text())
        return {
            b["name"].removeprefix("machine:"): b["annotations"]
            for b in doc["predicate"]["runDetails"]["byproducts"]
        }

    a_where, b_where = machines_of(machines.a_bundle), machines_of(machines.b_bundle)
    assert a_where["post-fix"] == {"trace.builtOn": "local", "trace.checkedOn": "local"}
    assert b_where["post-fix"]["trace.builtOn"].startswith("cache:file://")
    assert b_where["post-fix"]["trace.checkedOn"].startswith("claim:/nix/store/")
