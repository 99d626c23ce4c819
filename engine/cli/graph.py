"""`trace graph GRAPH`: the step graph as Graphviz dot, Mermaid, an SVG or an HTML page."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from engine.cli.args import root


def register(sub: Any) -> None:
    p = sub.add_parser(
        "graph", help="print the step graph as Graphviz dot, Mermaid, an SVG or an HTML page"
    )
    p.add_argument("graph", type=Path)
    p.add_argument("--root", type=Path, default=None)
    p.add_argument("--format", choices=["dot", "mermaid", "svg", "html"], default="dot")
    p.set_defaults(handler=cmd_graph)


def cmd_graph(args: argparse.Namespace) -> int:
    from engine.graph import load_graph
    from engine.report.draw import draw

    print(draw(load_graph(args.graph, root=root(args)), args.format))
    return 0
