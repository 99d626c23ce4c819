"""The detector gate, part 1: constructs in a patch that blind the detector.

A fix must make the bug go away, not the instrument that shows it. `RULES` is the table, one
row per construct: the language of the files it applies to, the side of the diff it reads
(`+` an added line, `-` a removed line), the pattern and what the construct does. A `-` row is
the removal of a flag from a build file: it matches only when the same flag is not added back
in the same file (a reflowed line is no removal). tests/test_gates_detector.py holds one
positive and one negative case per row.

Languages are the files' kinds (`language_of`): `c` (C, C++ and Objective-C sources and
headers), `build` (Makefiles, CMake, Meson, autoconf/automake, the package's .nix), `python`,
`shell`; `any` rows read every file.

Stdlib only: runs in the sandbox as part of the detector gate.
"""

from __future__ import annotations

import fnmatch
import posixpath
import re

from ._dataclasses import dataclass
from .diff import FileDiff

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Literal

    Side = Literal["+", "-"]
else:  # plain strings at run time: the gates import no `typing` (a process's start-up)
    Side = str


@dataclass(frozen=True)
class Rule:
    """One detector-blinding rule: a pattern of one language on one side of the patch."""

    language: str
    side: Side
    pattern: re.Pattern[str]
    meaning: str


def _rule(language: str, side: Side, pattern: str, meaning: str) -> Rule:
    return Rule(language, side, re.compile(pattern), meaning)


SANITIZER_OPTIONS = r"\b[A-Z]*SAN_OPTIONS\b"

RULES: tuple[Rule, ...] = (
    # C and C++ sources
    _rule(
        "c",
        "+",
        r"no_sanitize|no_address_safety_analysis|disable_sanitizer_instrumentation",
        "a no_sanitize attribute: the function is compiled without the sanitizer's checks",
    ),
    _rule(
        "c",
        "+",
        r"__(?:a|ub|l|m|t|hwa)san_default_options\b",
        "a sanitizer's default-options hook: the program sets its own sanitizer options",
    ),
    _rule(
        "c",
        "+",
        r"\b(?:setenv|putenv|_putenv|SetEnvironmentVariable\w*)\s*\(.*SAN_OPTIONS",
        "sanitizer options set from code",
    ),
    _rule(
        "c",
        "+",
        r"__(?:asan|msan|hwasan)_unpoison_memory_region|\b(?:ASAN|MSAN)_UNPOISON_MEMORY_REGION\b",
        "memory unpoisoned by hand: accesses to it are no longer reported",
    ),
    _rule(
        "c",
        "+",
        r"__sanitizer_set_death_callback|__sanitizer_set_report_(?:path|fd)|"
        r"__asan_set_error_report_callback|__asan_set_death_callback",
        "the sanitizer's report or death redirected from code",
    ),
    _rule(
        "c",
        "+",
        r"#\s*pragma\b.*\b(?:sanitize|optimize|attribute\s+push)\b",
        "a pragma that changes how the code is compiled or instrumented",
    ),
    # any file: flags and options that weaken a sanitizer
    _rule(
        "any",
        "+",
        r"-fno-sanitize\b|-fno-sanitize[=-]",
        "-fno-sanitize: a sanitizer, or its checks, switched off",
    ),
    _rule(
        "any",
        "+",
        r"--param[= ]+\s*(?:asan|hwasan|tsan|msan|ubsan)-",
        "--param asan-*: the sanitizer's instrumentation tuned (e.g. writes not checked)",
    ),
    _rule(
        "any",
        "+",
        r"-fsanitize-(?:recover|ignorelist|blacklist)\b|-fsanitize-address-use-after-scope=0",
        "a sanitizer's errors made non-fatal, or code excluded from it",
    ),
    _rule("any", "+", SANITIZER_OPTIONS, "sanitizer options set by the patch"),
    # build files: the sanitizer flag removed
    _rule(
        "build",
        "-",
        r"-fsanitize=[\w,-]+",
        "-fsanitize removed from the build: the code is no longer instrumented",
    ),
    # Python: hooks and filters that hide a failure
    _rule(
        "python",
        "+",
        r"\bsys\.addaudithook\s*\(",
        "an audit hook: the runtime's events intercepted",
    ),
    _rule(
        "python",
        "+",
        r"\b(?:sys|threading)\.(?:settrace|setprofile)\s*\(",
        "a trace or profile hook: execution intercepted",
    ),
    _rule(
        "python",
        "+",
        r"\bwarnings\.(?:filterwarnings|simplefilter)\s*\(\s*(?:action\s*=\s*)?[\"']ignore",
        "warnings ignored: the failure's warning hidden",
    ),
    _rule("python", "+", r"\bfaulthandler\.disable\s*\(", "the fault handler switched off"),
    _rule(
        "python",
        "+",
        r"\bsys\.(?:excepthook|unraisablehook)\s*=",
        "the interpreter's error report replaced",
    ),
    # outside campaign (issue 25): the crash caught, or its report thrown away, at run time
    _rule(
        "c",
        "+",
        r"\b(?:signal|sigaction|sigset|bsd_signal)\s*\(\s*SIG(?:SEGV|BUS|ABRT|FPE|ILL|TRAP)\b",
        "a fatal signal's handler installed: the crash is caught instead of reported",
    ),
    _rule(
        "c",
        "+",
        r"\bdup2\s*\([^;]*,\s*(?:2|STDERR_FILENO|fileno\s*\(\s*stderr\s*\))\s*\)"
        r"|\bfreopen\s*\([^;]*\bstderr\s*\)|\bclose\s*\(\s*(?:2|STDERR_FILENO)\s*\)",
        "the error stream closed or redirected from code: the sanitizer's report is lost",
    ),
)

C_EXT = ("*.c", "*.h", "*.cc", "*.cpp", "*.cxx", "*.c++", "*.hh", "*.hpp", "*.hxx", "*.inc", "*.m")
BUILD_NAMES = (
    "Makefile",
    "makefile",
    "GNUmakefile",
    "Makefile.*",
    "*.mk",
    "*.mak",
    "*.am",
    "CMakeLists.txt",
    "*.cmake",
    "meson.build",
    "meson_options.txt",
    "meson.options",
    "configure",
    "configure.ac",
    "configure.in",
    "*.m4",
    "*.nix",
    "SConstruct",
    "SConscript",
    "*.ninja",
    "build.sh",
    "*.gyp",
    "*.gn",
    "*.bazel",
    "BUILD",
)


def language_of(path: str) -> str:
    name = posixpath.basename(path)
    for lang, globs in (("c", C_EXT), ("build", BUILD_NAMES)):
        if any(fnmatch.fnmatchcase(name, g) for g in globs):
            return lang
    if name.endswith(".py"):
        return "python"
    if name.endswith((".sh", ".bash")):
        return "shell"
    return "other"


@dataclass(frozen=True)
class Finding:
    """A line of the patch a blinding rule matched."""

    file: str
    line: int | None
    side: Side
    text: str
    meaning: str

    def as_dict(self) -> dict[str, object]:
        return {
            "file": self.file,
            "line": self.line,
            "side": self.side,
            "text": self.text.strip(),
            "meaning": self.meaning,
        }


def _applies(rule: Rule, lang: str) -> bool:
    return rule.language in ("any", lang)


def file_findings(f: FileDiff) -> list[Finding]:
    """Every row that matches a line of this file's diff (one finding per line and row)."""
    lang = language_of(f.path)
    added = [ln.text for ln in f.added]
    out: list[Finding] = []
    for rule in RULES:
        if not _applies(rule, lang):
            continue
        lines = f.added if rule.side == "+" else f.removed
        for ln in lines:
            m = rule.pattern.search(ln.text)
            if m is None:
                continue
            if rule.side == "-" and any(m.group(0) in a for a in added):
                continue  # the flag is still there (a reflowed or edited line)
            no = ln.new_no if rule.side == "+" else ln.old_no
            out.append(Finding(f.path, no, rule.side, ln.text, rule.meaning))
    return out


def scan(files: list[FileDiff]) -> list[Finding]:
    return [finding for f in files for finding in file_findings(f)]
