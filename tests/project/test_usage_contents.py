"""docs/usage.md opens with a table of contents: one entry per section, in order, each link landing on
its heading (GitHub's anchors), and every section a question a user asks (issue 34)."""

from __future__ import annotations

import re

from ..conftest import ROOT


def _github_anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation other than - and _ dropped, spaces to -."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_usage_contents_list_every_section_in_order_with_working_anchors():
    text = (ROOT / "docs" / "usage.md").read_text()
    headings = re.findall(r"^### (.+)$", text, flags=re.M)
    contents = re.findall(r"^- \[(.+?)\]\(#([\w-]+)\)$", text.split("### ")[0], flags=re.M)
    assert len(headings) >= 15
    assert [title for title, _ in contents] == [h.replace("`", "") for h in headings]
    assert [anchor for _, anchor in contents] == [_github_anchor(h) for h in headings]


def test_every_usage_section_is_a_question():
    headings = re.findall(r"^#{2,3} (.+)$", (ROOT / "docs" / "usage.md").read_text(), flags=re.M)
    assert [h for h in headings if "?" not in h] == []
