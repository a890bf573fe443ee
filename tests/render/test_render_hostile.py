"""Names are data in every renderer: a hostile copy of a real fixture (``hostile_names.py``: op and device names, a file
name and the folder path holding terminal escapes, OSC-8 links, rich markup, HTML, ``</script>``, Markdown, mathtext
and a 1 MB name) renders as text everywhere, bounded, and the JSON report keeps every name whole."""

from __future__ import annotations

import html.parser
import json
import re

import pytest

from traceinspect.cli.main import main
from traceinspect.config import Config
from traceinspect.render import plots, safe
from traceinspect.render.html import render_html
from traceinspect.render.markdown import render_markdown
from traceinspect.render.text import render_text
from traceinspect.run.api import analyze_path

from hostile_names import BAD_FILE, BIG, EVIL, FIXTURE, hostile_folder

# Any control character but the newline: nothing of the kind may reach a terminal or a page from a name.
CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    folder = hostile_folder(tmp_path_factory.mktemp("hostile"))
    return folder, analyze_path(str(folder), Config(use_cache=False, workers=1)).to_dict()


def test_json_keeps_every_name_whole(hostile, tmp_path):
    folder, _ = hostile
    out = tmp_path / "r.json"
    assert main(["report", str(folder), "--json", str(out), "-q", "--no-cache", "--workers", "1"]) == 0
    d = json.loads(out.read_text())
    assert d["source"] == str(folder)
    assert d["ranks"][0]["device"] == BIG  # the 1 MB name, whole
    host_sync = next(f for f in d["findings"] if f["id"] == "host-sync")
    assert EVIL in [c["op"] for c in host_sync["evidence"]["per_rank"][0]["top_calls"]]
    assert [s["file"] for s in d["skipped"]] == [str(folder / BAD_FILE)]


def test_terminal_prints_names_as_text(hostile, capsys):
    folder, d = hostile
    assert main(["report", str(folder), "--no-cache", "--workers", "1", "--width", "120"]) == 0  # was a traceback
    out, err = capsys.readouterr()
    assert not CONTROL.search(out) and not CONTROL.search(err)
    assert f"traceinspect report: {folder}".replace("\x1b", "\\x1b") in out  # the path's "[/x]" and "[bold]" as written
    assert "bad[red]\\x1b[2J<b>.pt.trace.json" in out and "bad[red]\\x1b[2J<b>.pt.trace.json" in err
    # the 1 MB device name: shortened to NAME_WIDTH in the rank's title; the report stays small
    title = next(x for x in out.splitlines() if x.startswith("Rank 0 · "))
    assert "aten::" + "A" * (safe.NAME_WIDTH - 7) + safe.ELLIPSIS + " · 3 steps" in title
    assert len(out) < 20_000, len(out)


def saved_with_evil_titles(d: dict, path) -> dict:
    """The hostile report saved as report.json with every finding's title, and its fix, also ``EVIL`` (a saved report
    is an input too: ``traceinspect render`` reads it)."""
    doc = json.loads(json.dumps(d))
    for f in doc["findings"]:
        f["title"] = EVIL + " " + f["title"]
        f["fix"] = EVIL + "\n" + f["fix"]
    path.write_text(json.dumps(doc))
    return doc


def test_render_of_a_saved_report_prints_titles_as_text(hostile, tmp_path, capsys):
    _, d = hostile
    saved = tmp_path / "report.json"
    saved_with_evil_titles(d, saved)
    assert main(["render", str(saved), "--width", "120"]) == 0
    out, err = capsys.readouterr()
    assert not CONTROL.search(out) and not CONTROL.search(err)
    assert "\\x1b[2J\\x1b[H\\x1b]8;;https://evil.example/\\x1b\\click me" in out
    assert "[/x] [bold]bold[/bold] :smile: <script>" in " ".join(out.split())  # markup, emoji codes as written
    assert not any(x.startswith(("# heading", "- item")) for x in out.splitlines())


def test_terminal_in_colour_has_only_our_escapes(hostile, tmp_path):
    _, d = hostile
    text = render_text(saved_with_evil_titles(d, tmp_path / "r.json"), width=120, color=True)
    sgr = re.compile(r"\x1b\[[0-9;]*m")  # rich's own colours: nothing else
    assert not CONTROL.search(sgr.sub("", text))


def test_markdown_shows_names_literally(hostile, tmp_path):
    _, d = hostile
    md = render_markdown(saved_with_evil_titles(d, tmp_path / "r.json"))
    assert not CONTROL.search(md)
    # Outside fenced code (literal text, whose fence a line of the fix cannot close), no HTML and no new block
    lines, fence = [], None
    for x in md.splitlines():
        if fence is None and x.startswith("```"):
            fence = x[: len(x) - len(x.lstrip("`"))]
        elif fence is not None and x == fence:
            fence = None
        elif fence is None:
            lines.append(x)
    assert fence is None  # every block closed by its own fence
    outside = "\n".join(lines).lower()
    assert "<script" not in outside and "<img" not in outside and "</script" not in outside
    assert "&lt;script>" in outside
    assert not any(x.lstrip().startswith(("# heading", "- item", "| a | b |")) for x in lines)
    # every row of every table has its header's number of cells (an escaped pipe is not a cell border)
    for i, line in enumerate(lines):
        if line.startswith("|") and i + 1 < len(lines) and re.fullmatch(r"\|(-+:?\|)+", lines[i + 1]):
            width = len(re.split(r"(?<!\\)\|", line))
            for row in lines[i + 2:]:
                if not row.startswith("|"):
                    break
                assert len(re.split(r"(?<!\\)\|", row)) == width, row[:200]
    # code spans and fences that a backtick in a name cannot close
    src = next(x for x in lines if x.startswith("Source: "))
    assert src.startswith("Source: `") and src.count("`") == 2
    assert len(md) < 20_000, len(md)


class _Scripts(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.attrs = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs += [(tag, k, v) for k, v in attrs]


def test_html_has_no_script_and_fetches_nothing(hostile, tmp_path):
    _, d = hostile
    page = render_html(saved_with_evil_titles(d, tmp_path / "r.json"))
    p = _Scripts()
    p.feed(page)
    assert "script" not in p.tags and "img" in p.tags
    assert not [a for a in p.attrs if a[1].startswith("on")]  # no event handler from a name
    for tag, k, v in p.attrs:
        if k in ("src", "href"):
            assert v.startswith(("data:image/png;base64,", "#")), (tag, k, v[:80])
    assert "default-src 'none'" in page  # the Content-Security-Policy
    assert "&lt;/script&gt;" in page and not CONTROL.search(page)
    body = re.sub(r"base64,[^']*'", "", page)
    assert len(body) < 60_000, len(body)


def test_plots_draw_hostile_names_as_text(hostile):
    _, d = hostile
    figs = plots.figures(d)
    assert figs
    for fig in figs.values():
        plots.png_bytes(fig)  # draws every text: a mathtext parse error would raise here
    # a collective named with mathtext and escapes: its label is the name, shortened, dollars escaped
    doc = json.loads(json.dumps(d))
    for s in doc["ranks"][0]["steps"]:
        for c in s.get("collectives") or []:
            c["name"] = "$x^2$ " + EVIL + BIG
    fig = plots.message_sizes_figure(doc)
    assert fig is not None
    plots.png_bytes(fig)
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert any(r"\$x^2\$" in x and "\\x1b" in x for x in labels), labels
    assert all(len(x.split("\n")[0]) <= safe.NAME_WIDTH + 4 for x in labels)  # "$" escaped adds a backslash each


def test_tensorboard_text_is_escaped(hostile, tmp_path):
    pytest.importorskip("tensorboard")
    from traceinspect.render.tensorboard import findings_markdown
    from traceinspect.report.doc import from_dict

    _, d = hostile
    text = findings_markdown(from_dict(saved_with_evil_titles(d, tmp_path / "r.json")), 0)
    assert not CONTROL.search(text)
    prose = [x for x in text.splitlines() if not x.startswith("    ")]  # the fix is an indented (literal) code block
    assert "<script" not in "\n".join(prose) and "&lt;script>" in "\n".join(prose)
    assert not any(x.lstrip().startswith(("# heading", "- item")) for x in prose)
    assert len(text) < 20_000


def test_the_fixture_is_real():
    assert list(FIXTURE.glob("*.pt.trace.json.gz"))
