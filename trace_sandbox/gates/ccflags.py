"""The detector gate, part 2: the sanitizer and coverage flags of every compile, pre vs post.

Both builds record each compiler call (templates/verify/cc-record: argv, cwd and the
cc-wrapper's flag variables, in $out/nix-support/trace-cc.log). A call's translation units are
its source arguments (by extension, relative to the build directory); a call without one is a
link, keyed by its `-o` output. The flags that matter are the instrument's: the sanitizers
(`-fsanitize=`/`-fno-sanitize=` applied in order, so the last word wins), `--param` asan-*
(and the other sanitizers' params), `-fsanitize-recover`/ignorelists, and the coverage flags
(`--coverage`, `-fprofile-arcs`, `-ftest-coverage`, `-fsanitize-coverage=`); `-O` and the rest
are left alone. A unit weakens when post-fix lacks a sanitizer or coverage flag it had pre-fix,
sets a sanitizer param or recover/ignore flag differently, or is no longer compiled (through
the recorder) at all; a unit only post-fix compiles weakens when it lacks a sanitizer every
pre-fix unit had. Where a unit is compiled more than once, its weakest call counts.

Stdlib only: runs in the sandbox as part of the detector gate.
"""

from __future__ import annotations

import posixpath

from ._dataclasses import dataclass, field

SOURCE_EXT = (".c", ".cc", ".cpp", ".cxx", ".c++", ".C", ".m", ".mm", ".s", ".S")
COVERAGE = ("--coverage", "-fprofile-arcs", "-ftest-coverage")
PARAM_PREFIXES = ("asan-", "hwasan-", "tsan-", "msan-", "ubsan-")
WEAKENING = (
    "-fsanitize-recover",
    "-fsanitize-ignorelist",
    "-fsanitize-blacklist",
    "-fno-sanitize-",
    "-fsanitize-address-use-after-scope=0",
    "-fsanitize-address-use-after-return=never",
)
BUILD_TOP = "/build"


@dataclass
class Call:
    """One compiler call of the recorder's log: its name, directory, environment and arguments."""

    name: str = ""
    cwd: str = ""
    env: dict[str, str] = field(default_factory=dict)
    args: list[str] = field(default_factory=list)


def parse_log(text: str) -> list[Call]:
    """The recorder's log: `call`, `cwd`, `env VAR VALUE`, `arg A`..., `end` per call; a line
    with no known key continues the previous argument (an argument with a newline)."""
    calls: list[Call] = []
    cur: Call | None = None
    for line in text.split("\n"):
        key, _, rest = line.partition(" ")
        if key == "call":
            cur = Call(name=rest)
        elif cur is None:
            continue
        elif key == "cwd":
            cur.cwd = rest
        elif key == "env":
            var, _, value = rest.partition(" ")
            cur.env[var] = value
        elif key == "arg":
            cur.args.append(rest)
        elif key == "end":
            calls.append(cur)
            cur = None
        elif cur.args:
            cur.args[-1] += "\n" + line
    return calls


def _rel(cwd: str, path: str) -> str:
    full = posixpath.normpath(posixpath.join(cwd, path))
    top = BUILD_TOP + "/"
    return full[len(top) :] if full.startswith(top) else full


def units(call: Call) -> list[str]:
    """The call's translation units (relative to the build directory), or `link:<output>`."""
    srcs = [a for a in call.args if a.endswith(SOURCE_EXT) and not a.startswith("-")]
    if srcs:
        return [_rel(call.cwd, s) for s in srcs]
    if "-c" in call.args or "-E" in call.args or "-S" in call.args:
        return []  # compiling something that is not a source file (stdin, a header check)
    out = call.args[call.args.index("-o") + 1] if "-o" in call.args[:-1] else "a.out"
    return [f"link:{_rel(call.cwd, out)}"]


def effective_args(call: Call) -> list[str]:
    """The arguments as the compiler sees them: the cc-wrapper adds NIX_CFLAGS_COMPILE before
    them and, when linking, NIX_CFLAGS_LINK after."""
    before = call.env.get("NIX_CFLAGS_COMPILE", "").split()
    linking = not any(a in call.args for a in ("-c", "-S", "-E"))
    after = call.env.get("NIX_CFLAGS_LINK", "").split() if linking else []
    return before + call.args + after


@dataclass(frozen=True)
class Instrument:
    """What a compile asks of the sanitizers and coverage."""

    sanitizers: frozenset[str]
    params: tuple[tuple[str, str], ...]
    others: frozenset[str]  # recover/ignorelist flags, sanitize-coverage
    coverage: frozenset[str]

    def show(self) -> str:
        parts = [f"-fsanitize={s}" for s in sorted(self.sanitizers)]
        parts += [f"--param {k}={v}" for k, v in self.params]
        return " ".join(parts + sorted(self.others) + sorted(self.coverage)) or "(none)"


def _sanitize_list(flag: str) -> list[str]:
    return [s for s in flag.split("=", 1)[1].split(",") if s]


def instrument(args: list[str]) -> Instrument:
    sans: set[str] = set()
    params: dict[str, str] = {}
    others: set[str] = set()
    cov: set[str] = set()
    for i, a in enumerate(args):
        if a.startswith("-fsanitize="):
            sans.update(_sanitize_list(a))
        elif a.startswith("-fno-sanitize="):
            sans.difference_update(_sanitize_list(a))
            if "all" in _sanitize_list(a):
                sans.clear()
        elif a.startswith(("-fsanitize-", "-fno-sanitize-")):
            others.add(a)
        elif a in COVERAGE:
            cov.add(a)
        elif a == "--param" or a.startswith("--param="):
            value = a[len("--param=") :] if a.startswith("--param=") else _next(args, i)
            name, _, v = value.partition("=")
            if name.startswith(PARAM_PREFIXES):
                params[name] = v
    return Instrument(
        frozenset(sans), tuple(sorted(params.items())), frozenset(others), frozenset(cov)
    )


def _next(args: list[str], i: int) -> str:
    return args[i + 1] if i + 1 < len(args) else ""


def by_unit(calls: list[Call]) -> dict[str, list[Instrument]]:
    out: dict[str, list[Instrument]] = {}
    for call in calls:
        inst = instrument(effective_args(call))
        for unit in units(call):
            out.setdefault(unit, []).append(inst)
    return out


def weakened(pre: Instrument, post: Instrument) -> list[str]:
    """What post-fix lost or changed against pre-fix (empty: nothing)."""
    what = [f"-fsanitize={s} dropped" for s in sorted(pre.sanitizers - post.sanitizers)]
    what += [f"{c} dropped" for c in sorted(pre.coverage - post.coverage)]
    pre_p, post_p = dict(pre.params), dict(post.params)
    for name in sorted(set(pre_p) | set(post_p)):
        if pre_p.get(name) != post_p.get(name):
            what.append(
                f"--param {name}: {pre_p.get(name, '(default)')} -> {post_p.get(name, '(default)')}"
            )
    what += [f"{o} added" for o in sorted(post.others - pre.others) if _weakening(o)]
    what += [f"{o} dropped" for o in sorted(pre.others - post.others) if "coverage" in o]
    return what


def _weakening(flag: str) -> bool:
    """A sanitizer sub-flag that lets errors pass or excludes code (never -fno-sanitize-recover,
    which makes them fatal)."""
    if flag.startswith("-fno-sanitize-recover"):
        return False
    return flag.startswith(WEAKENING)


def compare(pre_log: str, post_log: str) -> list[dict[str, object]]:
    """Per translation unit (and link) whose instrument weakened: what changed."""
    pre, post = by_unit(parse_log(pre_log)), by_unit(parse_log(post_log))
    diffs: list[dict[str, object]] = []
    for unit in sorted(pre):
        befores = pre[unit]
        if not any(b.sanitizers or b.coverage for b in befores):
            continue  # never instrumented: nothing to weaken
        if unit not in post:
            what = ["no longer compiled through the stdenv's compiler (or not at all)"]
            diffs.append({"unit": unit, "pre": befores[0].show(), "post": None, "changes": what})
            continue
        changes = sorted({w for b in befores for a in post[unit] for w in weakened(b, a)})
        if changes:
            worst = min(post[unit], key=lambda i: len(i.sanitizers))
            diffs.append(
                {"unit": unit, "pre": befores[0].show(), "post": worst.show(), "changes": changes}
            )
    return diffs + new_units(pre, post)


def new_units(
    pre: dict[str, list[Instrument]], post: dict[str, list[Instrument]]
) -> list[dict[str, object]]:
    """Units only post-fix compiles, without a sanitizer EVERY pre-fix unit had (code moved to
    a file the build does not instrument)."""
    sets = [i.sanitizers for insts in pre.values() for i in insts]
    common = frozenset.intersection(*sets) if sets else frozenset()
    diffs: list[dict[str, object]] = []
    for unit in sorted(set(post) - set(pre)):
        missing = {s for i in post[unit] for s in common - i.sanitizers}
        if missing:
            what = [
                f"new unit without -fsanitize={s} (every pre-fix unit had it)"
                for s in sorted(missing)
            ]
            diffs.append({"unit": unit, "pre": None, "post": post[unit][0].show(), "changes": what})
    return diffs


def summary(log: str) -> dict[str, str]:
    """unit -> its instrument, for the record (the first call of each unit)."""
    return {u: insts[0].show() for u, insts in sorted(by_unit(parse_log(log)).items())}
