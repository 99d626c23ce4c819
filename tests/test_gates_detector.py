"""The detector gate (issue 25): a patch must not be able to switch off the sanitizer.

One positive and one negative case per row of the blinding table (trace_sandbox/gates/blinding.py
RULES), the flag comparison per translation unit on recorder logs, the binary check on real
gcc builds (instrumented.py, with the host's binutils), and the whole record."""

from __future__ import annotations

import json
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from engine.build_records import GateRecord
from trace_sandbox.gates import blinding, ccflags, detector, instrumented
from trace_sandbox.gates.diff import parse

REPO = Path(__file__).resolve().parent.parent


def diff(path: str, removed: list[str], added: list[str]) -> str:
    head = [f"diff --git a/{path} b/{path}", f"--- a/{path}", f"+++ b/{path}"]
    body = [f"-{x}" for x in removed] + [f"+{x}" for x in added]
    return "\n".join([*head, f"@@ -1,{len(removed)} +1,{len(added)} @@", *body]) + "\n"


# row index of RULES -> (file, removed, added) that it must match, and a near miss it must not
CASES: dict[int, tuple[tuple[str, list[str], list[str]], tuple[str, list[str], list[str]]]] = {
    0: (
        ("src/parse.c", [], ["__attribute__((no_sanitize_address))"]),
        ("src/parse.c", [], ["static int sanitize_input(const char *s);"]),
    ),
    1: (
        ("src/main.c", [], ['const char *__asan_default_options(void) { return "halt=0"; }']),
        ("src/main.c", [], ["const char *default_options(void);"]),
    ),
    2: (
        ("src/main.c", [], ['    setenv("ASAN_OPTIONS", "detect_leaks=0", 1);']),
        ("src/main.c", [], ['    setenv("LANG", "C", 1);']),
    ),
    3: (
        ("src/buf.c", [], ["    __asan_unpoison_memory_region(buf, n);"]),
        ("src/buf.c", [], ["    memset(buf, 0, n); /* poison nothing */"]),
    ),
    4: (
        ("src/main.c", [], ["    __sanitizer_set_death_callback(quiet_exit);"]),
        ("src/main.c", [], ["    atexit(quiet_exit);"]),
    ),
    5: (
        ("src/parse.c", [], ['#pragma GCC optimize ("O0")']),
        ("src/parse.c", [], ["#pragma once"]),
    ),
    6: (
        ("Makefile", [], ["CFLAGS += -fno-sanitize=address"]),
        ("Makefile", [], ["CFLAGS += -fsanitize=address"]),
    ),
    7: (
        ("CMakeLists.txt", [], ["add_compile_options(--param asan-instrument-writes=0)"]),
        ("CMakeLists.txt", [], ["add_compile_options(--param max-inline-insns-single=100)"]),
    ),
    8: (
        ("meson.build", [], ["add_project_arguments('-fsanitize-recover=address', language: 'c')"]),
        ("meson.build", [], ["add_project_arguments('-fsanitize=address', language: 'c')"]),
    ),
    9: (
        ("tests/run.sh", [], ["export ASAN_OPTIONS=halt_on_error=0"]),
        ("tests/run.sh", [], ["export LC_ALL=C"]),
    ),
    10: (
        ("Makefile", ["CFLAGS = -fsanitize=address -g"], ["CFLAGS = -g"]),
        ("Makefile", ["CFLAGS = -fsanitize=address -g"], ["CFLAGS = -fsanitize=address -g -Wall"]),
    ),
    11: (
        ("pkg/core.py", [], ["sys.addaudithook(hook)"]),
        ("pkg/core.py", [], ["audit_log.append(hook)"]),
    ),
    12: (
        ("pkg/core.py", [], ["    sys.settrace(None)"]),
        ("pkg/core.py", [], ["    sys.setrecursionlimit(10000)"]),
    ),
    13: (
        ("pkg/core.py", [], ['warnings.filterwarnings("ignore", category=BytesWarning)']),
        ("pkg/core.py", [], ['warnings.filterwarnings("error", category=BytesWarning)']),
    ),
    14: (
        ("pkg/core.py", [], ["faulthandler.disable()"]),
        ("pkg/core.py", [], ["faulthandler.enable()"]),
    ),
    15: (
        ("pkg/core.py", [], ["sys.excepthook = lambda *a: None"]),
        ("pkg/core.py", [], ["sys.excepthook(*sys.exc_info())"]),
    ),
    # outside campaign (issue 25): the crash caught or its report thrown away at run time
    16: (
        ("src/main.c", [], ["    signal(SIGSEGV, quiet_exit);"]),
        ("src/main.c", [], ["    signal(SIGPIPE, SIG_IGN);"]),
    ),
    17: (
        ("src/main.c", [], ["    dup2(devnull, STDERR_FILENO);"]),
        ("src/main.c", [], ["    dup2(pipefd[1], STDOUT_FILENO);"]),
    ),
}


def test_the_error_stream_and_fatal_signals_in_every_spelling() -> None:
    report = blinding.RULES[17].meaning
    for line in ['freopen("/dev/null", "w", stderr);', "close(2);", "dup2(fd, 2);"]:
        assert _meanings(("src/main.c", [], [f"    {line}"])) == [report], line
    assert _meanings(("src/main.c", [], ["    sigaction(SIGABRT, &sa, NULL);"])) == [
        blinding.RULES[16].meaning
    ]


def test_every_row_of_the_table_has_its_cases() -> None:
    assert sorted(CASES) == list(range(len(blinding.RULES)))


def _meanings(case: tuple[str, list[str], list[str]]) -> list[str]:
    files = parse(diff(*case)).files
    return [f.meaning for f in blinding.scan(files)]


@pytest.mark.parametrize("row", range(len(blinding.RULES)))
def test_a_row_matches_its_construct(row: int) -> None:
    positive, _ = CASES[row]
    assert blinding.RULES[row].meaning in _meanings(positive)


@pytest.mark.parametrize("row", range(len(blinding.RULES)))
def test_a_row_leaves_the_near_miss_alone(row: int) -> None:
    _, negative = CASES[row]
    assert _meanings(negative) == []


def test_a_rule_reads_only_its_language() -> None:
    # a C attribute's name in a Python comment, a Python hook's name in a C file: not theirs
    assert _meanings(("pkg/core.py", [], ["# no_sanitize_address is C's"])) == []
    assert _meanings(("src/x.c", [], ["/* sys.settrace( */"])) == []
    # -fsanitize= removed from a C source (a comment) is no build-file removal
    assert _meanings(("src/x.c", ["/* -fsanitize=address */"], [])) == []


def test_the_fixture_correct_fix_has_no_finding() -> None:
    text = (REPO / "tests/fixtures/fork/trace/candidates/cparse-key-overflow/fix.patch").read_text()
    assert blinding.scan(parse(text).files) == []


# ---- flags per translation unit ------------------------------------------------------------


def log(*calls: tuple[list[str], str]) -> str:
    """A recorder log: each call (argv, NIX_CFLAGS_COMPILE) from /build/source."""
    out = []
    for args, cflags in calls:
        out += ["call cc", "cwd /build/source", f"env NIX_CFLAGS_COMPILE {cflags}"]
        out += ["env NIX_CFLAGS_LINK ", "env NIX_LDFLAGS "]
        out += [f"arg {a}" for a in args] + ["end"]
    return "\n".join(out) + "\n"


ASAN = ["-fsanitize=address", "-g", "-O0"]


def test_the_same_flags_are_no_change() -> None:
    pre = log((["-c", "a.c", *ASAN], ""), (["-o", "prog", "a.o", "-fsanitize=address"], ""))
    assert ccflags.compare(pre, pre) == []


def test_a_dropped_sanitizer_is_a_weakened_unit() -> None:
    pre = log((["-c", "a.c", *ASAN], ""), (["-c", "b.c", *ASAN], ""))
    post = log((["-c", "a.c", *ASAN], ""), (["-c", "b.c", "-g"], ""))
    [d] = ccflags.compare(pre, post)
    assert d["unit"] == "source/b.c"
    assert d["changes"] == ["-fsanitize=address dropped"]


def test_a_param_and_a_later_no_sanitize_are_weakening() -> None:
    pre = log((["-c", "a.c", *ASAN], ""))
    param = log((["-c", "a.c", *ASAN, "--param", "asan-instrument-writes=0"], ""))
    assert ccflags.compare(pre, param)[0]["changes"] == [
        "--param asan-instrument-writes: (default) -> 0"
    ]
    later = log((["-c", "a.c", *ASAN, "-fno-sanitize=address"], ""))
    assert ccflags.compare(pre, later)[0]["changes"] == ["-fsanitize=address dropped"]
    recover = log((["-c", "a.c", *ASAN, "-fsanitize-recover=address"], ""))
    assert ccflags.compare(pre, recover)[0]["changes"] == ["-fsanitize-recover=address added"]


def test_stricter_or_unrelated_flags_are_no_change() -> None:
    pre = log((["-c", "a.c", *ASAN], ""))
    post = log((["-c", "a.c", *ASAN, "-O2", "-Wall", "-fno-sanitize-recover=all"], ""))
    assert ccflags.compare(pre, post) == []


def test_flags_from_the_cc_wrapper_variables_count() -> None:
    # nixpkgs' cc-wrapper adds NIX_CFLAGS_COMPILE to every call: the flag may live there
    pre = log((["-c", "a.c", "-g"], "-fsanitize=address"))
    assert ccflags.compare(pre, pre) == []
    post = log((["-c", "a.c", "-g"], ""))
    assert ccflags.compare(pre, post)[0]["changes"] == ["-fsanitize=address dropped"]


def test_a_unit_no_longer_compiled_through_the_recorder_is_weakened() -> None:
    pre = log((["-c", "a.c", *ASAN], ""), (["-c", "b.c", *ASAN], ""))
    post = log((["-c", "a.c", *ASAN], ""))
    [d] = ccflags.compare(pre, post)
    assert (d["unit"], d["post"]) == ("source/b.c", None)


def test_a_new_unit_must_have_the_sanitizers_every_old_unit_had() -> None:
    pre = log((["-c", "a.c", *ASAN], ""), (["-o", "prog", "a.o", "-fsanitize=address"], ""))
    moved = log(
        (["-c", "a.c", *ASAN], ""),
        (["-c", "helper.c", "-g"], ""),  # the faulting code moved here, uninstrumented
        (["-o", "prog", "a.o", "helper.o", "-fsanitize=address"], ""),
    )
    [d] = ccflags.compare(pre, moved)
    assert (d["unit"], d["pre"]) == ("source/helper.c", None)
    added = log(
        (["-c", "a.c", *ASAN], ""),
        (["-c", "helper.c", *ASAN], ""),
        (["-o", "prog", "a.o", "helper.o", "-fsanitize=address"], ""),
    )
    assert ccflags.compare(pre, added) == []
    # where some pre-fix unit was not instrumented either, a new plain unit is no finding
    mixed = log((["-c", "a.c", *ASAN], ""), (["-c", "tool.c", "-g"], ""))
    assert ccflags.compare(mixed, mixed + log((["-c", "new.c", "-g"], ""))) == []


def test_a_unit_compiled_twice_counts_its_weakest_call() -> None:
    pre = log((["-c", "a.c", *ASAN], ""))
    post = log((["-c", "a.c", *ASAN], ""), (["-c", "a.c", "-g"], ""))
    assert ccflags.compare(pre, post)[0]["changes"] == ["-fsanitize=address dropped"]


def test_the_log_reader_keeps_an_argument_with_a_newline() -> None:
    text = "call gcc\ncwd /build/source/sub\narg -DX=a\nb\narg ../x.c\nend\n"
    [call] = ccflags.parse_log(text)
    assert call.args == ["-DX=a\nb", "../x.c"]
    assert ccflags.units(call) == ["source/x.c"]


# ---- the binary: functions of the failing stack ---------------------------------------------

SRC = """#include <stdlib.h>
%s int put(char *p, int i) { p[i] = 1; return p[0]; }
int main(int argc, char **argv) { char *p = malloc(4); int r = put(p, argc); free(p); return r; }
"""


def _build(tmp: Path, name: str, attr: str, flags: list[str]) -> Path:
    out = tmp / name / "bin"
    out.mkdir(parents=True)
    src = tmp / f"{name}.c"
    src.write_text(SRC % attr)
    subprocess.run(["gcc", "-g", "-O0", *flags, "-o", str(out / "prog"), str(src)], check=True)
    return tmp / name


@pytest.mark.skipif(not shutil.which("gcc"), reason="needs gcc")
def test_a_function_that_lost_its_checks_is_found(tmp_path: Path) -> None:
    tools = instrumented.find_tools(None)
    assert tools is not None, "binutils (nm, objdump) needed"
    asan = ["-fsanitize=address"]
    pre = _build(tmp_path, "pre", "", asan)
    same = _build(tmp_path, "same", "", asan)
    attr = _build(tmp_path, "attr", "__attribute__((no_sanitize_address))", asan)
    lost, table = instrumented.compare(tools, str(pre), str(same), ["put", "main"])
    assert lost == []
    assert table[0] == {"function": "put", "pre": ["load", "store"], "post": ["load", "store"]}
    lost, _ = instrumented.compare(tools, str(pre), str(attr), ["put", "main"])
    assert [r["function"] for r in lost] == ["put"]
    plain = _build(tmp_path, "plain", "", [])
    lost, _ = instrumented.compare(tools, str(pre), str(plain), ["put", "missing"])
    assert [r["function"] for r in lost] == ["put"]


def _fake_nm(tmp: Path, name: str, body: str) -> instrumented.Tools:
    """A stand-in nm (a shell script) that logs its arguments; objdump is never called here."""
    nm = tmp / name
    nm.write_text(f'#!/bin/sh\necho "$*" >> {tmp / (name + ".log")}\n{body}\n')
    nm.chmod(0o755)
    return instrumented.Tools(str(nm), "/nonexistent-objdump")


def test_nm_is_asked_without_the_linker_plugins(tmp_path: Path) -> None:
    # GNU nm's default `plugin` target loads every bfd plugin (a host's LLVMgold: all of
    # libLLVM) for each file; `--target=default` reads an ELF file the same without them
    tools = _fake_nm(tmp_path, "nm", 'echo "0000000000001139 T put"')
    assert instrumented.defined(tools, "/some/prog") == {"put"}
    calls = (tmp_path / "nm.log").read_text().splitlines()
    assert calls == ["--target=default --defined-only /some/prog"]


def test_an_nm_that_refuses_the_target_option_is_asked_again_without_it(tmp_path: Path) -> None:
    refuses = 'case "$1" in --target=*) echo "unknown option" >&2; exit 1;; esac\n'
    tools = _fake_nm(tmp_path, "other-nm", refuses + 'echo "0000000000001139 t put.part.0"')
    assert instrumented.defined(tools, "/some/prog") == {"put.part.0"}
    calls = (tmp_path / "other-nm.log").read_text().splitlines()
    assert calls == ["--target=default --defined-only /some/prog", "--defined-only /some/prog"]


@pytest.mark.skipif(not shutil.which("gcc"), reason="needs gcc")
def test_the_host_nm_lists_the_same_symbols_with_the_default_target(tmp_path: Path) -> None:
    tools = instrumented.find_tools(None)
    assert tools is not None, "binutils (nm, objdump) needed"
    prog = str(_build(tmp_path, "pre", "", ["-fsanitize=address"]) / "bin" / "prog")
    plain = subprocess.run([tools.nm, "--defined-only", prog], capture_output=True, text=True)
    assert " T put\n" in plain.stdout
    assert instrumented._nm(tools, prog) == plain.stdout


# ---- the record ---------------------------------------------------------------------------


def _config(tmp: Path, pre_log: str, post_log: str, patch: str) -> dict[str, object]:
    builds = {}
    for side, text in (("pre", pre_log), ("post", post_log)):
        (tmp / side / "nix-support").mkdir(parents=True)
        (tmp / side / "nix-support" / "trace-cc.log").write_text(text)
        builds[side] = str(tmp / side)
    (tmp / "fix.patch").write_text(patch)
    policy = json.dumps({"name": "p", "version": "1", "thresholds": {}})
    return {
        "patches": [str(tmp / "fix.patch")],
        "pre_build": builds["pre"],
        "post_build": builds["post"],
        "pre": [],
        "policy": policy,
    }


def test_a_clean_patch_passes_and_says_what_it_could_not_measure(tmp_path: Path) -> None:
    pre = log((["-c", "a.c", *ASAN], ""))
    cfg = _config(tmp_path, pre, pre, diff("a.c", ["  return x;"], ["  return y;"]))
    rec = detector.evaluate(cfg)
    GateRecord.model_validate(rec)
    assert (rec["passed"], rec["reasons"]) == (True, [])
    assert rec["details"]["units"] == {"source/a.c": "-fsanitize=address"}
    assert rec["details"]["not_measured"] == [
        "functions: the pre-fix failure left no native stack of the package's own"
    ]


def test_weakened_flags_deny_with_the_unit_in_the_record(tmp_path: Path) -> None:
    pre = log((["-c", "a.c", *ASAN], ""))
    post = log((["-c", "a.c", "-g"], ""))
    cfg = _config(tmp_path, pre, post, diff("a.c", ["  return x;"], ["  return y;"]))
    rec = detector.evaluate(cfg)
    assert (rec["passed"], rec["reasons"]) == (False, ["detector-weakened"])
    assert rec["details"]["flags"][0]["unit"] == "source/a.c"
    assert "source/a.c: -fsanitize=address dropped" in rec["details"]["summary"]


def test_detector_weakened_is_catalogued_and_not_waivable() -> None:
    catalogue = tomllib.loads((REPO / "policy" / "reasons.toml").read_text())
    [row] = [r for r in catalogue["reasons"] if r["code"] == detector.CODE]
    assert row["waivable"] is False
    signing = tomllib.loads((REPO / "policy" / "signing.toml").read_text())
    assert signing["gates"]["detector"]["required"] is True
