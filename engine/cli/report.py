"""CLI: `trace report BUNDLE [-o FILE.html]`, `trace report --findings DIR BUNDLE...`."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def register(sub: Any) -> None:
    from engine.cli.verify_bundle import add_verify_options

    p = sub.add_parser(
        "report",
        help="write a self-contained HTML page of a bundle, checked as verify-bundle checks it",
        description="Check BUNDLE with the code of `trace verify-bundle` (same options) and "
        "write one offline HTML page: the claim stack in order, each link with its own "
        "verification status and digest, a loud banner when the bundle does not verify. "
        "With --findings DIR: one page per bundle plus DIR/index.html, a sortable and "
        "filterable findings table. Exit 0 when every bundle verifies, 1 when one does not "
        "(the pages are written either way), 2 on bad input.",
    )
    p.add_argument("bundles", type=Path, nargs="+", metavar="BUNDLE", help="bundle directory")
    out = p.add_mutually_exclusive_group()
    out.add_argument(
        "-o",
        "--output",
        type=Path,
        default=None,
        help="HTML file to write for one bundle (default: BUNDLE.html beside the bundle)",
    )
    out.add_argument(
        "--findings", type=Path, default=None, metavar="DIR", help="write a findings page"
    )
    add_verify_options(p)
    p.set_defaults(handler=_report)


def _check_outside(out: Path, bundles: list[Path]) -> None:
    from engine.errors import InputError
    from engine.paths import cli

    for bundle in bundles:
        if not bundle.is_dir():
            raise InputError(
                "not a bundle directory",
                file=bundle,
                hint=f"pass a directory `{cli('bundle')}` wrote",
            )
        if out.resolve().is_relative_to(bundle.resolve()):
            raise InputError(
                "the page would be written inside the bundle (a file beside the payload breaks it)",
                file=out,
                hint="write it outside the bundle directory",
            )


def _report(args: argparse.Namespace) -> int:
    from engine.cli.verify_bundle import verifier_from_args
    from engine.errors import UsageError
    from engine.report.findings import write_findings
    from engine.report.jinja_env import write_page
    from engine.report.page import report_html

    bundles: list[Path] = args.bundles
    if args.findings is not None:
        _check_outside(args.findings, bundles)
        verify = verifier_from_args(args)
        verdicts: dict[Path, bool] = {}

        def remember(bundle: Path) -> Any:
            v = verify(bundle)
            verdicts[bundle] = v.passed
            return v

        index = write_findings(args.findings, bundles, remember)
        bad = [str(b) for b, ok in verdicts.items() if not ok]
        print(f"findings: {index}" + (f"\ndo not verify: {', '.join(bad)}" if bad else ""))
        return 1 if bad else 0
    if len(bundles) != 1:
        raise UsageError("one BUNDLE per page: give --findings DIR for several bundles")
    bundle = bundles[0]
    out: Path = args.output or bundle.resolve().with_name(bundle.resolve().name + ".html")
    _check_outside(out, bundles)
    verdict = verifier_from_args(args)(bundle)
    write_page(out, report_html(bundle, verdict))
    state = "verifies" if verdict.passed else "DOES NOT VERIFY (" + ", ".join(verdict.reasons) + ")"
    print(f"report: {out}\nbundle {state}")
    return 0 if verdict.passed else 1
