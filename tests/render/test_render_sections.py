"""Every renderer shows the same sections with the same numbers, written one way (``render.format``): the terminal,
Markdown and HTML reports of real traces, a CPU-only run and an empty report."""

from __future__ import annotations

import copy
import html as htmllib
import re
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from traceinspect.config import Config
from traceinspect.render import format as fmt, sections
from traceinspect.render.html import render_html
from traceinspect.render.markdown import render_markdown
from traceinspect.render.text import render_text
from traceinspect.render.vocabulary import SYNTHETIC_NOTE
from traceinspect.report.doc import from_dict
from traceinspect.run.api import analyze_path

from public_traces import BERT, DDP_2RANK, DIFF_CONTROL, need

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "gpu" / "big_baseline"
# A number in scientific notation, or a float with more than 4 decimals: never in a rendered report.
RAW_NUMBER = re.compile(r"\b\d+(\.\d+)?e[+-]\d+\b|\b\d+\.\d{5,}\b")


def _report(folder) -> dict:
    return analyze_path(str(folder), Config(use_cache=False, workers=1)).to_dict()


def _pages(d: dict) -> dict[str, str]:
    page = render_html(d)
    body = re.sub(r"<style>.*?</style>", "", page, flags=re.S)
    body = re.sub(r"src='data:image/png;base64,[^']*'", "", body)
    shown = MarkdownIt("commonmark").enable("table").render(render_markdown(d))  # Markdown as a reader sees it
    return {"text": render_text(d, width=120), "markdown": htmllib.unescape(re.sub(r"<[^>]+>", " ", shown)),
            "html": htmllib.unescape(re.sub(r"<[^>]+>", " ", body))}


@pytest.mark.parametrize("folder", [FIXTURE, DDP_2RANK, DIFF_CONTROL], ids=lambda p: p.name)
def test_same_sections_and_numbers_everywhere(folder):
    need(folder)
    d = _report(folder)
    pages = _pages(d)
    doc = from_dict(d)
    verdict = sections.verdict(doc)
    for name, text in pages.items():
        flat = " ".join(text.split())
        assert " ".join(verdict.split()) in flat, name
        assert "Where the step could go" in text, name  # the waterfall
        assert "Findings (" in text, name
        assert "nvidia-smi view" in text, name
        for f in d["findings"]:
            assert f["id"] in text, (name, f["id"])
        for r in doc.ranks:
            u = sections.utilization(r)
            if u:
                assert " ".join(u.split()) in flat, name
            for s in sections.shown_steps(r.steps):
                for cell in sections.step_cells(r, s):  # each cell of the step table, as the formatter wrote it
                    assert cell in text, (name, cell)
        assert not RAW_NUMBER.search(text), (name, RAW_NUMBER.search(text).group(0))
        assert "{'" not in text and "': " not in text, name  # no raw dicts
    # Markdown has the all-reduce columns the terminal has
    if any(sections.has_allreduce(r) for r in doc.ranks):
        assert "| AR n | AR MB |" in render_markdown(d) and "AR n" in pages["text"]


def test_step_table_numbers_against_the_document():
    """The step table's cells are the document's values: wall and loader in ms, copies in MB, shares of the step."""
    need(FIXTURE)
    d = _report(FIXTURE)
    r = from_dict(d).ranks[0]
    head = sections.step_header(r)
    for s in r.steps:
        row = dict(zip(head, sections.step_cells(r, s)))
        assert float(row["wall ms"]) == pytest.approx(s.wall_us / 1000, abs=0.005)
        assert float(row["pgbl MB"]) == pytest.approx(s.pageable_h2d_bytes / 1e6, abs=0.05)
        assert float(row["idle %"]) == pytest.approx(100 * s.breakdown_us["idle"] / s.wall_us, abs=0.5)
        assert int(row["AR n"]) == s.allreduce_count


def test_html_second_table_has_one_heading():
    need(DIFF_CONTROL)
    page = render_html(_report(DIFF_CONTROL))
    heads = re.findall(r"<table class=evidence><tr><th>([^<]*)</th>", page)
    assert heads and set(heads) == {"evidence"}
    assert "rule thresholds" not in page


def test_synthetic_step_is_explained(tmp_path):
    need(BERT)
    d = _report(BERT)
    if not sections.any_synthetic(from_dict(d)):  # make one step synthetic: the note must follow it, in every renderer
        d = copy.deepcopy(d)
        d["ranks"][0]["steps"][0]["synthetic"] = True
    for name, text in _pages(d).items():
        assert "*" in text and SYNTHETIC_NOTE in " ".join(text.split()), name


def test_empty_report_renders_every_page():
    d = {"schema": "traceinspect.report/1", "source": "nowhere", "world_size": 2, "ranks_analyzed": 0, "ranks": [],
         "findings": [], "skipped": [{"file": "rank0.json", "reason": "truncated"}], "missing_ranks": [0, 1],
         "cross_rank": {}, "errors": []}
    for name, text in _pages(d).items():
        assert "no steps found" in text and "rank0.json" in text and "Skipped files (1)" in text, name


def test_formatter():
    # constructed values: the formatter's own rules
    assert fmt.number(37040.200846354164) == "37,040" and fmt.number(1.19e3) == "1,190"
    assert fmt.number(0.0139) == "0.0139" and fmt.number(6.714e7) == "67,140,000"
    assert fmt.mib(0.01 * (1 << 20) // 1 / (1 << 20)) == "0.01 MiB"  # DDP stores int(0.01 MiB) bytes
    assert fmt.count(1, "window") == "1 window" and fmt.count(2, "step") == "2 steps"
    assert fmt.count(1, "all-reduce call", about=True) == "about 1 all-reduce call"
    assert fmt.count(3, "copy") == "3 copies" and fmt.count(None, "step") == "- steps"
    assert fmt.ms(17736.4) == "17.74 ms" and fmt.ms(None) == "-" and fmt.ms(4.2) == "4.2 us"
    assert fmt.mb(67141632) == "67.1 MB" and fmt.pct(0.205) == "20.5 %" and fmt.gbps(6.0912) == "6.09 GB/s"
    assert fmt.value("idle_split_us_per_step", {"dataloader": 37040.2, "sync": 702.3},
                     units={"idle_split_us_per_step": "ms"}) == "dataloader 37.04 ms, sync 0.70 ms"  # a mapping's unit
    assert fmt.label("pageable_h2d_bytes_per_step") == "pageable H2D per step"
    assert fmt.label("idle_us_per_step") == "idle time per step"
    assert fmt.ranges([0, 1, 2, 5]) == "0-2, 5" and fmt.ranges([]) == "-"
    assert fmt.signed_ms(-0.004) == "+0.00 ms"  # rounds to zero: no "-0.00"


def test_sections_in_the_same_order_everywhere():
    need(FIXTURE)
    from traceinspect.render.vocabulary import SECTIONS

    d = _report(FIXTURE)
    d["skipped"] = [{"file": "rank9.json", "reason": "truncated"}]  # constructed: so the last section shows too
    markers = {"verdict": "Verdict", "waterfall": "Where the step could go", "findings": "Findings (",
               "steps": "Rank 0 ·", "utilization": "nvidia-smi view", "skipped": "Skipped files ("}
    for text in (render_text(d, width=120), render_markdown(d)):
        where = [text.index(markers[k]) for k, _ in SECTIONS]
        assert where == sorted(where)
    ids = re.findall(r"<(?:section|div class='[^']*') id=['\"]?([\w-]+)", render_html(d))
    html_ids = {"verdict": "verdict", "waterfall": "waterfall", "findings": "findings", "steps": "ranks",
                "utilization": "utilization", "skipped": "skipped"}
    where = [ids.index(html_ids[k]) for k, _ in SECTIONS]
    assert where == sorted(where)
