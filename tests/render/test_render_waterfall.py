"""The waterfall: measured step, each finding's claim, projected step, read from the document's accounting fields
(``verdict``, per rank ``step_us``, ``projected_step_us``, ``claims``) on real reports."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from traceinspect.config import Config
from traceinspect.render import plots, waterfall
from traceinspect.render.markdown import render_markdown
from traceinspect.render.text import render_text
from traceinspect.report.doc import from_dict
from traceinspect.run.api import analyze_path

from public_traces import DDP_2RANK, need

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "gpu" / "big_baseline"


def _report(folder) -> dict:
    return analyze_path(str(folder), Config(use_cache=False, workers=1)).to_dict()


@pytest.mark.parametrize("folder", [FIXTURE, DDP_2RANK], ids=lambda p: p.name)
def test_waterfall_is_the_claims(folder):
    need(folder)
    d = _report(folder)
    w = waterfall.rows(from_dict(d))
    r = next(x for x in d["ranks"] if x["rank"] == d["verdict"]["rank"])
    assert w.rank == r["rank"] and w.step_us == r["step_us"] and w.projected_step_us == r["projected_step_us"]
    drawn = {c.id: c.us for c in w.claims}
    claimed = {c["id"]: c["us"] for c in r["claims"] if c["us"]}
    assert all(claimed[k] == v for k, v in drawn.items())
    assert set(claimed) - set(drawn) == {k for k, v in claimed.items() if v < waterfall.MIN_US}
    # the bars step down from the measured step; what is left is (to the claims too small to draw) the projection
    assert w.claims == sorted(w.claims, key=lambda c: -c.from_us)
    assert w.step_us - sum(drawn.values()) == pytest.approx(
        w.projected_step_us, abs=waterfall.MIN_US * (len(claimed) - len(drawn)) + 1e-3)
    ax = plots.waterfall_figure(d).axes[0]
    bars = {p.get_gid()[3:]: p for p in ax.patches if (p.get_gid() or "").startswith("wf:")}
    assert bars["measured"].get_width() == pytest.approx(w.step_us / 1000)
    assert bars["projected"].get_width() == pytest.approx(w.projected_step_us / 1000)
    for c in w.claims:
        assert bars[c.id].get_width() == pytest.approx(c.us / 1000)
        assert bars[c.id].get_x() + bars[c.id].get_width() == pytest.approx(c.from_us / 1000)
    text, md = render_text(d), render_markdown(d)
    for c in w.claims:
        assert f"- {c.id}" in text and f"`{c.id}`" in md


def test_text_bars_are_to_scale():
    need(FIXTURE)
    w = waterfall.rows(from_dict(_report(FIXTURE)))
    lines = waterfall.bar_lines(w, width=40)
    full = lines[0].count(waterfall.BAR)
    assert full == 40
    for line, c in zip(lines[1:], w.claims):
        assert line.count(waterfall.BAR) == pytest.approx(40 * c.us / w.step_us, abs=1.01)


def test_no_claims_no_waterfall():
    need(FIXTURE)
    d = copy.deepcopy(_report(FIXTURE))
    d.pop("verdict", None)
    for r in d["ranks"]:  # a report saved before the accounting existed
        for k in ("step_us", "projected_step_us", "claims"):
            r.pop(k, None)
    assert waterfall.rows(from_dict(d)) is None and plots.waterfall_figure(d) is None
    assert "Where the step could go" not in render_text(d) and "Where the step could go" not in render_markdown(d)
