"""The fuzz corpus, kept, and replayed against a surviving mutant beside the post-fix build.

`write_corpus` (the `fuzz-plan` step, after its exploration) writes `$out/corpus/corpus.json`
(trace.fuzz-corpus/v1): the PoC's invocations (target, kind, arguments, stdin), its data files
(and data trees, by store path), its units (what an input replaces: a data file, a stdin, an
argument) and every corpus entry the fuzzer kept (an input that reached new coverage: the unit's
index and the bytes). Nothing else reads the fuzzer's temporary directory.

`replay` (the `mutant-run` step, for a mutant that neither the reproducer nor a variant kills)
runs each entry through the PoC's program invocations against the post-fix build and against
the mutant, directly (no harness: a few milliseconds an invocation, as the fuzzer runs them),
and compares how each invocation behaved (`behaviour`: crash kind, hang, exit code, the digests
of its stdout and stderr with each build's own store path replaced by one placeholder). It stops
at the first entry on which the two builds behave differently: that input distinguishes the
mutant from the fix (survivors.py judges what that means). At most MAX_REPLAY entries.

An invocation is run once per distinct situation, not once per entry (issue 30: a Python target
paid an interpreter's start per invocation per entry per side, most of a calibration row). A
corpus entry replaces one unit; every other invocation of the PoC runs exactly as it did for
the entries before. So each run invocation's behaviour is kept under its key, (build root, the
work directory's content before it ran, argv, stdin), when it left the work directory as it
found it; an invocation with the same key later (in a later entry) is that behaviour, not a new
run. An invocation that changes the work directory is never reused (what it left is what the
invocations after it read), nor a run whose argument could not be passed. `replay`'s record says
how many invocations ran and how many were reused (`invocations`).

The post-fix build's side is the same for every survivor of a mutant-runs step (the same build,
corpus and entries), so the step replays it once (`PostFix`, issue 30: each survivor ran it
again, half of every replay): each entry's post-fix behaviours are computed the first time a
survivor needs them, in a work directory of their own, and every survivor compares its mutant
with them. A run's behaviour names neither build's root nor its work directory (both are
placeholders in the digests), so where the entry ran does not change it. A corpus with data
trees (which a run could change under the next one) is never shared: each survivor replays the
post-fix side beside its mutant, as before.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import tempfile
import threading

# the fuzzing loop's limits, read at each run: a hang is CPU_LIMIT seconds of the invocation's
# own CPU time (or WALL_LIMIT seconds blocked), never a time a loaded machine makes longer
from . import fuzz_runner
from .fuzz_server import by_limit, run_limited

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

SCHEMA = "trace.fuzz-corpus/v1"
MAX_REPLAY = 256  # corpus entries replayed per survivor (each runs both builds)
PLACEHOLDER = "<target>"
WORK = "<work>"
ENV_ASAN = "detect_leaks=0:symbolize=0:abort_on_error=0"
_CRASH = re.compile(r"SUMMARY: (\w+Sanitizer): (\S+)")
_FATAL = {-4: "SIGILL", -6: "SIGABRT", -7: "SIGBUS", -8: "SIGFPE", -11: "SIGSEGV"}


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def write_corpus(
    out: str,
    invocations: list[Any],
    files: dict[str, bytes],
    trees: dict[str, str],
    units: list[Any],
    corpus: list[tuple[int, bytes]],
) -> None:
    """`out/corpus/corpus.json` (see above); invocations are variants.Invocation, units
    variants.Unit, corpus the fuzzer's (unit index, bytes) entries."""
    os.makedirs(os.path.join(out, "corpus"), exist_ok=True)
    doc = {
        "schema": SCHEMA,
        "invocations": [
            {
                "target": i.target,
                "kind": i.kind,
                "args": list(i.args),
                "stdin": None if i.stdin is None else _b64(i.stdin),
            }
            for i in invocations
        ],
        "files": {name: _b64(data) for name, data in sorted(files.items())},
        "trees": dict(sorted(trees.items())),
        "units": [{"kind": u.kind, "name": u.name} for u in units],
        "entries": [{"unit": k, "data": _b64(d)} for k, d in corpus],
    }
    with open(os.path.join(out, "corpus", "corpus.json"), "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=1, sort_keys=True)
        fh.write("\n")


def load_corpus(corpus_dir: str | None) -> dict[str, Any] | None:
    """The corpus a fuzz-plan step kept, or None (no fuzzing: Python targets, nothing built)."""
    path = os.path.join(corpus_dir or "", "corpus.json")
    if not corpus_dir or not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as fh:
        doc = json.load(fh)
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise ValueError(f"{path}: not a {SCHEMA} document")
    return doc


def _digest(text: bytes, root: str, work: str = "") -> str:
    cleaned = text.replace(root.encode(), PLACEHOLDER.encode())
    if work:
        cleaned = cleaned.replace(work.encode(), WORK.encode())
    cleaned = re.sub(rb"==\d+==", b"==PID==", cleaned)
    cleaned = re.sub(rb"0x[0-9a-fA-F]{4,}", b"0xADDR", cleaned)
    return hashlib.sha256(cleaned).hexdigest()


def behaviour(
    rc: int | None, stdout: bytes, stderr: bytes, root: str, work: str = ""
) -> dict[str, Any]:
    """How one direct invocation ended: `crash` (a sanitizer report's kind, or a fatal
    signal), `hang` (stopped by the clock: `rc` None, or ended by the CPU limit's signal,
    whatever it printed), or `ok`/`rejects` with its exit code and output digests (the build's
    `root` and the `work` directory each replaced by a placeholder)."""
    if rc is None or by_limit(rc):
        return {"class": "hang"}
    m = _CRASH.search(stderr.decode("utf-8", "replace"))
    if m:
        return {"class": "crash", "crash": f"{m.group(1)}: {m.group(2)}"}
    if rc in _FATAL:
        return {"class": "crash", "crash": _FATAL[rc]}
    return {
        "class": "ok" if rc == 0 else "rejects",
        "exit_code": rc,
        "stdout_sha256": _digest(stdout, root, work),
        "stderr_sha256": _digest(stderr, root, work),
    }


class WorkState:
    """The work directory's content as one digest: every entry's relative path, kind and mode,
    a link's target, a file's bytes (a file's digest is kept while its inode, size, mtime and
    ctime stay the same: a copied data tree is read once)."""

    def __init__(self, work: str) -> None:
        self.work = work
        self.files: dict[str, tuple[tuple[int, ...], bytes]] = {}

    def _file(self, path: str, st: os.stat_result) -> bytes:
        sig = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        kept = self.files.get(path)
        if kept is not None and kept[0] == sig:
            return kept[1]
        with open(path, "rb") as fh:
            digest = hashlib.sha256(fh.read()).digest()
        self.files[path] = (sig, digest)
        return digest

    def digest(self) -> str:
        h = hashlib.sha256()
        for root, dirs, names in os.walk(self.work):
            dirs.sort()
            for name in sorted(dirs + names):
                path = os.path.join(root, name)
                st = os.lstat(path)
                h.update(os.path.relpath(path, self.work).encode("utf-8", "surrogateescape"))
                h.update(b"\0%o\0" % st.st_mode)
                if os.path.islink(path):
                    h.update(os.readlink(path).encode("utf-8", "surrogateescape"))
                elif os.path.isfile(path):
                    h.update(self._file(path, st))
                h.update(b"\1")
        return h.hexdigest()


def _key(root: str, state: str, argv: list[str], feed: bytes) -> str:
    h = hashlib.sha256(json.dumps([root, state, argv], ensure_ascii=False).encode())
    h.update(hashlib.sha256(feed).digest())
    return h.hexdigest()


class Replayer:
    """The PoC's program invocations with one unit replaced, against one build's root; an
    invocation seen before in the same situation is not run again (see above)."""

    def __init__(self, doc: dict[str, Any], work: str) -> None:
        self.doc, self.work = doc, work
        self.files = {n: base64.b64decode(d) for n, d in (doc.get("files") or {}).items()}
        self.units = list(doc.get("units") or [])
        for name, tree in (doc.get("trees") or {}).items():
            shutil.copytree(tree, os.path.join(work, name))
        self.state = WorkState(work)
        self.seen: dict[str, dict[str, Any]] = {}
        self.ran = self.reused = 0

    def _invoke(
        self, root: str, argv: list[str], feed: bytes, env: dict[str, str]
    ) -> dict[str, Any]:
        """One invocation's behaviour: the one kept for its key, or a run (kept when it left
        the work directory as it found it)."""
        before = self.state.digest()
        key = _key(root, before, argv, feed)
        if key in self.seen:
            self.reused += 1
            return self.seen[key]
        self.ran += 1
        p = run_limited(
            argv,
            fuzz_runner.CPU_LIMIT,
            fuzz_runner.WALL_LIMIT,
            input=feed,
            cwd=self.work,
            env=env,
            capture_output=True,
        )
        if p is None:  # stopped by the wall backstop
            seen = behaviour(None, b"", b"", root)
        else:
            seen = behaviour(p.returncode, p.stdout, p.stderr, root, self.work)
        if self.state.digest() == before:
            self.seen[key] = seen
        return seen

    def _argv(
        self, root: str, i: int, inv: dict[str, Any], unit: dict[str, Any], data: bytes
    ) -> list[str] | None:
        args = [str(a) for a in inv.get("args") or []]
        if unit["kind"] == "arg" and str(unit["name"]).startswith(f"arg:{i}:"):
            text = data.decode("utf-8", "surrogateescape")
            if "\0" in text:
                return None
            args[int(str(unit["name"]).split(":")[2])] = text
        subst = [a.replace("$TARGET", root).replace("<work>", self.work) for a in args]
        return [os.path.join(root, str(inv["target"])), *subst]

    def run(self, root: str, index: int, data: bytes) -> list[dict[str, Any]]:
        """Each program invocation's behaviour on entry (unit `index`, `data`), in order."""
        unit = self.units[index]
        keep = set(self.files) | set(self.doc.get("trees") or {})
        for name in os.listdir(self.work):  # what an earlier run left behind: not this input
            if name not in keep:
                path = os.path.join(self.work, name)
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path)
                else:
                    os.remove(path)
        for name, content in self.files.items():
            with open(os.path.join(self.work, name), "wb") as fh:
                fh.write(data if unit["kind"] == "file" and unit["name"] == name else content)
        env = dict(os.environ, ASAN_OPTIONS=ENV_ASAN)
        out: list[dict[str, Any]] = []
        for i, inv in enumerate(self.doc.get("invocations") or []):
            if inv.get("kind") != "program":
                continue
            argv = self._argv(root, i, inv, unit, data)
            if argv is None:
                out.append({"class": "not-run"})
                continue
            stdin = inv.get("stdin")
            feed = data if unit["name"] == f"stdin:{i}" else base64.b64decode(stdin or "")
            out.append(self._invoke(root, argv, feed, env))
        return out


def _shown(unit: dict[str, Any], data: bytes) -> dict[str, Any]:
    return {"unit": unit["name"], "bytes": len(data), "input_hex": data[:256].hex()}


class PostFix:
    """The post-fix build's behaviours on a corpus's entries, each entry replayed once for all
    the survivors of one mutant-runs step (see above), in its own work directory; thread-safe
    (the step's mutants run a few at a time). `close` removes its directory."""

    def __init__(self, corpus_dir: str | None, post: str) -> None:
        self.corpus_dir, self.post = corpus_dir, post
        self.lock = threading.Lock()
        self.tmp: str | None = None
        self.player: Replayer | None = None
        self.seen: list[list[dict[str, Any]]] = []

    def shareable(self, doc: dict[str, Any]) -> bool:
        """A corpus without data trees (a run may change a tree under the next run)."""
        return not doc.get("trees")

    def on(self, doc: dict[str, Any], n: int) -> list[dict[str, Any]]:
        """The post-fix build's behaviours on entry `n` (computed once, entries in order)."""
        with self.lock:
            if self.player is None:
                self.tmp = tempfile.mkdtemp(prefix="post-", dir=os.environ.get("TMPDIR", "/tmp"))
                os.makedirs(os.path.join(self.tmp, "work"))
                self.player = Replayer(doc, os.path.join(self.tmp, "work"))
            entries = list(doc.get("entries") or [])
            while len(self.seen) <= n:
                entry = entries[len(self.seen)]
                index, data = int(entry["unit"]), base64.b64decode(entry["data"])
                self.seen.append(self.player.run(self.post, index, data))
            return self.seen[n]

    def close(self) -> None:
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)


def replay(
    corpus_dir: str | None, mutant: str, post: str, shared: PostFix | None = None
) -> dict[str, Any]:
    """The corpus against both builds: {tried, of, distinguished_by} (distinguished_by: the
    first entry that tells the mutant from the fix, its input and both behaviours; None when
    every entry tried behaves alike). No corpus: {tried: 0, of: 0, why}. `shared`: the
    post-fix side of the step's survivors (its corpus and build must be these); without it, or
    for a corpus it does not share, the post-fix build is replayed here, beside the mutant, and
    `invocations` counts both sides' runs; with it, the mutant's (`post_fix`: "shared")."""
    doc = load_corpus(corpus_dir)
    if doc is None:
        return {"tried": 0, "of": 0, "distinguished_by": None, "why": "no fuzz corpus"}
    if shared is not None and (
        (shared.corpus_dir, shared.post) != (corpus_dir, post) or not shared.shareable(doc)
    ):
        shared = None
    entries = list(doc.get("entries") or [])
    tmp = tempfile.mkdtemp(prefix="corpus-", dir=os.environ.get("TMPDIR", "/tmp"))
    work = os.path.join(tmp, "work")
    os.makedirs(work)
    result: dict[str, Any] = {"tried": 0, "of": len(entries), "distinguished_by": None}
    try:
        player = Replayer(doc, work)
        for n, entry in enumerate(entries[:MAX_REPLAY]):
            index, data = int(entry["unit"]), base64.b64decode(entry["data"])
            fixed = player.run(post, index, data) if shared is None else shared.on(doc, n)
            mutated = player.run(mutant, index, data)
            result["tried"] = n + 1
            if fixed != mutated:
                shown = _shown(player.units[index], data)
                result["distinguished_by"] = {
                    "input": f"fuzz corpus entry {n + 1}",
                    **shown,
                    "post_fix": fixed,
                    "mutant": mutated,
                }
                break
        result["invocations"] = {"ran": player.ran, "reused": player.reused}
        if shared is not None:
            result["invocations"]["post_fix"] = "shared"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return result
