"""CLI: `trace report BUNDLE [-o FILE.html]` (handlers import lazily)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def register(sub: Any) -> None:
    from engine.bundle_verify.commands import add_verify_options

    p = sub.add_parser(
        "report",
        help="write a self-contained HTML page of a bundle, checked as verify-bundle checks it",
        description="Check BUNDLE with the code of `trace verify-bundle` (same options) and "
        "write one offline HTML page: the claim stack in order, each link with its own "
        "verification status and digest, a loud banner when the bundle does not verify. "
        "Exit 0 when the bundle verifies, 1 when it does not (the page is written either way).",
    )
    p.add_argument("bundle", type=Path, help="bundle directory")
    p.add_argument(
        "-o",
        "--output",
        type=Path,
        default=None,
        help="HTML file to write (default: BUNDLE.html beside the bundle)",
    )
    add_verify_options(p)
    p.set_defaults(handler=_report)


def _report(args: argparse.Namespace) -> int:
    from engine.bundle_verify.commands import verdict_from_args
    from engine.errors import InputError
    from engine.report.page import report_html
    from engine.report.render import write_page

    bundle: Path = args.bundle
    if not bundle.is_dir():
        raise InputError(
            "not a bundle directory", file=bundle, hint="pass a directory `trace bundle` wrote"
        )
    out: Path = args.output or bundle.resolve().with_name(bundle.resolve().name + ".html")
    if out.resolve().is_relative_to(bundle.resolve()):
        raise InputError(
            "the page would be written inside the bundle (a file beside the payload breaks it)",
            file=out,
            hint="write it outside the bundle directory",
        )
    verdict = verdict_from_args(args)
    write_page(out, report_html(bundle, verdict))
    state = "verifies" if verdict.passed else "DOES NOT VERIFY (" + ", ".join(verdict.reasons) + ")"
    print(f"report: {out}\nbundle {state}")
    return 0 if verdict.passed else 1
