"""README.md and docs/*.md hold together: every relative link and anchor resolves, and every `rlsweep
VERB` and `make TARGET` they show exists."""

import re
from pathlib import Path

from orchestrator.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MISTYPED_ON_PURPOSE = {"reprot"}  # docs/commands.md shows the nearest-name hint for a mistyped verb


def _slugs(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens, repeats numbered."""
    seen: dict[str, int] = {}
    slugs = set()
    fenced = False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        if fenced or not line.startswith("#"):
            continue
        title = line.lstrip("#").strip().lower()
        slug = re.sub(r"[^\w\- ]", "", title).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        slugs.add(slug if count == 0 else f"{slug}-{count}")
    return slugs


def _code(page: Path) -> str:
    """The page's fenced blocks and inline code spans, one per line."""
    text = page.read_text()
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", text, re.S | re.M)
    prose = re.sub(r"^```[^\n]*\n.*?^```", "", text, flags=re.S | re.M)
    return "\n".join(blocks + re.findall(r"`([^`\n]+)`", prose))


def test_every_relative_link_and_anchor_resolves():
    broken = []
    for page in PAGES:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if re.match(r"[a-z]+://", target):
                continue
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            if not linked.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and anchor not in _slugs(linked):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert broken == []


def test_every_command_shown_exists():
    verbs = set(build_parser().verbs) | MISTYPED_ON_PURPOSE
    targets = set(re.findall(r"^([a-z][\w-]*):", (ROOT / "Makefile").read_text(), re.M))
    unknown = []
    for page in PAGES:
        code = _code(page)
        unknown += [
            f"{page.relative_to(ROOT)}: rlsweep {verb}"
            for verb in re.findall(r"(?:^|[\s(;&|])rlsweep ([a-z][a-z-]*)", code, re.M)
            if verb not in verbs
        ]
        unknown += [
            f"{page.relative_to(ROOT)}: make {target}"
            for target in re.findall(r"(?:^|[\s(;&|])make ([a-z][a-z-]*)", code, re.M)
            if target not in targets
        ]
    assert unknown == []
