"""Plots: every drawn number is checked against the report dict (or recomputed from the events), on real traces,
on CPU-only traces, and on empty-ish reports (no GPU events, a rank missing, no steps at all).

The reports come from tests/analyzed_runs.py (``analyzed``, ``synthetic_cpu_run``, ``real_cpu_run``), shared with the
other presentation tests.
"""

from __future__ import annotations

import copy
import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from traceinspect.run.stages import analyze
from traceinspect.analyze.attribution import GPU_CATEGORIES
from traceinspect.config import Config
from traceinspect.analyze.intervals import build_timeline
from traceinspect.load.reader import load
from traceinspect.render import plots, timeline_plot
from traceinspect.render.text import CPU_COLUMNS, GPU_COLUMNS
from traceinspect.analyze.steps import find_steps
from traceinspect.analyze.timeline import median_step, step_timeline

from analyzed_runs import analyzed, empty_report, real_cpu_run, synthetic_cpu_run
from public_traces import BERT, DDP_2RANK, DIFF_CONTROL, need

NOCACHE = Config(use_cache=False, workers=1)
_ALL_GPU = sorted(p for p in (Path(__file__).resolve().parents[2] / "fixtures" / "gpu").glob("*")
                  if p.is_dir() and any(p.rglob("*.json*")))
# A representative few (pageable copies, fast steps, a loader-bound step, transformer buckets) keep the suite fast.
GPU_FIXTURES = [p for p in _ALL_GPU if p.name in ("baseline", "optimized", "slow_loader", "tf_shapes")] or _ALL_GPU[:4]


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


# ----------------------------------------------------------------------------------------------------------------


def test_palette_one_color_per_category():
    keys = [k for k, _ in GPU_COLUMNS] + [k for k, _ in CPU_COLUMNS] + list(GPU_CATEGORIES)
    for k in keys:
        assert plots.color(k).startswith("#"), k
    # exposed names share their category's color; distinct categories never share one
    assert plots.color("comm_exposed") == plots.color("comm") and plots.color("h2d_exposed") == plots.color("h2d")
    base = {k[: -len("_exposed")] if k.endswith("_exposed") else k for k in keys}
    colors = [plots.color(k) for k in sorted(base)]
    assert len(set(colors)) == len(colors)


def test_step_breakdown_bars_are_the_breakdown():
    need(DIFF_CONTROL)
    _, rep, d = analyzed(DIFF_CONTROL)
    fig = plots.step_breakdown_figure(d)
    ax = fig.axes[0]
    r = d["ranks"][0]
    by_step = {str(s["step"]): s for s in r["steps"]}
    seen = {}
    for p in ax.patches:
        gid = p.get_gid()
        if not gid or not gid.startswith("bd:"):
            continue
        _, rank, step, key = gid.split(":")
        assert int(rank) == r["rank"]
        s = by_step[step]
        assert p.get_height() == pytest.approx(s["breakdown_us"][key] / 1000.0, rel=1e-9)
        seen.setdefault(step, []).append((p.get_y(), p.get_height()))
    assert set(seen) == set(by_step)
    for step, segs in seen.items():  # segments stack without gaps up to the wall time
        segs.sort()
        top = 0.0
        for y, h in segs:
            assert y == pytest.approx(top, abs=1e-9)
            top += h
        assert top == pytest.approx(by_step[step]["wall_us"] / 1000.0, rel=1e-9)
    assert [t.get_text() for t in ax.get_xticklabels()] == [str(s["step"]) for s in r["steps"]]
    assert ax.get_ylabel().endswith("(ms)")
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "idle" in legend and "compute" in legend


def test_step_breakdown_many_bars_shows_rank_means(tmp_path):
    d = json.loads(json.dumps(_synthetic_dict(tmp_path)))
    base = d["ranks"][0]
    d["ranks"] = [dict(copy.deepcopy(base), rank=i) for i in range(30)]  # 30 ranks x 3 steps > MAX_BARS
    fig = plots.step_breakdown_figure(d)
    ax = fig.axes[0]
    mean = base["summary"]["mean_breakdown_us"]
    bars = [p for p in ax.patches if (p.get_gid() or "").startswith("bd:")]
    assert len({p.get_x() for p in bars}) == 30
    for p in bars:
        key = p.get_gid().split(":")[3]
        assert p.get_height() == pytest.approx(mean[key] / 1000.0)
    assert "rank" in ax.get_xlabel()


def _synthetic_dict(tmp_path, **kw) -> dict:
    folder = synthetic_cpu_run(tmp_path / "syn", **kw)
    return analyze(load(folder, NOCACHE), NOCACHE).to_dict()


def test_cpu_only_ranks_missing_rank(tmp_path):
    """No GPU events and rank 1 of 3 missing: CPU categories, a rank comparison, no GPU-only plots."""
    d = _synthetic_dict(tmp_path, ranks=(0, 2), world_size=3, loader_ms={0: 1.0, 2: 9.0})
    assert d["missing_ranks"] == [1]
    figs = plots.figures(d)
    assert [n for n in figs if n != "waterfall"] == ["step_breakdown", "ranks"]
    legend = [t.get_text() for t in figs["step_breakdown"].axes[0].get_legend().get_texts()]
    assert "dataloader" in legend and "compute" not in legend and "idle" not in legend
    # ranks plot: bar widths are each rank's mean breakdown, the "lost" panel the cross-rank wait
    ax, ax2 = figs["ranks"].axes[:2]
    for r in d["ranks"]:
        mean = r["summary"]["mean_breakdown_us"]
        segs = [p for p in ax.patches if (p.get_gid() or "").startswith(f"mean:{r['rank']}:")]
        assert segs
        for p in segs:
            assert p.get_width() == pytest.approx(mean[p.get_gid().split(":")[2]] / 1000.0)
        assert sum(p.get_width() for p in segs) == pytest.approx(r["summary"]["mean_wall_us"] / 1000.0)
    waits = {p["rank"]: p["wait_per_step_us"] for p in d["cross_rank"]["per_rank"]}
    for p in ax2.patches:
        if (p.get_gid() or "").startswith("wait:"):
            assert p.get_width() == pytest.approx(waits[int(p.get_gid().split(":")[1])] / 1000.0)
    straggler = d["cross_rank"]["straggler"]["rank"]
    assert straggler == 2 and f"straggler: rank {straggler}" in figs["ranks"]._suptitle.get_text()
    paths = plots.write_plots(d, tmp_path / "out")
    assert [p.name for p in paths if p.name != "waterfall.png"] == ["step_breakdown.png", "ranks.png"] + (
        ["tradeoff.png"] if any(r.get("tradeoff") for r in d["ranks"]) else [])


def test_timeline_is_the_median_step_and_adds_up_to_the_breakdown():
    need(DIFF_CONTROL)
    trace, rep, d = analyzed(DIFF_CONTROL)
    ra = rep.ranks[0]
    tl = ra.tables["timeline"]
    walls = sorted((s["wall_us"], s["step"]) for s in d["ranks"][0]["steps"])
    assert int(tl["step"].iloc[0]) == walls[(len(walls) - 1) // 2][1] == median_step(find_steps(trace.ranks[0]))
    step = next(s for s in d["ranks"][0]["steps"] if s["step"] == int(tl["step"].iloc[0]))
    # The clipped intervals, swept with the breakdown's priorities, give exactly the step's breakdown.
    codes = tl["category"].map({c: i for i, c in enumerate(GPU_CATEGORIES)}).to_numpy()
    t = build_timeline(tl["start_us"].to_numpy(), tl["end_us"].to_numpy(), codes, len(GPU_CATEGORIES))
    row = ra.steps[ra.steps["step"] == step["step"]].iloc[0]
    excl = t.exclusive_in(row["start_us"], row["end_us"])[:, 0]
    names = ["compute", "comm_exposed", "h2d_exposed", "d2h_exposed", "d2d_exposed", "memset_exposed"]
    for i, n in enumerate(names):
        assert excl[i] == pytest.approx(step["breakdown_us"][n], abs=1e-6)
    # pageable copies: the same ones the pageable-copies table lists for that step
    pc = ra.tables["pageable_copies"]
    assert int(tl["pageable"].sum()) == int((pc["step"] == step["step"]).sum()) > 0

    # the document carries the same step: its pageable copies, and a lane per stream under the breakdown lane
    doc = d["ranks"][0]["timeline"]
    assert doc["step"] == step["step"] and len(doc["pageable"]) == int(tl["pageable"].sum())
    fig = plots.timeline_figure(d)
    ax = fig.axes[0]
    lanes = [t.get_text() for t in ax.get_yticklabels()]
    assert lanes[-1] == "GPU (breakdown)"
    assert sorted(lanes[:-1]) == sorted(f"stream {s}" for s in tl["stream"].unique())
    assert ax.get_xlim()[1] == pytest.approx(step["wall_us"] / 1000.0)
    assert f"step {step['step']}" in fig._suptitle.get_text() and "median" in fig._suptitle.get_text()
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    n = int(tl["pageable"].sum())
    assert f"pageable copy ({n} {'copy' if n == 1 else 'copies'})" in legend
    assert "NCCL / comm" in legend


def test_timeline_skipped_without_table_or_gpu(tmp_path):
    need(DIFF_CONTROL)
    _, rep, d = analyzed(DIFF_CONTROL)
    for r in d["ranks"]:
        r["timeline"] = None  # a document without the timeline (no GPU events)
    assert plots.timeline_figure(d) is None
    assert "timeline" not in plots.figures(d)
    syn = synthetic_cpu_run(tmp_path / "cpu")
    trace = load(syn, NOCACHE)
    tl = step_timeline(trace.ranks[0], find_steps(trace.ranks[0]))
    assert tl.empty and list(tl.columns) == ["step", "stream", "start_us", "end_us", "category", "name", "pageable"]


def test_message_sizes_are_the_collectives_and_the_cap():
    need(DDP_2RANK)
    _, rep, d = analyzed(DDP_2RANK)
    colls = rep.ranks[0].tables["collectives"]
    colls = colls[colls["step"].isin([s["step"] for s in d["ranks"][0]["steps"]])]  # the document's steps
    known = sorted(float(b) for b in colls["bytes"] if b is not None and float(b) > 0)
    fig = plots.message_sizes_figure(d)
    ax = fig.axes[0]
    xs = sorted(float(x) for coll in ax.collections for x, _ in coll.get_offsets())
    assert xs == pytest.approx(known)
    cap = [ln.get_xdata()[0] for ln in ax.lines if ln.get_linestyle() == "--"]
    assert cap == [25 * 2 ** 20]
    assert ax.get_xscale() == "log"
    rows = [t.get_text().split("\n")[0] for t in ax.get_yticklabels()]
    assert rows[-1] == "allreduce" and set(rows) == set(colls["name"])
    # the capture's own bucket cap wins over the default; the dict alone (no Report) is enough
    d2 = copy.deepcopy(d)
    d2["ranks"][0]["metadata"] = {"ddp": {"bucket_cap_mb": 1.0}}
    ax2 = plots.message_sizes_figure(d2).axes[0]
    assert [ln.get_xdata()[0] for ln in ax2.lines if ln.get_linestyle() == "--"] == [2 ** 20]
    assert sorted(float(x) for c in ax2.collections for x, _ in c.get_offsets()) == pytest.approx(known)


def test_message_sizes_say_what_the_cap_line_means():
    """The real H200 baseline: every gradient all-reduce is 256x its run's 1 MiB cap; the plot says what the dashed
    line is and what a call so far above it means."""
    import traceinspect
    from traceinspect.config import Config
    from traceinspect.render.plots import png_bytes

    d = json.loads(json.dumps(traceinspect.report_folder(str(Path(__file__).parents[2] / "fixtures" / "gpu" /
                                                             "big_baseline"), Config(workers=1)).to_dict()))
    fig = plots.message_sizes_figure(d)
    png_bytes(fig)
    note = " ".join(fig._supxlabel.get_text().split())
    assert note.startswith("Dashed line: the DDP bucket cap (1 MiB, from the capture)")
    assert "12 calls well above it (up to 256 MiB, 256x the cap)" in note and "never splits a parameter" in note
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()] if fig.axes[0].get_legend() else \
        [t.get_text() for lg in fig.legends for t in lg.get_texts()]
    assert any("DDP bucket cap 1 MiB" in x for x in legend), legend


def test_message_sizes_skipped_without_collectives():
    need(BERT)
    _, rep, d = analyzed(BERT)
    assert plots.message_sizes_figure(d) is None
    assert plots.ranks_figure(d) is None  # one rank
    assert [n for n in plots.figures(d) if n != "waterfall"] == ["step_breakdown", "timeline"] + (
        ["tradeoff"] if any(r.get("tradeoff") for r in d["ranks"]) else [])


def test_write_plots_pngs(tmp_path):
    need(DIFF_CONTROL)
    _, rep, d = analyzed(DIFF_CONTROL)
    paths = plots.write_plots(d, tmp_path / "plots")
    sized = [c for s in d["ranks"][0]["steps"] for c in s.get("collectives") or [] if (c.get("bytes") or 0) > 0]
    names = [p.name for p in paths if p.name != "waterfall.png"]
    assert names == ["step_breakdown.png", "timeline.png"] + (["message_sizes.png"] if sized else []) + (
        ["tradeoff.png"] if any(r.get("tradeoff") for r in d["ranks"]) else [])
    for p in paths:
        w, h = png_size(p.read_bytes())
        assert 700 <= w <= 2100 and 300 <= h <= 1800, (p.name, w, h)


def test_empty_report_draws_nothing(tmp_path):
    d = empty_report()
    assert plots.figures(d) == {}
    assert plots.write_plots(d, tmp_path / "none") == []


def test_plots_leave_pyplot_alone(tmp_path):
    """Importing and drawing never touches pyplot (no global figures, no backend switch in the caller)."""
    folder = synthetic_cpu_run(tmp_path / "syn")
    code = (
        "import sys\n"
        "from traceinspect.load.reader import load\nfrom traceinspect.run.stages import analyze\n"
        "from traceinspect.config import Config\nfrom traceinspect.render.plots import write_plots\n"
        f"rep = analyze(load({str(folder)!r}, Config(use_cache=False, workers=1)))\n"
        f"write_plots(rep.to_dict(), {str(tmp_path / 'o')!r})\n"
        "print('matplotlib.pyplot' in sys.modules)\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "False"


@pytest.mark.capture
def test_real_cpu_capture(request):
    folder = real_cpu_run(request, "cpu_baseline_run")
    _, rep, d = analyzed(folder)
    figs = plots.figures(d)
    assert "step_breakdown" in figs and "ranks" in figs and "timeline" not in figs
    bars = [p for p in figs["step_breakdown"].axes[0].patches if (p.get_gid() or "").startswith("bd:")]
    total = sum(p.get_height() for p in bars)
    assert total == pytest.approx(sum(s["wall_us"] for r in d["ranks"] for s in r["steps"]) / 1000.0)
    assert {r["basis"] for r in d["ranks"]} == {"cpu"} and len(d["ranks"]) == 2


@pytest.mark.parametrize("folder", GPU_FIXTURES or [None], ids=[p.name for p in GPU_FIXTURES] or ["none"])
def test_gpu_fixtures(folder, tmp_path):
    """Every committed GPU fixture: the plots it supports, bars equal to its breakdown, a timeline lane per stream."""
    if folder is None:
        pytest.skip("no GPU fixtures in fixtures/gpu yet")
    _, rep, d = analyzed(folder)
    figs = plots.figures(d)
    assert [n for n in figs if n != "waterfall"][:2] == ["step_breakdown", "timeline"]
    ax = plots.step_breakdown_figure(d).axes[0]
    steps = {(r["rank"], str(s["step"])): s for r in d["ranks"] for s in r["steps"]}
    for p in ax.patches:
        if (p.get_gid() or "").startswith("bd:"):
            _, rank, step, key = p.get_gid().split(":")
            assert p.get_height() == pytest.approx(steps[(int(rank), step)]["breakdown_us"][key] / 1000.0)
    tl = next((ra.tables["timeline"] for ra in rep.ranks if len(ra.tables["timeline"])), None)
    if tl is not None:  # the breakdown lane, then a lane per stream
        fig = plots.timeline_figure(d)
        assert len(fig.axes[0].get_yticklabels()) == 1 + min(tl["stream"].nunique(), timeline_plot.MAX_LANES)
