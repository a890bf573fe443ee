"""The HTML report: one self-contained file, checked as text and in a real browser (headless Chromium: the DOM it
builds and a screenshot). Browser tests skip when Chromium is not installed (``apt-get install -y chromium``)."""

from __future__ import annotations

import base64
import html
import html.parser
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import markupsafe
import numpy as np
import pytest

from traceinspect.cli.main import main
from traceinspect.render import plots
from traceinspect.render.html import render_html
from traceinspect.render.text import verdict
from traceinspect.report.doc import from_dict

from public_traces import DIFF_CONTROL, need
from analyzed_runs import analyzed, empty_report, real_cpu_run, synthetic_cpu_run

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
CHROME_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars"]


class _Page(html.parser.HTMLParser):
    """Title, element ids, finding ids, image sources and every tag of a page."""

    def __init__(self):
        super().__init__()
        self.title, self.ids, self.findings, self.imgs, self.tags = "", [], [], [], []
        self._in_title = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append(tag)
        if "id" in a:
            self.ids.append(a["id"])
        if "data-finding" in a:
            self.findings.append(a["data-finding"])
        if tag == "img":
            self.imgs.append(a.get("src", ""))
        self._in_title = tag == "title"

    def handle_endtag(self, tag):
        if tag == "title":
            self._in_title = False

    def handle_data(self, data):
        if self._in_title:
            self.title += data


def parse(text: str) -> _Page:
    p = _Page()
    p.feed(text)
    return p


def assert_self_contained(text: str) -> None:
    low = text.lower()
    assert "<script" not in low and "<link" not in low and "@import" not in low
    assert not re.search(r"(src|href)\s*=\s*['\"]?(https?:)?//", low), "no network references"
    for src in re.findall(r"src='([^']*)'", text):
        assert src.startswith("data:image/png;base64,")


def test_html_control_report():
    need(DIFF_CONTROL)
    _, rep, d = analyzed(DIFF_CONTROL)
    text = render_html(d)
    assert_self_contained(text)
    page = parse(text)
    assert page.title == "traceinspect report"
    assert "Verdict: " + verdict(from_dict(d)) in html.unescape(text)
    assert page.findings == [f["id"] for f in d["findings"]] and page.findings
    for f in d["findings"]:
        assert f"finding-{f['id']}" in page.ids
        assert f"href='#finding-{f['id']}'" in text  # the summary links to it
        body = text[text.index(f"id='finding-{f['id']}'"):]
        body = body[: body.index("</article>")]
        assert f">{f['severity']}</span>" in body
        assert "<pre class=fix><code>" in body and str(markupsafe.escape(f["fix"].splitlines()[0])) in body
        assert "<table class=evidence>" in body or "<table class='evidence kv'>" in body
    # one embedded PNG per plot the report supports, each a real PNG
    figs = plots.figures(d)
    assert len(page.imgs) == len(figs) >= 2
    for src in page.imgs:
        assert base64.b64decode(src.split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    # one table row per step, with the step's wall time formatted as in the text report
    r = d["ranks"][0]
    assert f"rank-{r['rank']}" in page.ids
    for s in r["steps"]:
        assert f"<tr><td>{s['step']}</td><td>{s['wall_us'] / 1000:.2f}</td>" in text
    assert "missing-ranks" in page.ids  # world size 8, one rank


def test_html_uses_the_palette(tmp_path):
    d = analyzed(synthetic_cpu_run(tmp_path / "syn"))[2]
    text = render_html(d)
    for key in ("dataloader", "forward", "backward", "comm", "optimizer", "other"):
        assert f"background:{plots.color(key)}" in text


def test_html_empty_ish_reports(tmp_path):
    # CPU only, a rank missing, no Report object (as from a saved report.json): still a whole page
    d = analyzed(synthetic_cpu_run(tmp_path / "syn", ranks=(0, 2), world_size=3))[2]
    page = parse(render_html(d))
    assert page.title == "traceinspect report" and "missing-ranks" in page.ids and {"rank-0", "rank-2"} <= set(page.ids)
    # breakdown + ranks (+ the waterfall when findings claim time); no timeline / message sizes without GPU or sizes
    assert len(page.imgs) == 2 + bool(plots.waterfall_figure(d))
    # nothing analyzable at all
    text = render_html(empty_report())
    assert_self_contained(text)
    page = parse(text)
    assert page.title == "traceinspect report" and not page.imgs and "skipped" in page.ids
    assert "no steps found" in text


def test_cli_html_and_out_dir(tmp_path):
    folder = synthetic_cpu_run(tmp_path / "syn")
    out = tmp_path / "r.html"
    assert main(["report", str(folder), "--html", str(out), "--out", str(tmp_path / "o"), "-q", "--no-cache",
                 "--workers", "1"]) == 0
    assert parse(out.read_text()).title == "traceinspect report"
    names = sorted(p.name for p in (tmp_path / "o").iterdir())
    assert [n for n in names if n not in ("waterfall.png", "tradeoff.png")] == ["ranks.png", "report.json", "report.md",
                                                                             "step_breakdown.png"]


# ----------------------------------------------------------------------------------------------------------------
# In a real browser


def _chromium(*args: str, timeout: int = 90) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run([CHROMIUM, *CHROME_FLAGS, f"--user-data-dir={profile}", *args], capture_output=True,
                              text=True, timeout=timeout, env={**os.environ, "HOME": profile})


def _decode_png(path: Path) -> np.ndarray:
    from matplotlib.image import imread

    return imread(str(path))


@pytest.mark.slow  # starts a headless browser
@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (apt-get install -y chromium)")
def test_html_in_chromium(tmp_path, request):
    need(DIFF_CONTROL)
    _, rep, d = analyzed(DIFF_CONTROL)
    page_file = tmp_path / "report.html"
    page_file.write_text(render_html(d))
    dom = _chromium("--dump-dom", page_file.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    page = parse(dom.stdout)
    assert page.title == "traceinspect report"
    assert page.findings == [f["id"] for f in d["findings"]]
    assert "verdict" in page.ids and {"findings", "plots", "ranks"} <= set(page.ids)
    assert "script" not in page.tags

    shot = tmp_path / "shot.png"
    res = _chromium(f"--screenshot={shot}", "--window-size=1280,2600", page_file.as_uri())
    assert res.returncode == 0 and shot.exists(), res.stderr[-2000:]
    img = _decode_png(shot)[..., :3]
    assert img.shape[0] == 2600 and img.shape[1] == 1280
    # The embedded plots were decoded and drawn: the palette's compute blue and comm orange are on screen.
    for key in ("compute", "comm"):
        rgb = np.array([int(plots.PALETTE[key][i:i + 2], 16) / 255 for i in (1, 3, 5)])
        hits = (np.abs(img - rgb) < 0.02).all(axis=-1).sum()
        assert hits > 2000, (key, hits)
    # and the page is not blank
    assert (img.mean(axis=-1) < 0.5).mean() > 0.01


@pytest.mark.capture
@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (apt-get install -y chromium)")
def test_html_real_cpu_run_in_chromium(tmp_path, request):
    folder = real_cpu_run(request, "cpu_baseline_run")
    _, rep, d = analyzed(folder)
    page_file = tmp_path / "cpu.html"
    page_file.write_text(render_html(d))
    dom = _chromium("--dump-dom", page_file.as_uri())
    assert dom.returncode == 0
    page = parse(dom.stdout)
    assert page.title == "traceinspect report"
    assert page.findings == [f["id"] for f in d["findings"]]
    assert {f"rank-{r['rank']}" for r in d["ranks"]} <= set(page.ids)
