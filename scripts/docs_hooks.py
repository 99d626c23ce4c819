"""mkdocs hooks (mkdocs.yml): README.md becomes the site's home page and ARCHITECTURE.md a page,
read from the repository root so each file has one copy. Links are written for GitHub, where
README.md sits above docs/; on the site every page sits side by side, so those links are
rewritten here (and a link that still points nowhere fails the strict build). A page of docs/
that mkdocs.yml's nav does not list yet is added at the nav's end under its first heading, so a
new page is on the site the day it lands (list it in the nav, and in the README, to place it)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parent.parent
# repository-root file -> its page on the site
ROOT_PAGES = {"README.md": "index.md", "ARCHITECTURE.md": "ARCHITECTURE.md"}
LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")


def _listed(nav: list[Any]) -> set[str]:
    out: set[str] = set()
    for item in nav:
        for value in item.values() if isinstance(item, dict) else [item]:
            out |= _listed(value) if isinstance(value, list) else {str(value)}
    return out


def _title(page: Path) -> str:
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return page.stem


def on_config(config: Any) -> Any:
    nav = config["nav"]
    listed = _listed(nav)
    docs = Path(config["docs_dir"])
    nav.extend({_title(p): p.name} for p in sorted(docs.glob("*.md")) if p.name not in listed)
    return config


def on_files(files: Files, config: Any) -> Files:
    for name, page in ROOT_PAGES.items():
        files.append(File.generated(config, page, abs_src_path=str(ROOT / name)))
    return files


def _site_target(target: str, from_root: bool) -> str:
    """A link as the site sees it: `docs/x.md` from a root file is `x.md`; `../README.md` from a
    docs page is `index.md`."""
    if from_root and target.startswith("docs/"):
        return target.removeprefix("docs/")
    if not from_root and target.startswith("../"):
        rest, _, anchor = target.removeprefix("../").partition("#")
        if rest in ROOT_PAGES:
            return ROOT_PAGES[rest] + (f"#{anchor}" if anchor else "")
    return target


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    from_root = page.file.src_uri in ROOT_PAGES.values() and page.file.generated_by is not None
    return LINK.sub(lambda m: f"]({_site_target(m['target'], from_root)})", markdown)
