"""The authenticated verdict memo: a `trace fork` no-op that starts no Nix process.

Every full fork run of a candidate passes the trust boundary (engine/verify/trusted.py: cached
steps evaluated again, outputs rehashed, `check` steps rebuilt with `--check`), which is most of a
no-op's time and all of its Nix processes. After such a run this module records, per candidate, a
*memo entry*: the outcome (verdict, route, decision, bundle), the files the run read, the store
paths it relied on and the digests of the files it wrote (bundle, verify result, decision). The
entry is authenticated with HMAC-SHA256 under a key that lives OUTSIDE the state directory and the
fork (`$TRACE_MEMO_KEY`, else `$XDG_STATE_HOME/trace/memo.key`, else
`~/.local/state/trace/memo.key`; 32 random bytes, created 0600 on first use; a key file that others
can read or write, or one inside the fork or the state directory, is not used).

The MAC covers the entry *and* the digest of everything else that determines the verdict (`Run`):
the candidate file's path; trace's version and a stat stamp of its own code and data (engine,
graphs, templates, policy); the fork's layout; the source store path, narHash, system and Nix
version `nix run .#verify` passes; the fork's commit, tree and dirty flag; the merged policy's
bytes; how signing is configured (no, a key by its digest, keyless with its trust config); the Nix
tools on PATH (resolved), Nix's and trace's machine config files and the environment variables that
change what Nix does; and today's UTC date (waivers expire). The files the full run read (every
pipeline file, template, step input and package-set tree the graph loader lists in `Graph.reads`,
plus the candidate's folder and files it names) are compared by their full stat signature
(engine/fastpath.py: size, mtime, inode, ctime, device, mode: an edit that keeps the mtime still
moves the ctime); under `nix run .#verify` the package set is `STATE/fork/package-set.nix`, a
file naming the source store path, so the work tree is not walked.

A no-op recomputes that digest in Python, checks the MAC, stamps the recorded reads (each tree once
per run, shared by every candidate), checks that each recorded store path still exists (a stat),
that the files behind the graph's `[nix] extra_sandbox_paths` have the identity the run's
derivations carry (engine/hostpaths.py) and that the bundle and result files have the stat
signatures they had when that run wrote them (any edit, added or removed file moves a ctime or a
directory's), and then reuses the outcome without writing anything. Anything else (no key, a bad
MAC, an input or file changed, an output garbage-collected, a keyless candidate left unsigned that
could now be signed) falls back to the full trusted path, which records a new entry. An entry is
recorded only if no file read was modified since one second before the run began (racy-clean, as
git's index), so an edit made during a run is never memoised as unchanged.

A commit moves the context's commit parts (COMMIT_PARTS). An entry made at another commit still
answers when its MAC holds under this run's context with the entry's own commit parts (so nothing
else moved) and every file Nix read of the package set, recorded at that full run by
engine/fork/nixreads.py, is unchanged in the new commit's source tree (`Run._carried`).

What the memo does NOT defend against: someone who can read the key file (the user's account,
root) can forge any entry, exactly as they could run trace with a patched engine; a determinism
re-check is not repeated while the memo holds (at most one UTC day: the date is in the digest).
Standard library only: a no-op imports nothing else.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from engine import __version__, userkey
from engine.fastpath import Entry, stamp
from engine.fork.config import ForkConfig
from engine.fork.outcome_table import Outcome

FORMAT = "trace.fork-memo/v2"
COMMIT_PARTS = ("head", "source")  # what a commit moves (the carry-over may keep a verdict)
KEY_ENV = "TRACE_MEMO_KEY"
RACY_NS = 1_000_000_000  # files modified this close to the run's start are never memoised
NIX_TOOLS = ("nix", "nix-build", "nix-instantiate", "nix-store")
ENV_VARS = (  # what changes what Nix or trace does on this machine
    "NIX_CONFIG",
    "NIX_CONF_DIR",
    "NIX_USER_CONF_FILES",
    "NIX_PATH",
    "NIX_REMOTE",
    "NIX_STORE_DIR",
    "TRACE_DATA_DIR",
    "TRACE_MACHINE_CONFIG",
    "XDG_CONFIG_HOME",
)
Reads = list[tuple[str, list[str]]]
_PART_LABELS = {  # what a stale entry's message names, per part of the context
    "format": "the memo format",
    "engine": "trace's version",
    "today": "the date (waivers expire)",
    "fork": "the fork's layout",
    "source": "the fork's source (a commit or an edit)",
    "host": "the system or Nix version",
    "head": "the fork's commit",
    "dirty": "the work tree's dirty state",
    "policy": "the policy",
    "signing": "how this run signs",
    "machine": "the machine's Nix settings or tools",
    "shared": "trace's own code or data",
}


def key_path() -> Path | None:
    env = os.environ.get(KEY_ENV)
    if env is not None:
        return Path(env) if env else None  # set but empty: no memo
    home = userkey.state_home()
    return None if home is None else home / "trace" / "memo.key"


def load_key(cfg: ForkConfig) -> tuple[bytes | None, str]:
    """The memo key (created on first use, engine/userkey.py), or (None, why it is not used)."""
    path = key_path()
    if path is None:
        return None, f"${KEY_ENV} is empty and there is no home directory for a memo key"
    key = userkey.load(path, (cfg.root, cfg.state))
    if key is None:
        return None, (
            f"the memo key {path} is not used: it must be a {userkey.KEY_BYTES}-byte file only "
            "you can read (chmod 600), not inside the fork or its state directory (whoever "
            "writes there could forge verdicts)"
        )
    return key, ""


def _sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _canon(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def _dir_digests(root: Path) -> dict[str, str] | None:
    """{path: sha256} of every regular file under `root` (None: a non-regular entry, unreadable)."""
    out: dict[str, str] = {}
    try:
        for base, dirs, files in os.walk(root):
            dirs.sort()
            for name in files:
                p = Path(base) / name
                digest = _sha256(p) if p.is_file() and not p.is_symlink() else None
                if digest is None:
                    return None
                out[str(p)] = digest
    except OSError:
        return None
    return out


def written(cfg: ForkConfig, cid: str) -> Reads:
    """What a candidate's full run wrote (bundle, verify result, decision): a no-op finds them
    with the very stat signatures they had when that run wrote them, or runs in full."""
    return [
        (str(cfg.bundles / cid), []),
        (str(cfg.state / "verify" / f"{cid}.json"), []),
        (str(cfg.state / "decisions" / f"{cid}.json"), []),
    ]


def written_stamp(reads: Reads) -> str | None:
    try:
        entries = stamp([(Path(p), ex) for p, ex in reads])
    except OSError:
        return None
    return hashlib.sha256(_canon(entries)).hexdigest()


def _machine(env: dict[str, str]) -> dict[str, object]:
    """The Nix tools this run would start and the config files that shape them (no process)."""
    tools = {t: os.path.realpath(w) if (w := shutil.which(t)) else None for t in NIX_TOOLS}
    try:
        xdg = Path(env.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    except RuntimeError:  # no home: no per-user config either
        xdg = Path("/nonexistent")
    files = [
        Path("/etc/nix/nix.conf"),
        Path(env.get("NIX_CONF_DIR", "/etc/nix")) / "nix.conf",
        xdg / "nix" / "nix.conf",
        Path("/etc/trace/machine.toml"),
        xdg / "trace" / "machine.toml",
    ]
    if env.get("TRACE_MACHINE_CONFIG"):
        files.append(Path(env["TRACE_MACHINE_CONFIG"]))
    return {
        "tools": tools,
        "files": {str(f): _sha256(f) for f in files},
        "env": {k: env.get(k) for k in ENV_VARS},
    }


class Run:
    """The memo of one `trace fork` run: what it shares by all candidates, the stamps it took."""

    def __init__(
        self,
        cfg: ForkConfig,
        key: bytes,
        *,
        head: tuple[str | None, str | None],
        dirty: bool,
        policy: Path,
        signing: dict[str, object],
        began_ns: int | None = None,
    ) -> None:
        from engine.paths import data_dir

        self.cfg = cfg
        self._key = key
        self.began_ns = began_ns if began_ns is not None else time.time_ns()
        self._stamps: dict[tuple[str, tuple[str, ...]], tuple[list[Entry], bytes] | None] = {}
        self._pending: dict[Path, dict[str, Any]] = {}
        self.misses: dict[str, str] = {}  # candidate file -> why the full path ran
        self._sandbox: dict[tuple[str, ...], str | None] = {}
        src = cfg.source
        engine_dir = Path(__file__).resolve().parent.parent
        subs = ("graphs", "templates", "policy", "trace_sandbox")
        shared = [engine_dir, *(data_dir() / sub for sub in subs)]
        self.shared_reads: Reads = [(str(p), []) for p in shared]
        context = {
            "format": FORMAT,
            "engine": __version__,
            "today": dt.datetime.now(dt.UTC).date().isoformat(),
            "fork": {k: str(v) for k, v in vars(cfg).items() if k != "source"},
            # what a commit moves (COMMIT_PARTS: head, source) apart from what it does not
            "source": None if src is None else [str(src.store_path), src.nar_hash],
            "host": None if src is None else [src.system, src.nix_version],
            "head": list(head),
            "dirty": dirty,
            "policy": _dir_digests(policy),
            # the fork's signed waivers (not copied into the merged policy: a directory)
            "waivers": _dir_digests(cfg.policy / "waivers") if cfg.policy else None,
            "signing": signing,
            "machine": _machine(dict(os.environ)),
            "shared": self._stamp_digest(self.shared_reads),
        }
        self._shared = context["shared"]
        # each part's digest, kept beside an entry to say which part moved when an honest entry
        # is stale, and to try an entry made at another commit (`_carried`); never trusted: an
        # entry is accepted only by its MAC, under a context made of these digests
        self._parts = {k: hashlib.sha256(_canon(v)).hexdigest() for k, v in context.items()}
        self._context = hashlib.sha256(_canon(self._parts)).hexdigest()
        self.head = head
        self.carried: dict[str, str] = {}  # candidate file -> the commit its verdict was made at

    # ---- stamps: each read stamped once per run --------------------------------------------

    def _stamp(self, path: str, exclude: Sequence[str]) -> tuple[list[Entry], bytes] | None:
        """The read's stat entries and their digest, taken once per run (None: unreadable)."""
        k = (path, tuple(exclude))
        if k not in self._stamps:
            try:
                entries = stamp([(Path(path), list(exclude))])
            except OSError:
                self._stamps[k] = None
            else:
                digest = hashlib.sha256(_canon([path, list(exclude), entries])).digest()
                self._stamps[k] = (entries, digest)
        return self._stamps[k]

    def _stamp_digest(self, reads: Reads, *, racy: bool = False) -> str | None:
        h = hashlib.sha256()
        limit = self.began_ns - RACY_NS
        for path, exclude in sorted(reads, key=lambda r: (r[0], r[1])):
            got = self._stamp(path, exclude)
            if got is None:
                return None
            entries, digest = got
            # trace's own files (the entry pipeline, package-set.nix) are exempt: every full run
            # writes them again from the inputs, so an edit of one is undone, and seen, next run
            own = any(Path(path).is_relative_to(d) for d in (self.cfg.state, self.cfg.generated))
            if racy and not own and any(e[2] >= limit or e[4] >= limit for e in entries):
                return None
            h.update(digest)
        return h.hexdigest()

    def _mac(self, file: Path, body: dict[str, Any], context: str | None = None) -> str:
        msg = _canon([FORMAT, context or self._context, str(file)]) + b"\n" + _canon(body)
        return hmac.new(self._key, msg, hashlib.sha256).hexdigest()

    def _not_current(self, file: Path, doc: dict[str, Any], mac: str) -> str:
        """Why an entry whose MAC fails under this run's context is not used: stale (authentic
        under the context it was made in, which has moved since: a commit, a policy edit, a new
        day) or not authentic (edited, copied, or made under another key)."""
        made_in = doc.get("context")
        authentic_then = (
            isinstance(made_in, str)
            and made_in != self._context
            and hmac.compare_digest(mac, self._mac(file, doc["body"], made_in))
        )
        if authentic_then:
            recorded = doc.get("parts")
            parts: dict[str, Any] = recorded if isinstance(recorded, dict) else {}
            moved = [_PART_LABELS.get(k, k) for k, v in self._parts.items() if parts.get(k) != v]
            return f"stale: {', '.join(moved) or 'its context'} changed since it was made"
        return "the memo entry is not authentic (edited, copied, or made under another key)"

    def _carried(
        self, file: Path, doc: dict[str, Any], body: dict[str, Any], mac: str
    ) -> str | None:
        """An entry made at another commit keeps its verdict when that commit is all that moved
        (its MAC holds under this run's context with the entry's own commit parts) and every
        file Nix read of the package set (engine/fork/nixreads.py), every other file the
        verdict was made from and the listings of the directories read are unchanged. None
        when it holds, else why not (then the full path runs)."""
        from engine.fork.nixreads import unchanged

        made = doc.get("parts")
        if not isinstance(made, dict) or not all(
            isinstance(made.get(k), str) for k in COMMIT_PARTS
        ):
            return self._not_current(file, doc, mac)
        parts = {**self._parts, **{k: made[k] for k in COMMIT_PARTS}}
        context = hashlib.sha256(_canon(parts)).hexdigest()
        if not hmac.compare_digest(mac, self._mac(file, body, context)):
            return self._not_current(file, doc, mac)
        carry = body.get("carry")
        root = package_root(self.cfg)
        if not isinstance(carry, dict) or root is None:
            return "stale: the fork's commit changed (and what Nix read of it was not recorded)"
        reads = [(str(p), list(ex)) for p, ex in carry["reads"]]
        if self._stamp_digest(reads) != carry["stamp"]:
            return "a file the verdict was made from changed"
        moved = unchanged(root, carry["nix_reads"])
        if moved is not None:
            return f"the fork's commit changed {moved}, which Nix read for this candidate"
        self.carried[str(file)] = str(carry.get("commit") or "another commit")
        return None

    def _where(self, file: Path) -> Path:
        name = hashlib.sha256(str(file).encode()).hexdigest()[:32]
        return self.cfg.state / "fork" / "memo" / f"{name}.json"

    # ---- the no-op ----------------------------------------------------------------------------

    def lookup(self, file: Path, can_sign_keyless: Callable[[], bool]) -> Outcome | None:
        """The memoised outcome of `file`, or None (and why, in `misses`): then run it in full."""
        why = self._check(file, can_sign_keyless)
        if isinstance(why, str):
            self.misses[str(file)] = why
            return None
        return why

    def _check(self, file: Path, can_sign_keyless: Callable[[], bool]) -> Outcome | str:
        try:
            doc = json.loads(self._where(file).read_bytes())
            body, mac = doc["body"], doc["mac"]
        except (OSError, ValueError, KeyError, TypeError):
            return "no memo entry"
        if not isinstance(mac, str) or not isinstance(body, dict):
            return "the memo entry is not authentic (edited, copied, or made under another key)"
        if not hmac.compare_digest(mac, self._mac(file, body)):
            carried = self._carried(file, doc, body, mac)
            if isinstance(carried, str):
                return carried
        else:
            reads = [(str(p), list(ex)) for p, ex in body["reads"]]
            if self._stamp_digest(reads) != body["stamp"]:
                return "a file the verdict was made from changed"
        paths, identity = body.get("sandbox") or ([], None)
        if self._sandbox_identity(paths) != identity:
            return "stale: the files behind [nix] extra_sandbox_paths changed since it was made"
        missing = [p for p in body["outs"] if not os.path.lexists(p)]
        if missing:
            return f"{missing[0]} is no longer in the store"
        try:
            outcome = Outcome(**body["outcome"])
        except TypeError:
            return "the memo entry is of another format"
        if written_stamp(written(self.cfg, outcome.candidate)) != body["written"]:
            return "the bundle or a result file is not the one that run wrote"
        if outcome.decision == "allow" and outcome.signed == "no" and can_sign_keyless():
            return "allowed and unsigned, and a keyless identity is available now"
        steps: dict[str, object] = {
            "built": 0,
            "reused": 0,
            "substituted": 0,
            "cached": len(outcome.steps),
        }
        made_at = self.carried.get(str(file))
        if made_at is not None:  # the bundle pins that commit: say so
            kept = f"verdict of commit {made_at[:12]}: nothing it read changed since"
            steps["note"] = f"{outcome.note}; {kept}" if outcome.note else kept
        return Outcome(**{**asdict(outcome), **steps})

    def _sandbox_identity(self, paths: list[str]) -> str | None:
        """What the sandbox exposes of the host now (engine/hostpaths.py), once per run."""
        from engine import hostpaths

        k = tuple(paths)
        if k not in self._sandbox:
            self._sandbox[k] = hostpaths.identity(paths)
        return self._sandbox[k]

    # ---- after a full run ---------------------------------------------------------------------

    def remember(
        self,
        file: Path,
        outcome: Outcome,
        reads: Iterable[tuple[Path, Sequence[str]]],
        outs: Iterable[str],
        sandbox: tuple[Sequence[str], str | None] = ((), None),
        carry: tuple[Iterable[tuple[Path, Sequence[str]]], dict[str, str]] | None = None,
    ) -> None:
        """Keep what a full trusted run of `file` found (written by `commit`, after the run);
        `sandbox`: the graph's extra_sandbox_paths and the identity its derivations carry;
        `carry`: the reads other than the package set and what Nix read of the package set
        (relative path -> digest), when a later commit may keep the verdict (`_carried`)."""
        self._stamps.clear()  # that run may have written files a later lookup stamps
        wrote = written_stamp(written(self.cfg, outcome.candidate))
        if wrote is None or outcome.decision == "error":
            self.forget(file)
            return
        self._pending[file] = {
            "reads": sorted({(str(p), tuple(ex)) for p, ex in reads}),
            "outs": sorted(set(outs)),
            "outcome": asdict(outcome),
            "written": wrote,
            "sandbox": [list(sandbox[0]), sandbox[1]],
        }
        if carry is not None:
            other, nix_reads = carry
            self._pending[file]["carry"] = {
                "reads": sorted({(str(p), tuple(ex)) for p, ex in other}),
                "nix_reads": nix_reads,
                "commit": self.head[0],
            }

    def forget(self, file: Path) -> None:
        self._stamps.clear()
        self._pending.pop(file, None)
        self._where(file).unlink(missing_ok=True)

    def commit(self) -> int:
        """Write the kept entries whose reads are unchanged and not racily new; returns how many.
        A stamp taken now, after every build of the run: a file modified during the run has a
        ctime after its start and is refused."""
        from engine.fork.entry import write_if_changed

        self._stamps.clear()
        done = 0
        shared = self._stamp_digest(self.shared_reads, racy=True)  # trace's own code and data
        for file, entry in self._pending.items():
            reads: Reads = [(p, list(ex)) for p, ex in entry["reads"]]
            digest = self._stamp_digest(reads, racy=True)
            if digest is None or shared is None or shared != self._shared:
                self._where(file).unlink(missing_ok=True)
                continue
            body = {**entry, "reads": reads, "stamp": digest}
            if "carry" in entry:
                other: Reads = [(p, list(ex)) for p, ex in entry["carry"]["reads"]]
                body["carry"] = {
                    **entry["carry"],
                    "reads": other,
                    "stamp": self._stamp_digest(other),
                }
            doc = {
                "format": FORMAT,
                "body": body,
                "mac": self._mac(file, body),
                "context": self._context,
                "parts": self._parts,
            }
            write_if_changed(self._where(file), _canon(doc) + b"\n")
            done += 1
        self._pending.clear()
        return done


def package_root(cfg: ForkConfig) -> Path | None:
    """The package set as Nix reads it under `nix run .#verify` (the source store path), where
    what Nix read is recorded for the carry-over; None in a work-tree run (trace itself hashes
    the whole tree there, so no record would be Nix's alone)."""
    if cfg.source is None:
        return None
    rel = cfg.package_set.relative_to(cfg.root).as_posix()
    return cfg.source.store_path if rel == "." else cfg.source.store_path / rel


def signing_identity(args: Any) -> dict[str, object]:
    """How this run signs, as the memo digest sees it (a key by its bytes' digest)."""
    if args.no_sign:
        return {"mode": "no"}
    if args.key is not None:
        return {"mode": "key", "key": _sha256(Path(args.key))}
    trust = getattr(args, "trust_config", None)
    lock = getattr(args, "signer_lock", None)
    return {
        "mode": "keyless",
        "trust_config": _sha256(Path(trust)) if trust else None,
        "signer_lock": _sha256(Path(lock)) if lock else None,
        "force_identity": bool(getattr(args, "force_identity", False)),
    }


def note(message: str) -> None:
    print(f"trace: note: {message}; every candidate takes the full trusted path", file=sys.stderr)
