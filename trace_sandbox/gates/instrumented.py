"""The detector gate, part 3: do the functions on the failing stack still carry the checks?

An instrumented function references the sanitizer's checks: AddressSanitizer's inline checks
call `__asan_report_load1`... (or `__asan_load4`... when outlined, `__asan_store*`), the other
sanitizers `__hwasan_*`, `__msan_*`, `__tsan_*`, `__ubsan_handle_*`. For each function of the
pre-fix failing stack (the package's own frames), every ELF file of both builds' outputs that
defines it (`nm --defined-only`, without bfd's linker plugins: `_nm`) is disassembled for that
function alone (`objdump -d --disassemble=NAME`) and the check symbols it calls are
collected. A function that references checks pre-fix and none post-fix lost its
instrumentation (a `no_sanitize` attribute, a file compiled without the flag). The check
kinds it lost (`load`, `store`) are recorded too, as context: a fix may legitimately remove the
only write of a function.

The tools are binutils' `nm` and `objdump`: the package set's (pkgs.binutils, given by the gate
step) or the host's (the fixture reaches /usr/bin through extra-sandbox-paths). Without them
the check is not made and the record says so. Only ELF files are read (Python code has no
such instrumentation: its part of the gate is the patch scan).

Stdlib only: runs in the sandbox as part of the detector gate.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

from ._dataclasses import dataclass

CHECK = re.compile(
    r"<(__asan_(?:report_\w+|load\w*|store\w*|loadN\w*|storeN\w*)|__hwasan_\w+|__msan_\w+"
    r"|__tsan_\w+|__ubsan_handle_\w+)(?:@plt)?(?:\+0x[0-9a-f]+)?>"
)
TIMEOUT = 60


@dataclass(frozen=True)
class Tools:
    """The binutils programs the check runs: nm and objdump."""

    nm: str
    objdump: str


def find_tools(bindir: str | None) -> Tools | None:
    """binutils from `bindir` (the package set's), else on PATH, else the host's /usr/bin."""
    for where in (bindir, None, "/usr/bin"):
        nm = _tool("nm", where)
        objdump = _tool("objdump", where)
        if nm and objdump:
            return Tools(nm, objdump)
    return None


def _tool(name: str, where: str | None) -> str | None:
    if where is None:
        return shutil.which(name)
    path = os.path.join(where, name)
    return path if os.access(path, os.X_OK) else None


def elf_files(root: str) -> list[str]:
    found: list[str] = []
    for base, dirs, names in os.walk(root):
        dirs.sort()
        for name in sorted(names):
            path = os.path.join(base, name)
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            with open(path, "rb") as fh:
                if fh.read(4) == b"\x7fELF":
                    found.append(path)
    return found


def _run(argv: list[str]) -> str:
    return _completed(argv).stdout


def _completed(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT, check=False)


def _nm(tools: Tools, path: str) -> str:
    """`nm --defined-only` of one file. GNU nm opens a file through its `plugin` target unless
    told another: that loads every linker plugin of bfd-plugins/ (a host's LLVMgold pulls in all
    of libLLVM, ~20 ms of CPU per call, ten times nm's own work) only to read LTO bitcode, which
    the build outputs read here hold no machine code of. `--target=default` probes the formats
    without the plugin (the same listing for an ELF file); an nm that refuses the option (not
    GNU's) is asked again without it."""
    done = _completed([tools.nm, "--target=default", "--defined-only", path])
    if done.returncode != 0 and not done.stdout:
        done = _completed([tools.nm, "--defined-only", path])
    return done.stdout


def defined(tools: Tools, path: str) -> set[str]:
    """The function symbols a file defines (its text symbols)."""
    names: set[str] = set()
    for line in _nm(tools, path).splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[1] in ("T", "t", "W", "w"):
            names.add(parts[2])
    return names


def symbols_for(function: str, names: set[str]) -> list[str]:
    """The symbols of a frame's function: itself and its compiler clones (`f.constprop.0`)."""
    return sorted(n for n in names if n == function or n.startswith(function + "."))


def checks(tools: Tools, path: str, symbol: str) -> set[str]:
    text = _run([tools.objdump, "-d", "--no-show-raw-insn", f"--disassemble={symbol}", path])
    return {m.group(1) for m in CHECK.finditer(text)}


def kinds(refs: set[str]) -> list[str]:
    out = {"load" for r in refs if "load" in r} | {"store" for r in refs if "store" in r}
    return sorted(out | ({"other"} if refs and not out else set()))


def function_checks(tools: Tools, root: str, functions: list[str]) -> dict[str, set[str] | None]:
    """function -> the check symbols its code calls (all files, all clones); None: not found."""
    out: dict[str, set[str] | None] = {f: None for f in functions}
    for path in elf_files(root):
        names = defined(tools, path)
        for fn in functions:
            for sym in symbols_for(fn, names):
                found = out[fn]
                out[fn] = (found or set()) | checks(tools, path, sym)
    return out


def compare(
    tools: Tools, pre: str, post: str, functions: list[str]
) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    """(uninstrumented, table): the functions instrumented pre-fix and not post-fix, and every
    function's check kinds on both sides."""
    before = function_checks(tools, pre, functions)
    after = function_checks(tools, post, functions)
    lost: list[dict[str, object]] = []
    table: list[dict[str, object]] = []
    for fn in functions:
        b, a = before[fn], after[fn]
        row: dict[str, object] = {
            "function": fn,
            "pre": None if b is None else kinds(b),
            "post": None if a is None else kinds(a),
        }
        table.append(row)
        if b and a is not None and not a:
            lost.append(row)
    return lost, table
