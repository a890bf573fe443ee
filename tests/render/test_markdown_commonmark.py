"""The Markdown report as a CommonMark library renders it (markdown-it-py, with GitHub's tables and strikethrough,
and without them: plain CommonMark), for every real fixture folder and the public traces when present: no literal
backslash before a digit, no backslash at all that the report's own strings do not hold, and the names from the
traces (devices, ranks, finding titles, step cells) shown exactly as the report holds them. A hostile copy of a real
fixture (``hostile_names.py``) renders to text only: no HTML element, no heading, list or link from a name."""

from __future__ import annotations

import html
import re

import pytest
from markdown_it import MarkdownIt

import traceinspect
from traceinspect.cli.main import main
from traceinspect.config import Config
from traceinspect.render import safe, sections
from traceinspect.render.markdown import render_markdown
from traceinspect.report.doc import from_dict

from fixture_reports import FOLDERS, ROOT, folder_id, report
from hostile_names import EVIL, hostile_folder

GFM = MarkdownIt("commonmark").enable(["table", "strikethrough"])
COMMONMARK = MarkdownIt("commonmark")


def inline_text(token) -> str:
    """What a reader sees of one inline token: its text and code, HTML entities decoded."""
    parts = []
    for c in token.children or []:
        if c.type in ("text", "code_inline"):
            parts.append(c.content)
        elif c.type in ("softbreak", "hardbreak"):
            parts.append(" ")
    return html.unescape("".join(parts))


def blocks(md: str, parser=GFM) -> list[tuple[str, str]]:
    """(enclosing block, text) of every inline run of the rendered document: ``h3``, ``td``, ``p``, ``li`` ..."""
    out, stack = [], []
    for t in parser.parse(md):
        if t.nesting == 1:
            stack.append(t.tag)
        elif t.nesting == -1:
            stack.pop()
        elif t.type == "inline":
            out.append((stack[-1] if stack else "", inline_text(t)))
    return out


def strings(x):
    if isinstance(x, str):
        yield x
    elif isinstance(x, dict):
        for k, v in x.items():
            yield from strings(k)
            yield from strings(v)
    elif isinstance(x, list):
        for v in x:
            yield from strings(v)


def test_every_fixture_is_found():
    assert len(FOLDERS) >= 100 and ROOT / "fixtures" / "gpu" / "big_baseline" in FOLDERS


@pytest.mark.slow  # a sweep over every trace at hand
@pytest.mark.parametrize("folder", FOLDERS, ids=folder_id)
def test_markdown_renders_without_stray_backslashes(folder):
    d = report(folder)
    md = render_markdown(d)
    report_has_backslash = any("\\" in s for s in strings(d))
    for parser in (GFM, COMMONMARK):
        rendered = blocks(md, parser)
        text = "\n".join(t for _, t in rendered)
        assert not re.search(r"\\\d", text), re.findall(r".{0,30}\\\d.{0,10}", text)[:3]
        if not report_has_backslash:
            assert "\\" not in text, re.findall(r".{0,30}\\.{0,10}", text)[:3]
        assert not re.search(r"<(?!/?(p|h[1-3]|ul|ol|li|table|thead|tbody|tr|th|td|code|pre|strong|em)\b)",
                             parser.render(md))  # no element we did not write
    rendered = blocks(md)
    h3 = [t for tag, t in rendered if tag == "h3"]
    doc = from_dict(d)
    for r in doc.ranks:  # rank titles (device names from the trace) as the report holds them
        assert safe.words(sections.rank_title(r)) in h3 or sections.rank_title(r) in h3
    for f in doc.findings:
        assert f"{f.id} ({f.severity}): {sections.title(f)}" in h3
    cells = [t for tag, t in rendered if tag == "td"]
    for r in doc.ranks:
        for s in sections.shown_steps(r.steps):
            assert all(c in cells for c in sections.step_cells(r, s))


def test_big_baseline_values_start_with_digits():
    """The values the report printed as ``\\67.1 MB/step`` and ``| \\43.66 ms |``: no backslash in the source either."""
    md = render_markdown(report(ROOT / "fixtures" / "gpu" / "big_baseline"))
    assert not re.search(r"\\\d", md)
    assert re.search(r"\| \d+\.\d+ ms \|", md)  # a table cell that starts with a digit, as written


def test_diff_markdown_renders_without_stray_backslashes(tmp_path):
    gpu = ROOT / "fixtures" / "gpu"
    out = tmp_path / "d.md"
    assert main(["diff", str(gpu / "big_baseline"), str(gpu / "big_optimized"), "--markdown", str(out), "-q"]) in (0, 1)
    md = out.read_text()
    text = "\n".join(t for _, t in blocks(md))
    assert "big_baseline" in text and not re.search(r"\\", text)


def test_hostile_names_render_as_text(tmp_path):
    folder = hostile_folder(tmp_path)
    md = render_markdown(traceinspect.report_folder(str(folder), Config(use_cache=False, workers=1)).to_dict())
    for parser in (GFM, COMMONMARK):
        page = parser.render(md)
        tags = set(re.findall(r"<([a-z0-9]+)", page))
        assert tags <= {"h1", "h2", "h3", "p", "ul", "li", "table", "thead", "tbody", "tr", "th", "td", "code", "pre",
                        "strong", "em"}, tags
        assert "<h1>" in page and page.count("<h1>") == 1  # "# heading" in a name is no heading
        text = "\n".join(t for _, t in blocks(md, parser))
        assert "<script>alert(1)</script>" in text and "<img src=x onerror=alert(2)>" in text
        assert "[/x] [bold]bold[/bold] :smile:" in text and "*em* _u_ $x^2$" in text
        assert "\\x1b[2J" in text and "\x1b" not in text  # escapes shown, never sent
        assert safe.visible(EVIL)[:20] in text  # the name as written, from its start
