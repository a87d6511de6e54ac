"""The documentation a newcomer reads: a short front page, links that lead somewhere, and pages that
speak of the product rather than of the project's issue tracker.

README.md is the front page (at most 400 lines); everything else lives in docs/. Every relative link in
README.md and docs/*.md must name a file that exists and, when it carries a #fragment, a heading of that
file (GitHub's anchor rules).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
README = REPO_ROOT / "README.md"
DOCS_DIR = REPO_ROOT / "docs"

# The front page stays short enough to read in one sitting; the details are one link away.
README_MAX_LINES = 400

# Pages that other work in progress adds. A link to one of them may point nowhere until it lands.
# When a page lands, remove it from this set (test_expected_soon_pages_are_still_missing says which).
EXPECTED_SOON_PAGES: frozenset[str] = frozenset()

# "issue 27", "Issues 6", "issue #15", "finding 3": the tracker's numbers mean nothing to a reader.
ISSUE_REFERENCE = re.compile(r"\b(?:issues?\s+#?\d+|findings?\s+\d+)", re.IGNORECASE)

_FENCE = re.compile(r"^\s*(```|~~~)")
_INLINE_CODE = re.compile(r"`[^`]*`")
_LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def _prose_lines(text: str) -> Iterator[tuple[int, str]]:
    """Lines outside fenced code blocks, with their 1-based numbers."""
    in_fence = False
    for number, line in enumerate(text.splitlines(), start=1):
        if _FENCE.match(line):
            in_fence = not in_fence
            continue
        if not in_fence:
            yield number, line


def slugify(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lower case, punctuation removed, spaces to '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading keeps its text
    text = text.replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text: str) -> frozenset[str]:
    seen: dict[str, int] = {}
    result: set[str] = set()
    for _, line in _prose_lines(text):
        match = _HEADING.match(line)
        if not match:
            continue
        slug = slugify(match.group(2))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        result.add(slug if count == 0 else f"{slug}-{count}")
    return frozenset(result)


@functools.cache
def _anchors_of(path: Path) -> frozenset[str]:
    return anchors(path.read_text(encoding="utf-8"))


def relative_links(text: str) -> list[tuple[int, str]]:
    """(line, target) of every link that is not a URL with a scheme, outside code."""
    links = []
    for number, line in _prose_lines(text):
        for target in _LINK.findall(_INLINE_CODE.sub("", line)):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, flags=re.IGNORECASE):
                continue  # https:, mailto:, ...
            links.append((number, target))
    return links


def _doc_files() -> list[Path]:
    return [README, *sorted(DOCS_DIR.glob("*.md"))]


def _rel(path: Path) -> str:
    return path.relative_to(REPO_ROOT).as_posix()


@pytest.mark.parametrize(
    ("heading", "slug"),
    [
        ("Install and operations (kustomize)", "install-and-operations-kustomize"),
        ("Network policy: let the API server through", "network-policy-let-the-api-server-through"),
        (
            "Client certificates: only the API server may call /mutate",
            "client-certificates-only-the-api-server-may-call-mutate",
        ),
        ("The runner (`python -m entrypoint`)", "the-runner-python--m-entrypoint"),
        ("2. Apply", "2-apply"),
        ("`make dev-up`: the same stack, to explore by hand", "make-dev-up-the-same-stack-to-explore-by-hand"),
        ("Restarts: picked up, or retried", "restarts-picked-up-or-retried"),
    ],
    ids=["parentheses", "colon", "slash", "code", "numbered", "code-and-colon", "comma"],
)
def test_slugify_follows_githubs_anchor_rules(heading: str, slug: str) -> None:
    assert slugify(heading) == slug


def test_anchors_number_repeated_headings_and_skip_code() -> None:
    text = "# Title\n## Troubleshooting\n```sh\n# not a heading\n```\n### Troubleshooting\n"
    assert anchors(text) == {"title", "troubleshooting", "troubleshooting-1"}


def test_relative_links_skip_urls_code_and_fences() -> None:
    text = (
        "See [a](docs/a.md#x) and [b](https://example.com) and `[c](c.md)`.\n"
        "```\n[d](d.md)\n```\n"
        '[e](docs/e.md "a title") [g](#local)\n'
    )
    assert relative_links(text) == [(1, "docs/a.md#x"), (5, "docs/e.md"), (5, "#local")]


def test_readme_is_a_front_page() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines (at most {README_MAX_LINES}): move the details into a docs/ page and link it"
    )


@pytest.mark.parametrize("path", _doc_files(), ids=_rel)
def test_every_relative_link_resolves(path: Path) -> None:
    broken = []
    for line, target in relative_links(path.read_text(encoding="utf-8")):
        file_part, _, fragment = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        name = _rel(linked) if linked.is_relative_to(REPO_ROOT) else str(linked)
        if not linked.exists():
            if name not in EXPECTED_SOON_PAGES:
                broken.append(f"{_rel(path)}:{line}: {target}: no such file")
            continue
        if fragment and linked.suffix == ".md" and fragment not in _anchors_of(linked):
            broken.append(f"{_rel(path)}:{line}: {target}: no heading with anchor #{fragment} in {name}")
    assert not broken, "broken links:\n" + "\n".join(broken)


@pytest.mark.parametrize("path", _doc_files(), ids=_rel)
def test_pages_speak_of_the_product_not_of_issue_numbers(path: Path) -> None:
    found = [
        f"{_rel(path)}:{number}: {match.group(0)!r}"
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        for match in ISSUE_REFERENCE.finditer(line)
    ]
    assert not found, "say what the product does instead of naming an issue:\n" + "\n".join(found)


def test_expected_soon_pages_are_still_missing() -> None:
    landed = sorted(page for page in EXPECTED_SOON_PAGES if (REPO_ROOT / page).exists())
    assert not landed, f"remove from EXPECTED_SOON_PAGES, so their links are checked (they exist now): {landed}"


def test_docs_pages_exist() -> None:
    assert DOCS_DIR.is_dir()
    assert sorted(DOCS_DIR.glob("*.md")), "docs/ holds the pages the front page links to"
