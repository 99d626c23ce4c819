"""`trace waive CANDIDATE CODE --justification TEXT --key KEY`: the argparse side; the work is
engine.signoff.waive.write_waiver."""

from __future__ import annotations

import argparse
import datetime as dt
from pathlib import Path
from typing import Any

from engine.errors import UsageError


def register(sub: Any) -> None:
    p = sub.add_parser(
        "waive",
        help="sign a waiver of one reason code for one candidate's current patch",
        description="Write a DSSE-signed waiver (candidate id, patch digest, code, "
        "justification, signer, date, expiry). Decisions apply it only when the key is a "
        "maintainer's in maintainers.toml, never trace's own signing key, and only while the "
        "candidate's patch is unchanged. Default output: "
        "FORK/trace/policy/waivers/ID.CODE.json (where `trace fork` reads them; pass the "
        "directory to `trace decide --waivers`).",
    )
    p.add_argument("candidate", type=Path, help="candidate TOML file")
    p.add_argument("code", help="the reason code to waive (a waivable one)")
    p.add_argument("--justification", required=True, help="why shipping despite it is right")
    p.add_argument("--key", type=Path, required=True, help="the maintainer's private key")
    p.add_argument("--expires", metavar="YYYY-MM-DD", help="last day it applies (default: +90d)")
    p.add_argument("--today", metavar="YYYY-MM-DD", help="the signing date (default: UTC today)")
    p.add_argument("--out", type=Path, help="where to write it")
    p.add_argument("--fork", type=Path, help="default: nearest directory with a trace.toml")
    p.add_argument("--signing", type=Path, help="signing policy (its catalogue and lock)")
    p.add_argument("--maintainers", type=Path, metavar="FILE", help="maintainers policy")
    p.set_defaults(handler=cmd_waive)


def _date(value: str | None, flag: str) -> dt.date | None:
    if value is None:
        return None
    try:
        return dt.date.fromisoformat(value)
    except ValueError:
        raise UsageError(f"{flag} {value!r} is not a date", hint="use YYYY-MM-DD") from None


def cmd_waive(args: argparse.Namespace) -> int:
    from engine.signoff.waive import write_waiver

    done = write_waiver(
        args.candidate,
        args.code,
        args.justification,
        args.key,
        fork=args.fork,
        signing_policy=args.signing,
        maintainers=args.maintainers,
        out=args.out,
        today=_date(args.today, "--today") or dt.datetime.now(dt.UTC).date(),
        expires=_date(args.expires, "--expires"),
    )
    st = done.statement
    print(f"waiver: {done.path}")
    print(
        f"  {st.candidate}: {st.reason} until {st.expires.isoformat()}, "
        f"patch {st.patch_sha256[:16]}"
    )
    if done.maintainer is None:
        print(
            f"  warning: key {st.signer[:16]} is not listed in the maintainers policy: "
            "decisions ignore this waiver until it is"
        )
    else:
        print(f"  signed by maintainer {done.maintainer} (key {st.signer[:16]})")
    return 0
