"""The batch x accumulation trade-off as a plot: for each option of one rank's logical batch (``ranks[].tradeoff``,
docs/metrics.md, "The trade-off table"), the predicted time per logical batch above and the predicted peak memory
below, against the device's capacity (``ranks[].memory.capacity_bytes``); the run's configuration (``current``) and
the fastest option known to fit (``best``) marked.

Formatting and layout only: every number is a field of the document (ms and bytes scaled to ms and GB). The rank is
the first with a trade-off table (rank 0 where it has one).
"""

from __future__ import annotations

import textwrap

from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from ..report.doc import RankDoc, ReportDoc, TradeoffRowDoc
from .document import given

GB = 1e9
NOW, BEST = "#0B57D0", "#34A853"
BAR, NOT_FIT, UNKNOWN = "#9AA4B2", "#E8A0A0", "#E3E6EA"
CAPACITY = "#B00020"
# The memory axis reaches the capacity line when the capacity is at most this many times the largest peak; above it
# the bars would be slivers, so the capacity is written on the axis instead of drawn.
CAPACITY_IN_VIEW = 4.0


def rank_of(d: ReportDoc) -> RankDoc | None:
    """The rank whose trade-off the plot shows: rank 0 where it has one, else the first with rows."""
    ranks = [r for r in d.ranks if given(r.tradeoff)]
    return min(ranks, key=lambda r: (r.rank != 0, r.rank), default=None)


def _mark(o: TradeoffRowDoc) -> str:
    precision = given(o.precision)
    return ", ".join(x for x, on in (("now", o.current), ("best", o.best), (f"{precision}, projected", precision))
                     if on)


def key(o: TradeoffRowDoc) -> str:
    """A row's name in the plot: batch x accumulation steps, and the precision of a projected row."""
    precision = given(o.precision)
    return f"{o.batch}x{o.accum_steps}" + (f" {precision}" if precision else "")


def _rate(v: float) -> str:
    return f"{v:,.0f}" if v >= 100 else f"{v:.3g}"


def _gb(b) -> str:
    return f"{b / GB:.2f} GB" if b >= GB else f"{b / 1e6:.0f} MB"


def _style(o: TradeoffRowDoc) -> dict:
    """The bar's fill and edge: the best option filled green, the run's configuration edged blue."""
    return {"color": BEST if o.best else BAR, "edgecolor": NOW if o.current else "#333333",
            "linewidth": 2.6 if o.current else 0.5, "hatch": "//" if given(o.precision) else None}


def figure(d: ReportDoc, new_figure):
    """The plot (a matplotlib Figure from ``new_figure(width, height)``), or None without a trade-off table."""
    r = rank_of(d)
    if r is None:
        return None
    rows = r.tradeoff
    model = given(r.tradeoff_model)
    mem = given(r.memory)
    cap = mem.capacity_bytes if mem is not None else None
    peaks = [o.peak_bytes for o in rows]
    known = [p for p in peaks if p is not None]
    xs = list(range(len(rows)))
    fig = new_figure(max(8.0, 3.0 + 1.25 * len(rows)), 6.8 if known else 5.2)
    ax, mx = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [1, 1] if known else [1, 0.3]})

    for x, o in zip(xs, rows):
        ax.bar(x, o.step_ms, width=0.62, zorder=2, gid=f"time:{key(o)}", **_style(o))
        ax.annotate(f"{o.step_ms:,.1f} ms\n{_rate(o.samples_per_s)} samples/s", xy=(x, o.step_ms),
                    xytext=(0, 3), textcoords="offset points", ha="center", va="bottom", fontsize=8)
    top = max(o.step_ms for o in rows)
    ax.set_ylim(0, top * 1.3)
    ax.set_ylabel("time per logical batch (ms)")
    logical = model.logical_batch if model is not None else "?"
    ax.set_title(f"Time per logical batch of {logical} samples (one optimizer step), predicted", fontsize=10)

    handles = [Patch(facecolor=BAR, edgecolor=NOW, linewidth=2.6, label="the run's configuration (now)"),
               Patch(facecolor=BEST, edgecolor="#333333", label="most samples/s known to fit (best)")]
    if any(given(o.precision) for o in rows):
        handles.append(Patch(facecolor=BAR, edgecolor="#333333", hatch="//",
                             label="projected in bf16 autocast (memory not projected)"))
    if known:
        for x, o in zip(xs, rows):
            if o.peak_bytes is None:
                continue
            st = _style(o)
            if o.fits is None:
                st["color"] = UNKNOWN
            elif o.fits is False:
                st["color"] = NOT_FIT
            mx.bar(x, o.peak_bytes / GB, width=0.62, zorder=2, gid=f"peak:{key(o)}", **st)
            mx.annotate(_gb(o.peak_bytes), xy=(x, o.peak_bytes / GB), xytext=(0, 3), textcoords="offset points",
                        ha="center", va="bottom", fontsize=8)
        hi = max(known) / GB
        if cap is not None and cap <= CAPACITY_IN_VIEW * max(known):
            mx.axhline(cap / GB, color=CAPACITY, linestyle="--", linewidth=1.4, zorder=3, gid="capacity")
            mx.set_ylim(0, max(hi, cap / GB) * 1.15)
            handles.append(Line2D([], [], color=CAPACITY, linestyle="--", label=f"device capacity {_gb(cap)}"))
        else:
            mx.set_ylim(0, hi * 1.3 if hi > 0 else 1)
            if cap is not None:
                share = mem.peak_share
                note = f"device capacity {_gb(cap)}, above this axis"
                note += f"\n(the measured peak reserved is {100 * share:.2g} % of it)" if share is not None else ""
                handles.append(Line2D([], [], color=CAPACITY, linestyle="--", label=note))
        if any(o.fits is None for o in rows):
            handles.append(Patch(facecolor=UNKNOWN, edgecolor="#333333", label="fit not known"))
        if any(o.fits is False for o in rows):
            handles.append(Patch(facecolor=NOT_FIT, edgecolor="#333333", label="predicted not to fit"))
        if cap is None:
            why = ((mem.reasons if mem is not None else None) or ["capacity: not recorded"])[0]
            handles.append(Line2D([], [], linestyle="none", label="\n".join(textwrap.wrap(f"no capacity line: {why}",
                                                                                          60))))
        mx.set_ylabel("predicted peak allocated (GB)")
        mx.set_title("Peak memory, predicted (docs/memory.md)", fontsize=10)
    else:
        mx.set_ylim(0, 1)
        mx.set_yticks([])
        why = given(r.memory_reason) or "the trace records no memory events"
        mx.text(0.5, 0.5, "\n".join(textwrap.wrap(f"Peak memory not known: {why}", 100)), transform=mx.transAxes,
                ha="center", va="center", fontsize=8.5, color="#555555")
        mx.spines["left"].set_visible(False)
    mx.set_xticks(xs)
    mx.set_xticklabels([f"{o.batch} x {o.accum_steps}" + (f"\n{_mark(o)}" if _mark(o) else "")
                        for o in rows], fontsize=9)
    for tick, o in zip(mx.get_xticklabels(), rows):
        if _mark(o):
            tick.set_fontweight("bold")
    mx.set_xlabel("physical batch x accumulation steps")
    for a in (ax, mx):
        a.grid(axis="y", alpha=0.3)
        a.set_axisbelow(True)
        a.spines[["top", "right"]].set_visible(False)
    fig.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 3), frameon=False, fontsize=8)
    fig.suptitle(f"Batch x accumulation trade-off · rank {r.rank}", fontsize=11)
    return fig
