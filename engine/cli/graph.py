"""`trace graph GRAPH`: the step graph as Graphviz dot, Mermaid, an SVG or an HTML page."""

from __future__ import annotations

import argparse
import json
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
    import networkx as nx

    from engine.graph import load_graph

    graph = load_graph(args.graph, root=root(args))
    if args.format in ("svg", "html"):
        from engine.report.graph import graph_picture

        print(graph_picture(graph, args.format))
        return 0
    g = nx.DiGraph()
    for sid, step in graph.steps.items():
        g.add_node(sid, kind=step.kind)
        g.add_edges_from((n, sid) for n in step.needs)
    ids = {sid: f"n{i}" for i, sid in enumerate(graph.order)}
    out: list[str] = []
    if args.format == "dot":
        out.append("digraph trace {\n  rankdir=LR;")
        for layer, nodes in enumerate(nx.topological_generations(g)):
            out.append(f"  {{ rank=same; // layer {layer}")
            for sid in sorted(nodes):
                label = json.dumps(f"{sid}\n({g.nodes[sid]['kind']})")  # JSON's \n = DOT's
                out.append(f"    {ids[sid]} [label={label}];")
            out.append("  }")
        out.extend(f"  {ids[a]} -> {ids[b]};" for a, b in sorted(g.edges))
        out.append("}")
    else:
        out.append("flowchart LR")
        for sid in graph.order:
            out.append(f'  {ids[sid]}["{sid} ({g.nodes[sid]["kind"]})"]')
        out.extend(f"  {ids[a]} --> {ids[b]}" for a, b in sorted(g.edges))
    print("\n".join(out))
    return 0
