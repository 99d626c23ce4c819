"""A Python target's own OpenTelemetry spans, end to end in real Nix builds (issue 32): a copy of
the fixture fork whose pager exports spans as OTLP/JSON by a stdlib POST
(tests/fixtures/otlp/pager_spans.py, appended to the copy's module), verified with
`trace verify --bundle`. The harness's loopback receiver inside the build sandbox records them
with each run's python invocation; they are part of the run records the bundle digests; the
replay rebuilds every run with Nix's --check and finds them bit-identical (no times, no ids);
and the report shows them."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from engine.cli import main
from engine.evidence import PAYLOAD_DIR
from engine.signing.keys import keygen
from tests import browser
from tests.test_e2e_bundle import CAND, FIXTURE, REPO

pytestmark = pytest.mark.nix
SPANS = Path(__file__).parent / "fixtures" / "otlp" / "pager_spans.py"
ROWS = """
  return {rows: Array.prototype.map.call(
    document.querySelectorAll('.side.run[data-side="post-fix"] tr.span-row'),
    function (tr) { return tr.getAttribute("data-depth") + ":" + tr.cells[0].textContent; })};
"""


def _python_spans(record: dict[str, Any]) -> list[dict[str, Any]]:
    (inv,) = [i for i in record["invocations"] if i["kind"] == "python"]
    spans: list[dict[str, Any]] = inv["spans"]
    return spans


def test_a_python_target_s_spans_reach_the_bundle_and_replay_alike(tmp_path: Path) -> None:
    fork = tmp_path / "fork"
    shutil.copytree(FIXTURE, fork, ignore=shutil.ignore_patterns(".trace", "result*"))
    module = fork / "pkgs" / "pager" / "src" / "pager" / "__init__.py"
    module.write_text(module.read_text() + SPANS.read_text())
    key, _, _ = keygen(tmp_path / "keys" / "signer.key")
    policy = tmp_path / "policy"
    policy.mkdir()
    for f in (REPO / "policy").glob("*.toml"):
        shutil.copy(f, policy / f.name)
    identity = policy / "signing-identity.json"
    lock = {"name": "signer", "public_key": "../keys/signer.key.pub"}
    identity.write_text(
        json.dumps(
            {"schema": "trace.signing-identity/v1", "version": "1.0.0", "keys": [lock]}
            | {"keyless": []}
        )
    )
    bundle = tmp_path / "bundle"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        args = ["--fork", str(fork), "-q", "--bundle", str(bundle), "--key", str(key)]
        rc = main(["verify", str(fork / CAND), *args])
    assert rc == 0, out.getvalue()
    payload = bundle / PAYLOAD_DIR
    pre = json.loads((payload / "outcomes" / "pre-fix-run@1.json").read_bytes())
    post = json.loads((payload / "outcomes" / "post-fix-run@1.json").read_bytes())
    root, *calls = _python_spans(post)
    assert (root["name"], root["parent"], root["scope"]) == ("pager", None, "pager")
    assert root["attributes"] == {"pager.calls": 20} and len(calls) == 20
    assert all(c["name"] == "page_count" and c["parent"] == 0 for c in calls)
    # the fix shows in the target's own spans: 103 items at 10 per page are 11 pages after it
    answers = {(c["attributes"]["pager.total"], c["attributes"]["pager.size"]): c for c in calls}
    assert answers[103, 10]["attributes"]["pager.pages"] == 11
    pre_calls = {
        (c["attributes"]["pager.total"], c["attributes"]["pager.size"]): c["attributes"]
        for c in _python_spans(pre)[1:]
    }
    assert pre_calls[103, 10]["pager.pages"] == 10  # the bug, as the target itself reported it
    verify = json.loads((payload / "verify-result.json").read_bytes())
    assert _python_spans(verify["post"]["runs"][0]) == _python_spans(post)
    # verify-bundle: the digests hold, the records agree, and the replay's --check rebuilds of
    # every run give the same records, spans and all
    capsys_out = io.StringIO()
    with contextlib.redirect_stdout(capsys_out):
        args = ["--identity", str(identity), "--json", "--fork", str(fork), "--replay"]
        rc = main(["verify-bundle", str(bundle), *args])
    doc = json.loads(capsys_out.getvalue())
    assert rc == 0 and doc["passed"], doc["reasons"]
    replay = next(c for c in doc["checks"] if c["name"] == "replay")
    assert replay["ok"] and "judged again" in replay["detail"], replay
    # the report shows the target's own spans with its run
    page = tmp_path / "report.html"
    assert main(["report", str(bundle), "--identity", str(identity), "-o", str(page)]) == 0
    r = browser.run_page(page, tmp_path, ROWS)
    assert r["errors"] == [] and r["violations"] == [] and r["resources"] == [], r
    assert "0:pager (pager)" in r["rows"] and "1:· page_count (pager)" in r["rows"], r["rows"][:3]
