"""The batch x accumulation trade-off plot (``render/tradeoff_plot.py``) on real traces: an H200 fixture without
memory events (fixtures/gpu/big_baseline) and the public MI300 trace recorded with profile_memory. Every bar is
checked against the report's rows, the current row against the rank's measured step (computed here from its steps:
the model gives the measured step exactly at the measured batch), the capacity against the trace's own
``deviceProperties`` (read here with the standard library)."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from public_traces import PUBLIC, need, only_file, raw_events

from traceinspect.render import plots, tradeoff_plot
from traceinspect.render.html import render_html
from traceinspect.report.doc import from_dict

BIG = Path(__file__).resolve().parents[2] / "fixtures" / "gpu" / "big_baseline"
MI300 = PUBLIC / "tracelens_mi300_memory"
V100 = PUBLIC / "hta_v100_memory"


@functools.lru_cache(maxsize=None)
def report(folder: str) -> dict:
    from traceinspect.config import Config
    from traceinspect.run import report_folder

    return report_folder(folder, Config(use_cache=False)).to_dict()


def bars(fig, prefix: str) -> dict:
    return {p.get_gid().split(":", 1)[1]: p for ax in fig.axes for p in ax.patches
            if (p.get_gid() or "").startswith(prefix + ":")}


def rgb(hex_colour: str) -> tuple[float, float, float]:
    return tuple(int(hex_colour[i:i + 2], 16) / 255 for i in (1, 3, 5))


def measured_step_ms(r: dict) -> float:
    walls = [s["wall_us"] for s in r["steps"] if not s["synthetic"]]
    return sum(walls) / len(walls) / 1000


def test_time_per_logical_batch_and_the_marked_rows_on_a_gpu_fixture():
    d = report(str(BIG))
    r = d["ranks"][0]
    fig = plots.figures(d)["tradeoff"]
    time = bars(fig, "time")
    def key(o: dict) -> str:  # the plot's name of a row (tradeoff_plot.key), from the JSON
        return f"{o['batch']}x{o['accum_steps']}" + (f" {o['precision']}" if o.get("precision") else "")

    assert set(time) == {key(o) for o in r["tradeoff"]}
    for o in r["tradeoff"]:
        assert time[key(o)].get_height() == pytest.approx(o["step_ms"])
    (now,) = [o for o in r["tradeoff"] if o["current"]]
    assert (now["batch"], now["accum_steps"]) == (1024, 4)  # the capture's metadata: batch 1024, 4 micro-batches
    assert now["step_ms"] == pytest.approx(measured_step_ms(r), rel=1e-9)
    bar = time[f"{now['batch']}x{now['accum_steps']}"]
    assert bar.get_linewidth() > 2 and bar.get_edgecolor()[:3] == pytest.approx(rgb(tradeoff_plot.NOW))
    (best,) = [o for o in r["tradeoff"] if o["best"]]
    assert time[f"{best['batch']}x{best['accum_steps']}"].get_facecolor()[:3] == pytest.approx(rgb(tradeoff_plot.BEST))
    # no memory events: no peak bars, and the lower panel says why
    assert not bars(fig, "peak")
    texts = " ".join(t.get_text() for ax in fig.axes for t in ax.texts)
    assert "Peak memory not known" in texts and "[memory] events" in texts
    ticks = [t.get_text() for t in fig.axes[1].get_xticklabels()]
    assert "1024 x 4\nnow, best" in ticks


def test_peak_memory_and_the_capacity_on_a_memory_trace():
    need(MI300)
    d = report(str(MI300))
    r = d["ranks"][0]
    fig = plots.figures(d)["tradeoff"]
    peak = bars(fig, "peak")
    for o in r["tradeoff"]:
        assert peak[f"{o['batch']}x{o['accum_steps']}"].get_height() == pytest.approx(o["peak_bytes"] / 1e9)
    props = raw_events(only_file(MI300))["deviceProperties"]
    cap = props[0]["totalGlobalMem"]
    assert r["memory"]["capacity_bytes"] == cap
    # 205.57 GB against peaks of 0.27 GB: the capacity is written in the legend, not drawn as a line
    assert not any(line.get_gid() == "capacity" for ax in fig.axes for line in ax.lines)
    legend = " ".join(t.get_text() for lg in fig.legends for t in lg.get_texts())
    assert f"device capacity {cap / 1e9:.2f} GB, above this axis" in legend
    assert f"{100 * r['memory']['peak_share']:.2g} % of it" in legend


def test_the_capacity_line_where_the_peaks_come_near_it():
    """The same MI300 report with its capacity set to twice the largest predicted peak (a copy of the document,
    labelled as edited here): the line is drawn at that capacity."""
    need(MI300)
    import copy

    d = copy.deepcopy(report(str(MI300)))
    m = d["ranks"][0]["memory"]
    m["capacity_bytes"] = 2 * max(o["peak_bytes"] for o in d["ranks"][0]["tradeoff"])
    fig = tradeoff_plot.figure(from_dict(d), plots._new_figure)
    (line,) = [ln for ax in fig.axes for ln in ax.lines if ln.get_gid() == "capacity"]
    assert line.get_ydata()[0] == pytest.approx(m["capacity_bytes"] / 1e9)


def test_no_plot_without_a_tradeoff_table_and_in_the_html_where_there_is_one():
    need(V100)
    d = report(str(V100))  # no batch size recorded: no trade-off table
    assert not any(r.get("tradeoff") for r in d["ranks"])
    assert "tradeoff" not in plots.figures(d)
    assert tradeoff_plot.figure(from_dict(d), plots._new_figure) is None
    page = render_html(report(str(BIG)))
    assert "id='plot-tradeoff'" in page and "The logical batch as physical batch x accumulation steps" in page
