"""The roles without Nix: parsing model answers into typed outputs or recorded reasons, the
diff-applies check, the agent file's isolation rule, and prompt templates seeing only needs."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.errors import InputError
from engine.roles.agentfile import load_agent
from engine.roles.outcome import RoleFailure
from engine.roles.patcher import Draft, check_applies, parse_patch
from engine.roles.prompts import render
from engine.roles.reproducer import Reproduction, parse_reproducer
from engine.roles.resolver import resolve
from engine.roles.reviewer import Review, parse_review
from tests.model_fake import answers

SRC = answers.FIXTURE / "pkgs" / "cparse" / "src"
REPO = Path(__file__).resolve().parent.parent


def test_patcher_answer_becomes_diff_and_rationale() -> None:
    got = parse_patch(answers.GOOD_PATCH)
    assert isinstance(got, Draft)
    assert got.diff == (answers.CPARSE / "fix.patch").read_text()
    assert "SECRET-RATIONALE-MARKER" in got.rationale and "+++" not in got.rationale
    assert check_applies(got.diff, SRC) is None


@pytest.mark.parametrize("answer", [answers.NO_DIFF, "```diff\nnot a diff\n```\n"])
def test_an_answer_without_a_diff_is_recorded(answer: str) -> None:
    got = parse_patch(answer)
    assert isinstance(got, RoleFailure) and got.reason == "model-output-no-diff"


def test_a_diff_that_does_not_apply_names_the_hunk() -> None:
    got = parse_patch(answers.NOT_APPLYING)
    assert isinstance(got, Draft)
    failure = check_applies(got.diff, SRC)
    assert failure is not None and failure.reason == "patch-does-not-apply"
    assert "Hunk #1 FAILED" in failure.detail
    other = got.diff.replace("cparse.c", "missing.c")
    failure = check_applies(other, SRC)
    assert failure is not None and failure.reason == "patch-does-not-apply"


def test_reproducer_and_reviewer_answers() -> None:
    rep = parse_reproducer(answers.REPRO)
    assert isinstance(rep, Reproduction) and sorted(rep.data) == [
        "boundary-key.conf",
        "long-key.conf",
    ]
    assert rep.expect.sanitizer == "AddressSanitizer: heap-buffer-overflow"
    rev = parse_review(answers.APPROVE)
    assert isinstance(rev, Review) and rev.verdict == "approve"
    assert isinstance(parse_review(answers.REQUEST_CHANGES), Review)
    for bad in (answers.NOT_JSON, "[1, 2]", '{"verdict": "maybe"}'):
        got = parse_review(bad)
        assert isinstance(got, RoleFailure) and got.reason == "model-output-unparseable", bad
    for bad in (
        '{"script": "x", "data": {"../etc/passwd": "x"}, "expect": {"exit_code": 1}}',
        '{"script": "x", "expect": {}}',
        '{"script": "x"}',
        "no json at all",
    ):
        got = parse_reproducer(bad)
        assert isinstance(got, RoleFailure) and got.reason == "model-output-unparseable", bad


def _agent(tmp_path: Path, review_needs: str) -> Path:
    text = answers.agent_toml("http://127.0.0.1:1", "http://127.0.0.1:1/v1")
    text = text.replace('needs = ["advisory", "patch.diff", "verify"]', f"needs = {review_needs}")
    path = tmp_path / "agent.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    "need", ["patch.rationale", "patch.prompt", "patch.transcript", "repro.transcript"]
)
def test_a_reviewer_step_cannot_need_the_patchers_context(tmp_path: Path, need: str) -> None:
    with pytest.raises(InputError) as exc:
        load_agent(_agent(tmp_path, f'["advisory", "patch.diff", "verify", "{need}"]'))
    assert exc.value.exit_code == 2 and "may not need" in str(exc.value)
    assert exc.value.key == "steps.review.needs"


def test_agent_file_errors_name_the_key(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not an earlier step"):
        load_agent(_agent(tmp_path, '["advisory", "nope.diff", "verify"]'))
    with pytest.raises(InputError, match="has no output"):
        load_agent(_agent(tmp_path, '["advisory", "patch.script", "verify"]'))
    agent = load_agent(_agent(tmp_path, '["advisory", "patch.diff", "verify"]'))
    assert [s.role for s in agent.steps] == ["patcher", "reproducer", "reviewer"]
    load_agent(REPO / "graphs" / "agent.toml")
    # the review rule is the signing policy's, where `trace decide` sees it: not here
    path = _agent(tmp_path, '["advisory", "patch.diff", "verify"]')
    path.write_text(path.read_text() + "[review]\nrequire_approval = false\n")
    with pytest.raises(InputError, match="moved to the signing policy") as exc:
        load_agent(path)
    assert exc.value.key == "review" and exc.value.line is not None


def test_a_template_sees_only_its_needs(tmp_path: Path) -> None:
    tmpl = tmp_path / "t.md.j2"
    tmpl.write_text("{% block system %}S{% endblock %}{% block prompt %}{{ patch_rationale }}"
                    "{% endblock %}")  # fmt: skip
    with pytest.raises(InputError, match="does not need"):
        render(tmpl, {"patch_diff": "d"})
    assert render(tmpl, {"patch_rationale": "r"}) == ("S\n", "r\n")


def test_resolver_grounds_the_upstream_patch(tmp_path: Path) -> None:
    url = "https://example.invalid/cparse/commit/a1b2c3d4e5f60718293a4b5c6d7e8f9012345678"
    commit = url.rsplit("/", 1)[1]
    assert resolve(url, None).problems == ["upstream-patch-not-fetched"]
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    body = (answers.CPARSE / "fix.patch").read_text()
    (mirror / f"{commit}.patch").write_text(f"From {commit} Mon Sep 17 00:00:00 2001\n\n{body}")
    ref = resolve(url, mirror, SRC)
    assert ref.grounded and ref.files == ["cparse.c"] and ref.sha256
    # a mirror file whose header names another commit is not grounded
    (mirror / f"{commit}.patch").write_text(f"From {'f' * 40} Mon Sep 17 00:00:00 2001\n\n{body}")
    assert resolve(url, mirror, SRC).problems == ["upstream-commit-mismatch"]
    # a patch that does not apply says which hunk
    wrong = answers.NOT_APPLYING.split("```diff\n")[1].split("```")[0]
    (mirror / f"{commit}.patch").write_text(f"From {commit} Mon Sep 17 00:00:00 2001\n\n{wrong}")
    problems = resolve(url, mirror, SRC).problems
    assert len(problems) == 1 and "Hunk #1 FAILED" in problems[0]


def test_resolver_fetches_under_a_deadline(tmp_path: Path) -> None:
    """Online: URL.patch from a loopback forge, kept in the mirror; a forge that never answers
    ends at the deadline with a recorded reason."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    commit = "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678"
    body = (
        f"From {commit} Mon Sep 17 00:00:00 2001\n\n" + (answers.CPARSE / "fix.patch").read_text()
    )
    release = threading.Event()

    class Forge(BaseHTTPRequestHandler):
        def log_message(self, *a: object) -> None:
            pass

        def do_GET(self) -> None:
            if "slow" in self.path:
                release.wait(30)
                return
            raw = body.encode()
            self.send_response(200 if self.path.endswith(f"{commit}.patch") else 404)
            self.send_header("content-length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Forge)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, args=(0.02,), daemon=True).start()
    try:
        base = f"http://127.0.0.1:{srv.server_address[1]}"
        mirror = tmp_path / "mirror"
        ref = resolve(f"{base}/o/r/commit/{commit}", mirror, SRC, fetch=True, deadline_s=5)
        assert ref.grounded and ref.source == f"{base}/o/r/commit/{commit}.patch"
        assert (mirror / f"{commit}.patch").read_text() == body
        slow = resolve(f"{base}/slow/commit/{commit}", None, SRC, fetch=True, deadline_s=0.5)
        assert not slow.grounded and slow.problems[0].startswith("upstream-patch-not-fetched")
    finally:
        release.set()
        srv.shutdown()
        srv.server_close()


def test_draft_never_overwrites_a_hand_written_candidate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import shutil

    from engine.cli import main

    fork = tmp_path / "fork"
    shutil.copytree(answers.FIXTURE, fork, ignore=shutil.ignore_patterns(".trace"))
    cand = fork / "trace/candidates/cparse-key-overflow/candidate.toml"
    before = (cand.parent / "fix.patch").read_bytes()
    assert main(["draft", str(cand), "--fork", str(fork)]) == 2
    assert "would overwrite" in capsys.readouterr().err
    assert (cand.parent / "fix.patch").read_bytes() == before
    assert not (cand.parent / "draft.json").exists()


MODEL_FIX = """--- a/cparse.c
+++ b/cparse.c
@@ -14,2 +14,4 @@ static int parse_line(const char *line)
     size_t klen = (size_t)(eq - line);
+    if (klen >= KEY_MAX)
+        return 0;
     char *key = malloc(KEY_MAX);
"""
BIGGER_BUFFER = """--- a/cparse.c
+++ b/cparse.c
@@ -3 +3 @@
-#define KEY_MAX 16
+#define KEY_MAX 64
"""


def test_the_accuracy_comparison_of_two_patches() -> None:
    """Functions from the hunk headers, lines of the original each changes, their overlap; a
    recorded comparison is shown for the patch it was made of and called stale for another."""
    from engine.roles.compare import Verdicts, compare, recorded_summary

    both = Verdicts(model_ok=True, upstream_ok=True, same_tree=True)
    same = compare(MODEL_FIX, MODEL_FIX, both)
    assert same.identical and same.line_overlap == 1.0 and same.same_files
    assert same.summary == "model passes, upstream passes; identical post-fix trees"
    assert same.model.functions == ["parse_line"] and same.model.lines == {"cparse.c": [15]}
    # issue 27: the same changed lines placed elsewhere are not "identical": only equal
    # post-fix trees are, and the textual overlap is all that is said otherwise
    moved = compare(MODEL_FIX, MODEL_FIX, both.model_copy(update={"same_tree": False}))
    assert not moved.identical and moved.summary.endswith("; line overlap 1")
    # ... and a patch the gates deny does not "pass": its codes are named, and the
    # differential gate's finding is the behaviour column
    denied = Verdicts(
        model_ok=False,
        upstream_ok=True,
        model_reasons=["mutation-score-below-threshold", "variant-still-fails"],
        same_tree=False,
        behaviour="3 invocation(s) behave unlike the upstream fix",
    )
    other = compare(BIGGER_BUFFER, MODEL_FIX, denied)
    assert not other.identical and other.line_overlap == 0.0
    assert other.summary == (
        "model fails (mutation-score-below-threshold, variant-still-fails), upstream passes; "
        "line overlap 0; behaviour: 3 invocation(s) behave unlike the upstream fix"
    )
    other = compare(BIGGER_BUFFER, MODEL_FIX, Verdicts(model_ok=False, upstream_ok=True))
    assert other.summary == "model fails, upstream passes; line overlap 0"
    assert "-#define KEY_MAX 16" in other.diff and "+    if (klen >= KEY_MAX)" in other.diff
    doc = other.model_dump(mode="json", by_alias=True)
    assert recorded_summary(doc, BIGGER_BUFFER) == [
        "model fails, upstream passes; line overlap 0",
        "model: cparse.c:3",
        "upstream: cparse.c:15 (parse_line)",
    ]
    assert recorded_summary(doc, MODEL_FIX) == ["stale: made for another patch (draft again)"]
    assert recorded_summary({}, MODEL_FIX) == [] and recorded_summary(None) == []
