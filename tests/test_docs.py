"""The documentation is tested like code (issue 29): README.md, ARCHITECTURE.md and docs/*.md.

Conventions, for whoever writes a page:
- a ```console block is a transcript: each `$ ` line is a command and the lines under it are
  output it must print, in order (other lines may come between; `…` stands for any text; runs
  of spaces match any run of spaces). It runs with bash in a scratch copy of the repository's
  graphs/, templates/, policy/ and tests/fixtures/, with the venv's `trace` first on PATH.
  Keep them cheap (seconds): longer examples run in their own tests (test_demo,
  test_flake_readme, test_draft_readme);
- every `trace ...` command shown (a line of a ```sh or ```console block, or an inline code span)
  must be a command of `trace --help`, and every flag shown one of that command's options;
- every ```toml block parses; on the pages of a file format it also validates with trace's own
  model of that format (pipeline, candidate, machine config, agent models);
- the site builds with `mkdocs build --strict` (scripts/docs) and has a page for every file.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import tomli

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
BIN = Path(sys.executable).parent
FENCE = re.compile(r"^```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^```[ \t]*$", re.M | re.S)
SPAN = re.compile(r"`(trace [^`]+)`")
FLAG = re.compile(r"(?<![\w./$-])(--?[A-Za-z][\w-]*)")
STEP = "@@docs-step"


def pages() -> list[Path]:
    return [REPO / "README.md", REPO / "ARCHITECTURE.md", *sorted(DOCS.glob("*.md"))]


def blocks(text: str, lang: str) -> list[str]:
    return [m["body"] for m in FENCE.finditer(text) if m["lang"] == lang]


# ---- `trace ...` commands shown exist, with the flags shown --------------------------------------


def shown_commands(text: str) -> Iterator[str]:
    """Every `trace ...` invocation a page shows: block lines and inline code spans."""
    for lang in ("sh", "console"):
        for body in blocks(text, lang):
            for line in body.replace("\\\n", " ").splitlines():
                line = line.strip().removeprefix("$ ")
                if line.startswith("trace "):
                    yield " ".join(re.sub(r"\s#.*$", "", line).split())
    prose = FENCE.sub("", text)
    for m in SPAN.finditer(prose):
        yield " ".join(m[1].split())


@cache
def help_of(command: str) -> str | None:
    """`trace COMMAND --help` (or `trace --help` for ""), None for a command trace does not have."""
    from engine.cli import main

    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            main([command, "--help"] if command else ["--help"])
    except SystemExit as exc:
        return out.getvalue() if exc.code == 0 else None
    return None


def options_of(help_text: str) -> set[str]:
    """The option strings argparse lists (`  -j JOBS, --jobs JOBS   ...` lines)."""
    found: set[str] = {"-h", "--help"}
    for line in help_text.splitlines():
        m = re.match(r"^\s+(-\S.*?)(?:\s{2,}|$)", line)
        if m:
            found |= set(FLAG.findall(m[1]))
    return found


def command_problems(shown: str) -> list[str]:
    words = shown.split()
    command = "" if len(words) < 2 or words[1].startswith("-") else words[1]
    if command.isupper():  # a placeholder: `trace COMMAND`
        return []
    text = help_of(command)
    if text is None:
        return [f"`{shown}`: trace has no command '{command}'"]
    known = options_of(text)
    flags = [f for f in FLAG.findall(shown) if f != "--"]
    return [f"`{shown}`: `trace {command}` has no option {f}" for f in flags if f not in known]


def test_every_trace_command_shown_exists_with_the_flags_shown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    problems = [
        f"{page.relative_to(REPO)}: {p}"
        for page in pages()
        for shown in shown_commands(page.read_text(encoding="utf-8"))
        for p in command_problems(shown)
    ]
    assert problems == []
    shown = {s.split()[1] for page in pages() for s in shown_commands(page.read_text())}
    assert {"run", "plan", "verify", "verify-bundle", "fork", "draft", "push"} <= shown


def test_the_command_check_catches_a_misspelt_command_and_an_unknown_flag(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    page = (
        "Run `trace verfy C.toml` or `trace run G --json -j 2`.\n\n"
        "```sh\ntrace run g.toml --no-such-flag   # a comment --not-a-flag\n"
        "trace fork --shard 1/2 -- NAME\n"
        "trace verify C.toml \\\n  --bundle B --no-such-option\n```\n"
        "`trace COMMAND` is a placeholder.\n"
    )
    problems = [p for s in shown_commands(page) for p in command_problems(s)]
    assert problems == [
        "`trace run g.toml --no-such-flag`: `trace run` has no option --no-such-flag",
        "`trace verify C.toml --bundle B --no-such-option`: `trace verify` has no option "
        "--no-such-option",
        "`trace verfy C.toml`: trace has no command 'verfy'",
    ]


# ---- ```toml blocks load with trace's own models -------------------------------------------------


def _pipeline(data: dict[str, Any]) -> None:
    from engine.spec import PipelineFile

    PipelineFile.model_validate(data)


def _candidates(data: dict[str, Any], base: dict[str, Any] | None) -> None:
    """A whole candidate, or an oracle fragment laid over the page's whole one."""
    from engine.candidate import CandidateFile

    if "id" not in data:
        assert base is not None, "a fragment needs a whole candidate earlier on its page"
        rest = {k: v for k, v in base.items() if k not in ("expect", "accept")}
        data = {**rest, "expect": base["expect"], **data}
    CandidateFile.model_validate(data)


def _machine(block: str, tmp: Path) -> None:
    from engine.machine import load_machine

    path = tmp / "machine.toml"
    path.write_text(block)
    load_machine(path)


def _agent_models(data: dict[str, Any]) -> None:
    from engine.models.model_spec import ModelSpec

    assert data.get("models"), "an agent block declares [models.NAME] tables"
    for spec in data["models"].values():
        ModelSpec.model_validate(spec)


def check_toml_page(page: Path, tmp: Path) -> int:
    base: dict[str, Any] | None = None
    found = blocks(page.read_text(encoding="utf-8"), "toml")
    for block in found:
        data = tomli.loads(block)
        if page.name == "pipeline.md":
            _pipeline(data)
        elif page.name in ("candidates.md", "README.md"):
            _candidates(data, base)
            base = base or (data if "id" in data else None)
        elif page.name == "machines.md":
            _machine(block, tmp)
        elif page.name == "agents.md":
            _agent_models(data)
    return len(found)


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.name)
def test_every_toml_block_parses_and_loads_with_its_format_model(
    page: Path, tmp_path: Path
) -> None:
    check_toml_page(page, tmp_path)


def test_the_format_pages_have_blocks_the_models_check() -> None:
    counts = {p.name: len(blocks(p.read_text(), "toml")) for p in pages()}
    assert counts["pipeline.md"] >= 1 and counts["candidates.md"] >= 5
    assert counts["README.md"] >= 1 and counts["machines.md"] == 1 and counts["agents.md"] == 1


@pytest.mark.parametrize(
    ("name", "block", "wrong"),
    [
        ("pipeline.md", "version = 1\n[steps.a]\nkind = 'text'\nrepeat = true\n", "repeat"),
        ("candidates.md", "[expect]\nexit_code = 'one'\n", "exit_code"),
        ("candidates.md", "[expect]\nsignl = 'SIGSEGV'\n", "signl"),
        ("agents.md", "[models.m]\nbackend = 'anthropc'\nmodel = 'x'\n", "backend"),
    ],
)
def test_a_wrong_block_fails_the_toml_check(
    tmp_path: Path, name: str, block: str, wrong: str
) -> None:
    from pydantic import ValidationError

    whole = blocks((DOCS / "candidates.md").read_text(), "toml")[0]
    body = (whole + "```\n\n```toml\n" if name == "candidates.md" else "") + block
    page = tmp_path / name
    page.write_text(f"# p\n\n```toml\n{body}```\n")
    with pytest.raises(ValidationError, match=wrong):
        check_toml_page(page, tmp_path)


# ---- ```console transcripts run and print what they show ----------------------------------------


def transcript(body: str) -> list[tuple[str, list[str]]]:
    """[(command, the output lines shown under it)]"""
    steps: list[tuple[str, list[str]]] = []
    for line in body.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif line.strip():
            assert steps, f"output before any command: {line!r}"
            steps[-1][1].append(line)
    return steps


def line_pattern(shown: str) -> re.Pattern[str]:
    """A shown line as a whole-line pattern: `…` is any text, a run of spaces any run."""
    words = [".*".join(re.escape(part) for part in word.split("…")) for word in shown.split()]
    return re.compile(r"\s+".join(words))


def missing_output(shown: list[str], printed: str) -> list[str]:
    """The shown lines not found, in order, among the printed ones."""
    lines = iter(line.strip() for line in printed.splitlines())
    return [s for s in shown if not any(line_pattern(s).fullmatch(line) for line in lines)]


def scratch_repo(tmp: Path) -> Path:
    work = tmp / "repo"
    for rel in ("graphs", "templates", "policy", "tests/fixtures"):
        shutil.copytree(REPO / rel, work / rel, symlinks=True)
    return work


def run_transcript(body: str, work: Path) -> list[tuple[str, str]]:
    steps = transcript(body)
    script = "exec 2>&1\n" + "".join(
        f"printf '\\n{STEP} %d\\n' {i}\n{cmd}\n" for i, (cmd, _) in enumerate(steps)
    )
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("TRACE_DATA_DIR", None)
    proc = subprocess.run(
        ["bash", "-e", "-c", script], cwd=work, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    outputs = re.split(rf"^{STEP} \d+$", proc.stdout, flags=re.M)[1:]
    return [(cmd, out) for (cmd, _), out in zip(steps, outputs, strict=True)]


def console_blocks() -> list[tuple[str, str]]:
    return [(p.name, b) for p in pages() for b in blocks(p.read_text(), "console")]


@pytest.mark.nix
@pytest.mark.parametrize(("page", "body"), console_blocks(), ids=lambda v: str(v)[:24])
def test_console_transcripts_print_what_they_show(page: str, body: str, tmp_path: Path) -> None:
    work = scratch_repo(tmp_path)
    ran = run_transcript(body, work)
    problems = [
        f"{page}: `$ {cmd}` did not print {missing}\n--- it printed:\n{out}"
        for (cmd, shown), (_, out) in zip(transcript(body), ran, strict=True)
        if (missing := missing_output(shown, out))
    ]
    assert problems == []


def test_the_transcript_check_fails_on_output_that_differs() -> None:
    assert missing_output(["3 steps: 3 cached"], "building x\n3 steps: 3 built\n") == [
        "3 steps: 3 cached"
    ]
    printed = "greet   748989611219  dirty  input 'greeting' changed\ncount  f98c  clean\n"
    assert missing_output(["greet   …  dirty  input 'greeting' changed", "count …"], printed) == []
    assert missing_output(["count …", "greet …"], printed) == ["greet …"], "order counts"
    assert missing_output(["greet"], printed) == ["greet"], "a shown line is a whole line"


def test_the_readme_has_a_transcript_of_the_engine() -> None:
    [body] = [b for page, b in console_blocks() if page == "README.md"]
    commands = [cmd for cmd, _ in transcript(body)]
    assert commands.count("trace run graphs/example.toml") == 2 and "trace plan" in commands[-1]


# ---- the README is a front door; the site builds ------------------------------------------------


def nav_pages() -> set[str]:
    """The pages mkdocs.yml's nav lists (the curated reference)."""
    import yaml

    nav = yaml.safe_load((REPO / "mkdocs.yml").read_text())["nav"]
    return {page for item in nav for page in item.values()}


def test_the_readme_is_short_and_links_every_reference_page() -> None:
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    linked = set(re.findall(r"\]\((docs/[\w-]+\.md)\)", text))
    listed = nav_pages() - {"index.md", "ARCHITECTURE.md"}
    assert {"pipeline.md", "candidates.md", "gates.md", "policy.md", "evidence.md"} <= listed
    assert {f"docs/{p}" for p in listed} <= linked
    assert "](ARCHITECTURE.md)" in text


def test_the_fork_block_of_docs_fork_is_the_readme_one_the_flake_test_runs() -> None:
    from tests.test_flake_readme import readme_fork_script

    [first] = blocks((DOCS / "fork.md").read_text(), "sh")[:1]
    assert first == readme_fork_script()


def build_site(src: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "mkdocs"), "build", "--strict", "--site-dir", str(out)],
        cwd=src,
        capture_output=True,
        text=True,
        timeout=120,
    )


def site_sources(src: Path) -> Path:
    """A copy of what the site is built from."""
    for rel in ("docs", "scripts"):
        shutil.copytree(REPO / rel, src / rel)
    for rel in ("mkdocs.yml", "README.md", "ARCHITECTURE.md"):
        shutil.copy2(REPO / rel, src / rel)
    return src


def test_scripts_docs_builds_a_page_for_every_file(tmp_path: Path) -> None:
    out = tmp_path / "site"
    proc = subprocess.run(
        [str(REPO / "scripts" / "docs"), str(out)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    built = {p.name for p in out.glob("*.html")}
    assert {f"{p.stem}.html" for p in DOCS.glob("*.md")} | {
        "index.html",
        "ARCHITECTURE.html",
    } <= built
    home = (out / "index.html").read_text()
    assert "A five-minute tour" in home and 'href="gates.html"' in home
    assert 'href="docs/' not in home, "the README's links are rewritten for the site"
    assert "report-denied.png" in (out / "reports.html").read_text()
    assert (out / "report-denied.png").is_file()


def test_a_broken_link_or_anchor_fails_the_strict_build(tmp_path: Path) -> None:
    src = site_sources(tmp_path / "src")
    gates = src / "docs" / "gates.md"
    gates.write_text(
        gates.read_text()
        + "\nSee [the policy](policy.md#no-such-heading) and [the other](polcy.md).\n"
    )
    proc = build_site(src, tmp_path / "site")
    assert proc.returncode != 0
    assert "no-such-heading" in proc.stderr and "polcy.md" in proc.stderr, proc.stderr


def test_a_page_the_nav_does_not_list_yet_is_built_and_reachable(tmp_path: Path) -> None:
    src = site_sources(tmp_path / "src")
    (src / "docs" / "new-page.md").write_text("# A page added in parallel\n\nText.\n")
    proc = build_site(src, tmp_path / "site")
    assert proc.returncode == 0, proc.stderr
    home = (tmp_path / "site" / "index.html").read_text()
    assert 'href="new-page.html"' in home and "A page added in parallel" in home
