"""`trace gc`: drop GC roots of results no graph references any more."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from engine.cli.args import add_state_args, state_dir


def register(sub: Any) -> None:
    p = sub.add_parser("gc", help="drop GC roots of results no graph references any more")
    add_state_args(p)
    p.add_argument(
        "--all",
        action="store_true",
        help="also collect every other state directory of this user that exists now",
    )
    p.add_argument(
        "--prune-missing",
        action="store_true",
        help="remove the GC-root folders of state directories that do not exist now (a deleted "
        "project; also one only unmounted now: its cached outputs become collectable)",
    )
    p.set_defaults(handler=cmd_gc)


def _gc_one(index: Any) -> tuple[list[str], set[str], list[str], list[str], int]:
    forgotten, unsure = index.forget_graphs()
    keep = {row[0] for row in index.db.execute("SELECT key FROM last_keys")}
    dropped = index.gc(keep)
    pruned = index.prune_build_files(keep=0)
    return dropped, keep, forgotten, unsure, pruned


def cmd_gc(args: argparse.Namespace) -> int:
    from engine.cache import Index, remove_root_folder, root_folders
    from engine.errors import BusyError

    state = state_dir(args)
    if not (state / "state.db").is_file():
        print(f"no state directory at {state}: nothing of its own to collect")
        index_folder = None
    else:
        with Index(state, wait=args.wait) as index:
            dropped, keep, forgotten, unsure, pruned = _gc_one(index)
            index_folder = index.gcroots
        print(f"dropped {len(dropped)} GC roots; kept {len(keep)}")
        if forgotten:
            print(f"forgot {len(forgotten)} graph(s) whose file is gone: {', '.join(forgotten)}")
        if unsure:
            print(
                f"kept {len(unsure)} graph(s) whose file cannot be checked from here: "
                + ", ".join(unsure)
            )
        if pruned:
            print(f"removed {pruned} generated Nix file(s) from {state / 'build'}")
    missing: list[Path] = []
    for rf in root_folders():
        if rf.folder == index_folder or rf.state_dir is None:
            continue
        if rf.seen is False:
            missing.append(rf.folder)
            if args.prune_missing:
                remove_root_folder(rf.folder)
        elif rf.seen and args.all:
            try:
                with Index(rf.state_dir, wait=0) as other:
                    dropped, keep, *_ = _gc_one(other)
                print(f"{rf.state_dir}: dropped {len(dropped)} GC roots; kept {len(keep)}")
            except BusyError:
                print(f"{rf.state_dir}: busy (another trace is using it); left alone")
    if missing and args.prune_missing:
        print(f"removed {len(missing)} root folder(s) of state directories that do not exist now")
    elif missing:
        print(
            f"kept {len(missing)} root folder(s) of state directories that cannot be seen now "
            "(deleted, or on a file system not mounted now):",
        )
        for folder in missing:
            print(f"  {folder}")
        print("  if they are gone for good: `trace gc --prune-missing` removes their roots")
    print("run `nix-collect-garbage` to free the store paths no root holds any more")
    return 0
