"""Scout and eligibility: OSV directories and export zips matched to the fixture fork's packages
through one batched evaluation; every refusal with its stable reason code."""

from __future__ import annotations

import json
import shutil
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import pytest

from engine.advisory import OsvAdvisory
from engine.cli import main
from engine.roles.eligibility import PackageFacts, affected, judge, load_eligibility, version_key
from tests.model_fake import answers

REPO = Path(__file__).resolve().parent.parent
POLICY = load_eligibility(REPO / "policy" / "eligibility.toml")
BASE = json.loads((answers.CPARSE / "advisory.json").read_text())


def adv(**changes: Any) -> dict[str, Any]:
    doc = json.loads(json.dumps(BASE))
    doc.update(changes)
    return doc


def affected_with(name: str, ecosystem: str = "Nix", **extra: Any) -> list[dict[str, Any]]:
    return [{"package": {"ecosystem": ecosystem, "name": name}, **extra}]


CASES: dict[str, tuple[dict[str, Any], PackageFacts, list[str]]] = {
    "eligible": (adv(), PackageFacts(exists=True, evaluates=True, version="1.0"), []),
    "withdrawn": (
        adv(withdrawn="2026-02-01T00:00:00Z"),
        PackageFacts(exists=True, evaluates=True, version="1.0"),
        ["eligibility-withdrawn"],
    ),
    "ecosystem": (
        adv(affected=affected_with("cparse", "PyPI", versions=["1.0"])),
        PackageFacts(exists=True, evaluates=True, version="1.0"),
        ["eligibility-ecosystem"],
    ),
    "unknown": (adv(), PackageFacts(exists=False), ["eligibility-package-unknown"]),
    "no-eval": (
        adv(),
        PackageFacts(exists=True, evaluates=False),
        ["eligibility-package-does-not-evaluate"],
    ),
    "not-affected": (
        adv(
            affected=affected_with(
                "cparse",
                ranges=[{"type": "ECOSYSTEM", "events": [{"introduced": "0"}, {"fixed": "0.9"}]}],
            )
        ),
        PackageFacts(exists=True, evaluates=True, version="1.0"),
        ["eligibility-version-not-affected"],
    ),
    "git-only": (
        adv(affected=affected_with("cparse", ranges=BASE["affected"][0]["ranges"])),
        PackageFacts(exists=True, evaluates=True, version="1.0"),
        ["eligibility-version-unknown"],
    ),
    "no-fix": (
        adv(references=[{"type": "REPORT", "url": "https://example.invalid/7"}]),
        PackageFacts(exists=True, evaluates=True, version="1.0"),
        ["eligibility-no-fix-reference"],
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_eligibility_reasons(case: str) -> None:
    doc, facts, reasons = CASES[case]
    v = judge(OsvAdvisory.model_validate(doc), "cparse", facts, POLICY)
    assert v.reasons == reasons and v.eligible == (reasons == [])
    assert v.policy.name == "trace-eligibility"


def test_versions_and_ranges() -> None:
    assert version_key("1.10") > version_key("1.9") > version_key("1.9rc1")
    entry = OsvAdvisory.model_validate(
        adv(
            affected=affected_with(
                "cparse",
                ranges=[
                    {"type": "SEMVER", "events": [{"introduced": "1.2.0"}, {"fixed": "1.4.1"}]}
                ],
            )
        )
    ).affected[0]
    assert [affected(entry, v) for v in ("1.1.9", "1.2.0", "1.4.0", "1.4.1")] == [
        False,
        True,
        True,
        False,
    ]


@pytest.mark.nix
def test_scout_writes_skeletons_from_one_evaluation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fork = tmp_path / "fork"
    shutil.copytree(answers.FIXTURE, fork, ignore=shutil.ignore_patterns(".trace", "candidates"))
    osv = tmp_path / "osv"
    osv.mkdir()
    (osv / "a.json").write_text(json.dumps(adv()))
    (osv / "b.json").write_text(json.dumps(adv(id="X-2", affected=affected_with("nosuch"))))
    (osv / "c.json").write_text(json.dumps(adv(id="X-3", affected=affected_with(
        "pager", ranges=[{"type": "ECOSYSTEM", "events": [{"introduced": "9.0"}]}]))))  # fmt: skip
    (osv / "d.json").write_text('{"id": "X-4", "severity": [{"type": "CVSS_V3", "score": "x"}]}')
    calls: list[list[str]] = []
    real = subprocess.run

    def counting(cmd: Any, *a: Any, **kw: Any) -> Any:
        calls.append(list(cmd))
        return real(cmd, *a, **kw)

    monkeypatch.setattr("engine.agent.scout.subprocess.run", counting)
    assert main(["scout", str(osv), "--fork", str(fork), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert len(calls) == 1 and calls[0][0] == "nix-instantiate"  # one batched evaluation
    rows = {r.get("advisory", r["file"]): r for r in report["advisories"]}
    assert rows["TRACE-2026-0001"]["eligible"] and rows["TRACE-2026-0001"]["version"] == "1.0"
    assert rows["X-2"]["reasons"] == ["eligibility-package-unknown"]
    assert rows["X-3"]["reasons"] == ["eligibility-version-not-affected"]
    assert rows["d.json"]["reasons"] == ["scout-malformed"] and "CVSS" in rows["d.json"]["detail"]
    skeleton = Path(rows["TRACE-2026-0001"]["skeleton"])
    assert skeleton == fork / "trace/candidates/TRACE-2026-0001-cparse/candidate.toml"
    assert main(["route", str(skeleton)]) == 0  # the skeleton routes before any model is asked
    assert "human-review-required" in capsys.readouterr().out
    # the same advisories from an OSV export zip
    zipped = tmp_path / "osv.zip"
    with zipfile.ZipFile(zipped, "w") as zf:
        for f in sorted(osv.iterdir()):
            zf.write(f, f.name)
    shutil.rmtree(fork / "trace" / "candidates")
    assert main(["scout", str(zipped), "--fork", str(fork)]) == 0
    assert "eligible      TRACE-2026-0001 cparse (version 1.0)" in capsys.readouterr().out
    assert skeleton.is_file()
    assert main(["scout", str(tmp_path / "nope"), "--fork", str(fork)]) == 2


@pytest.mark.nix
def test_scout_queries_the_osv_api_with_the_forks_versions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Online scouting against a loopback OSV API: one querybatch with the versions the fork's
    one evaluation found, then the advisories it names; a silent API ends at the deadline."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    fork = tmp_path / "fork"
    shutil.copytree(answers.FIXTURE, fork, ignore=shutil.ignore_patterns(".trace", "candidates"))
    seen: list[Any] = []
    release = threading.Event()

    class Api(BaseHTTPRequestHandler):
        def log_message(self, *a: object) -> None:
            pass

        def _send(self, doc: Any) -> None:
            raw = json.dumps(doc).encode()
            self.send_response(200)
            self.send_header("content-length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            seen.append(body)
            if self.path.startswith("/silent"):
                release.wait(30)
                return
            hits = [{"vulns": [{"id": BASE["id"]}]} if q["package"]["name"] == "cparse"
                    else {} for q in body["queries"]]  # fmt: skip
            self._send({"results": hits})

        def do_GET(self) -> None:
            self._send(BASE if self.path == f"/v1/vulns/{BASE['id']}" else {})

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Api)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, args=(0.02,), daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}"
    try:
        argv = ["scout", "--osv-api", url, "--package", "cparse", "--package", "pager",
                "--package", "nosuch", "--fork", str(fork), "--json"]  # fmt: skip
        assert main(argv) == 0
        report = json.loads(capsys.readouterr().out)
        assert seen[0]["queries"] == [
            {"package": {"name": "cparse", "ecosystem": "Nix"}, "version": "1.0"},
            {"package": {"name": "pager", "ecosystem": "Nix"}, "version": "2.1"},
        ]
        [row] = report["advisories"]
        assert row["eligible"] and row["package"] == "cparse"
        assert (fork / "trace/candidates/TRACE-2026-0001-cparse/candidate.toml").is_file()
        import engine.roles.scout as scout_mod

        real = scout_mod.query_api
        argv[2] = url + "/silent"
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(scout_mod, "query_api", lambda u, q: real(u, q, deadline_s=0.5))
            assert main(argv) == 2
        assert "did not answer within 0.5 s" in capsys.readouterr().err
        assert main(["scout", "--fork", str(fork)]) == 2  # neither a source nor the API
    finally:
        release.set()
        srv.shutdown()
        srv.server_close()
