"""The harness's sitecustomize for Python targets (trace_sandbox/harness/targetview.py AUDIT_HOOK):
it lists the package files a target opens as one JSON string a line, and it imports nothing a
target would not load anyway (issue 30: `import json` and the `re` it loads cost about as much
CPU as the rest of a small target's start-up, in every Python target process of a verify).

Run in a real interpreter with the hook installed as the harness installs it; the list is read
back with the harness's own reader (targets.py `read_opened`): the names are exact, whatever
characters they hold."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from trace_sandbox.harness.targets import read_opened
from trace_sandbox.harness.targetview import AUDIT_HOOK

# Every kind of character a name can hold: quotes and backslashes, control characters, DEL,
# Latin-1, the BMP's last, a character past it (a surrogate pair in JSON), and the lone surrogates
# an undecodable file name byte becomes (surrogateescape).
NAMES = [
    "lib/python/pager/__init__.py",
    'a "quoted" \\ name',
    "tab\tnew\nline\rbell\x07esc\x1b del\x7f",
    "caf\u00e9/\u00ff/\uffff",
    "emoji \U0001f600 and \U0010ffff",
    "undecodable \udc80\udcff",
    "a/../b/./c//d",
    "lib/python/pager/__init__.py",  # a second open of the same file: listed once
]

PROBE = """
import json, sys
names = json.load(open(sys.argv[1]))
for name in names:
    sys.audit("open", sys.argv[2] + "/" + name, "r", 0)
sys.audit("open", "/elsewhere/not-the-package.py", "r", 0)
with open(sys.argv[3]) as fh:  # a real open of a real package file
    fh.read()
"""

# the modules loaded, and the file the loaded sitecustomize came from (Debian's python has its
# own /usr/lib/python3.11/sitecustomize.py, which the hook's replaces)
MODULES = (
    "import sys; s = sys.modules.get('sitecustomize'); "
    "print('\\n'.join([getattr(s, '__file__', '-'), *sorted(sys.modules)]))"
)


def _hook(tmp: Path, pkg: Path) -> Path:
    hook = tmp / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(AUDIT_HOOK.format(pkg=str(pkg)))
    return hook


def _env(hook: Path | None, log: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    if hook is not None:
        env["PYTHONPATH"] = str(hook)
    if log is not None:
        env["TRACE_TARGET_LOG"] = str(log)
    return env


def test_the_opened_list_reads_back_exactly(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "real").mkdir(parents=True)
    (pkg / "real" / "mod.py").write_text("x = 1\n")
    hook, log = _hook(tmp_path, pkg), tmp_path / "opened.log"
    names = tmp_path / "names.json"
    names.write_text(json.dumps(NAMES))
    argv = [sys.executable, "-c", PROBE, str(names), str(pkg), str(pkg / "real" / "mod.py")]
    subprocess.run(argv, env=_env(hook, log), check=True, timeout=60)
    expected = [*dict.fromkeys(NAMES), "real/mod.py"]
    assert read_opened(str(log)) == expected
    assert log.read_bytes().isascii()  # JSON with \\u escapes, as json.dumps wrote it


def test_the_hook_imports_nothing_a_target_would_not_load(tmp_path: Path) -> None:
    hook = _hook(tmp_path, tmp_path / "pkg")
    log = tmp_path / "opened.log"

    def loaded(env: dict[str, str]) -> tuple[str, set[str]]:
        argv = [sys.executable, "-c", MODULES]
        out = subprocess.run(argv, env=env, check=True, capture_output=True, text=True, timeout=60)
        source, *names = out.stdout.split("\n")
        return source, set(filter(None, names))

    _, bare = loaded(_env(None, None))
    source, hooked = loaded(_env(hook, log))
    assert source == str(hook / "sitecustomize.py")  # the hook ran
    # nothing else: no json, no re (this interpreter's own site may load them; a target's
    # python, the package set's, loads neither at start-up)
    assert hooked - bare <= {"sitecustomize"}, sorted(hooked - bare)


def test_the_coverage_tracer_appended_to_the_hook_still_dumps_its_lines(tmp_path: Path) -> None:
    """The coverage gate appends its tracer (coverage.py PY_TRACER) to this hook; it imports
    the json it dumps with itself now that the hook does not."""
    from trace_sandbox.gates.coverage import PY_TRACER

    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "mod.py").write_text("def f(x):\n    if x:\n        return 1\n    return 2\n")
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text((AUDIT_HOOK + PY_TRACER).format(pkg=str(pkg)))
    env = _env(hook, tmp_path / "opened.log") | {"TMPDIR": str(tmp_path)}
    code = f"import sys; sys.path.insert(0, {str(pkg)!r}); import mod; mod.f(1)"
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=60)
    (dump,) = (tmp_path / "trace-coverage").glob("py-*.json")
    lines = json.loads(dump.read_text())["mod.py"]
    assert {1, 2, 3} <= set(lines) and 4 not in lines  # f(1) never reaches `return 2`
