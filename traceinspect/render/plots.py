"""Plots of a report, as matplotlib Figures (Agg, no pyplot: nothing leaks into a caller's global figure state).

Each ``*_figure`` function returns a ``matplotlib.figure.Figure``, or None when the report has nothing to show for
it (one rank for the rank comparison, no collectives for message sizes, no timeline...). ``write_plots`` writes the
ones that exist as PNGs. Like every renderer, they format and scale (us -> ms, bytes -> MiB) but do not compute:
everything comes from the typed report document (``report_folder(...).doc`` or a saved report.json), so a saved
report draws the same pictures as the run that wrote it. Colours and labels are ``vocabulary``'s. A name from the trace
(a collective's, a cause) is drawn through ``safe.plot_text``: shortened, control characters visible, ``$`` escaped, so
it is never read as mathtext.
"""

from __future__ import annotations

import io
import textwrap
from pathlib import Path

import numpy as np

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

from . import format as fmt, safe, timeline_plot, tradeoff_plot, vocabulary, waterfall
from ..report.doc import RankDoc, ReportDoc
from .document import given, report_doc
from .vocabulary import PALETTE, LABELS, color, label

DPI = 120

GPU_KEYS = vocabulary.GPU_KEYS
CPU_KEYS = vocabulary.CPU_KEYS
TIMELINE_KEYS = vocabulary.TIMELINE_KEYS

MAX_BARS = 60  # above this many rank x step bars, the breakdown plot shows each rank's mean instead


def _keys(basis: str) -> tuple[str, ...]:
    return GPU_KEYS if basis == "gpu" else CPU_KEYS


def _new_figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _ms(us) -> float:
    return 0.0 if us is None else float(us) / 1000.0


def _clamp(x: float, lo: float, hi: float) -> float:
    return max(lo, min(hi, x))


def _legend_outside(ax, handles, title: str | None = None) -> None:
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, frameon=False,
              title=title, fontsize=9, title_fontsize=9)


def _ranks_with_steps(d: ReportDoc) -> list[RankDoc]:
    return [r for r in d.ranks if r.steps]


# ----------------------------------------------------------------------------------------------------------------
# 1. Step breakdown


def step_breakdown_figure(d: ReportDoc | dict) -> Figure | None:
    """Stacked bars: each step of each rank split into the breakdown categories (ms); the stack's height is the
    step's wall time. Too many bars for one picture (> MAX_BARS) -> one bar per rank, the rank's mean step."""
    ranks = _ranks_with_steps(report_doc(d))
    if not ranks:
        return None
    n_bars = sum(len(r.steps) for r in ranks)
    per_rank_mean = n_bars > MAX_BARS
    bars = []  # (x, rank, label, basis, breakdown dict, wall)
    groups = []  # (x_start, x_end, rank)
    x = 0.0
    for r in ranks:
        basis = r.basis
        if per_rank_mean:
            s = r.summary
            bars.append((x, r.rank, f"{r.rank}", basis, given(s.mean_breakdown_us) or {}, given(s.mean_wall_us)))
            x += 1
            continue
        x0 = x
        for s in r.steps:
            bars.append((x, r.rank, str(s.step) + ("*" if s.synthetic else ""), basis, s.breakdown_us, s.wall_us))
            x += 1
        groups.append((x0, x - 1, r.rank))
        x += 0.6  # gap between ranks
    n = len(bars)
    fig = _new_figure(_clamp(3.5 + 0.32 * n, 7.5, 16.0), 4.8)
    ax = fig.add_subplot()
    used: list[str] = []
    for xpos, _rank, _lab, basis, bd, _wall in bars:
        bottom = 0.0
        for key in _keys(basis):
            h = _ms(bd.get(key))
            if h <= 0:
                continue
            ax.bar(xpos, h, bottom=bottom, width=0.8, color=color(key), edgecolor="white", linewidth=0.3,
                   label=key, gid=f"bd:{_rank}:{_lab}:{key}")
            bottom += h
            if key not in used:
                used.append(key)
    ax.set_xticks([b[0] for b in bars])
    ax.set_xticklabels([b[2] for b in bars], fontsize=8, rotation=0 if n <= 24 else 90)
    ax.set_ylabel("time per step (ms)")
    # A few bars stay bar-shaped: leave room for at least 6 bar slots.
    pad = max(0.7, (6 - (bars[-1][0] + 1)) / 2)
    ax.set_xlim(-pad, bars[-1][0] + pad)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    ax.spines[["top", "right"]].set_visible(False)
    if per_rank_mean:
        ax.set_xlabel("rank (mean over its steps)")
        title = "Mean step time by category, per rank"
    else:
        ax.set_xlabel("step" + (" (* = whole trace window, no ProfilerStep)" if any("*" in b[2] for b in bars) else ""))
        title = "Step time by category, per rank and step"
        if len(groups) > 1:
            for x0, x1, rk in groups:
                ax.annotate(f"rank {rk}", xy=((x0 + x1) / 2, 1.0), xycoords=("data", "axes fraction"),
                            xytext=(0, 4), textcoords="offset points", ha="center", va="bottom", fontsize=9,
                            fontweight="bold")
            for x0, _x1, _rk in groups[1:]:
                ax.axvline(x0 - 0.8, color="#888888", linewidth=0.6, linestyle=":")
        elif groups:
            title += f" (rank {groups[0][2]})"
    if n <= 16:
        top = max((_ms(b[5]) for b in bars), default=0.0)
        for xpos, _r, _l, _b, _bd, wall in bars:
            ax.annotate(fmt.ms_num(wall, 1), xy=(xpos, _ms(wall)), xytext=(0, 2), textcoords="offset points",
                        ha="center", va="bottom", fontsize=7, color="#333333")
        ax.set_ylim(0, top * 1.08 if top > 0 else 1)
    bases = {b[3] for b in bars}
    what = "GPU timeline" if bases == {"gpu"} else "training thread (CPU only)" if bases == {"cpu"} else "GPU timeline / training thread"
    fig.suptitle(f"{title} · {what}", fontsize=11)
    handles = [Patch(facecolor=color(k), label=label(k)) for k in reversed(used)]
    _legend_outside(ax, handles, title="category")
    return fig


# ----------------------------------------------------------------------------------------------------------------
# 2. One step's GPU timeline


def timeline_figure(d: ReportDoc | dict, rank: int | None = None) -> Figure | None:
    """One step's GPU activity at true scale (``timeline_plot``); None when no rank has a timeline."""
    return timeline_plot.figure(report_doc(d), rank, _new_figure)


def waterfall_figure(d: ReportDoc | dict) -> Figure | None:
    """Measured step -> each finding's claimed time -> projected step (``waterfall``); None without claims."""
    return waterfall.figure(report_doc(d), _new_figure)


# ----------------------------------------------------------------------------------------------------------------
# 3. Collective message sizes against the DDP bucket cap


def _collectives(d: ReportDoc, rank: int | None):
    """(rank id, rows) of one rank's collectives (rank 0 when present), from its steps in the document: the step,
    name, bytes and phase of each."""
    import pandas as pd

    for r in sorted(d.ranks, key=lambda r: (r.rank != 0, r.rank)):
        if rank is not None and r.rank != rank:
            continue
        rows = [c for s in r.steps for c in given(s.collectives) or []]
        if rows:
            return r.rank, pd.DataFrame({"step": [c.step for c in rows], "name": [c.name for c in rows],
                                         "bytes": [c.bytes for c in rows], "phase": [c.phase for c in rows]})
    return None, None


def _bucket_cap(d: ReportDoc, rank: int) -> tuple[float, str]:
    for r in d.ranks:
        if r.rank == rank:
            mb = r.metadata.ddp_bucket_cap_mb()
            if mb is not None:
                return mb, "from the capture"
    return 25.0, "DDP default"


def _fmt_bytes(b: float, _pos=None) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= size:
            v = b / size
            return f"{v:.0f} {unit}" if v >= 10 or abs(v - round(v)) < 0.05 else f"{v:.1f} {unit}"
    return f"{b:.0f} B"


def message_sizes_figure(d: ReportDoc | dict, rank: int | None = None) -> Figure | None:
    """Every collective of one rank (rank 0 when present) on a log byte axis, one row per collective, against the
    DDP bucket cap. Gradient all-reduces (backward) are filled, the rest hollow. None when no sizes are known."""
    d = report_doc(d)
    rk, colls = _collectives(d, rank)
    if colls is None:
        return None
    c = colls[colls["bytes"].notna()]
    c = c[c["bytes"].astype(float) > 0]
    if not len(c):
        return None
    names = c["name"].astype(str)
    order = sorted(names.unique(), key=lambda n: (n != "allreduce", -int((names == n).sum()), n))
    cap_mb, cap_src = _bucket_cap(d, rk)
    cap = cap_mb * (1 << 20)
    steps = sorted(c["step"].unique())
    nsteps = max(len(steps), 1)
    fig = _new_figure(11.0, _clamp(1.9 + 0.7 * len(order), 3.0, 9.0))
    ax = fig.add_subplot()
    step_pos = {s: i for i, s in enumerate(steps)}
    grad_seen = other_seen = False
    for row, n in enumerate(order):
        g = c[names == n]
        y0 = len(order) - 1 - row
        # Deterministic spread: one band per step, and within it one position per call of that step, so calls of
        # the same size (the same bucket every step, several micro-batches) do not hide each other.
        k = g.groupby("step").cumcount().to_numpy()
        n_in = g.groupby("step")["step"].transform("size").to_numpy()
        jit = [(step_pos[s] + (kk + 0.5) / nn) / nsteps * 0.7 - 0.35 for s, kk, nn in zip(g["step"], k, n_in)]
        b = g["bytes"].astype(float).to_numpy()
        phase = g["phase"].astype(str).to_numpy() if "phase" in g else np.full(len(g), "")
        gm = (g["name"].astype(str).to_numpy() == "allreduce") & (phase == "backward")
        if gm.any():
            ax.scatter(b[gm], [y0 + j for j, m in zip(jit, gm) if m], s=36, color=PALETTE["comm"],
                       edgecolor="#7a5500", linewidth=0.6, zorder=3)
            grad_seen = True
        if (~gm).any():
            ax.scatter(b[~gm], [y0 + j for j, m in zip(jit, gm) if not m], s=36, facecolor="none",
                       edgecolor=PALETTE["comm"], linewidth=1.2, zorder=3)
            other_seen = True
    ax.axvline(cap, color="#B00020", linewidth=1.4, linestyle="--", zorder=2)
    ax.set_xscale("log")
    lo = min(float(c["bytes"].min()), cap) / 2.5
    hi = max(float(c["bytes"].max()), cap) * 2.5
    ax.set_xlim(lo, hi)
    ticks = [4.0 ** k for k in range(0, 20) if lo <= 4.0 ** k <= hi]
    if len(ticks) < 3:  # a narrow range: every power of two
        ticks = [2.0 ** k for k in range(0, 40) if lo <= 2.0 ** k <= hi]
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(_fmt_bytes))
    ax.set_yticks(range(len(order)))
    ax.set_yticklabels([f"{safe.plot_text(n)}\n{fmt.count(int((names == n).sum()), 'call')}" for n in reversed(order)],
                       fontsize=9)
    ax.set_ylim(-0.6, len(order) - 0.4)
    ax.set_xlabel("message size per call (log scale; 1 MiB = 2^20 bytes)")
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    ax.spines[["top", "right"]].set_visible(False)
    span = f"step {steps[0]}" if len(steps) == 1 else f"steps {steps[0]}-{steps[-1]}"
    fig.suptitle(f"Collective message sizes · rank {rk} · {span} ({fmt.count(len(c), 'call')} with a known size)", fontsize=11)
    handles = []
    if grad_seen:
        handles.append(Line2D([], [], linestyle="none", marker="o", markersize=7, color=PALETTE["comm"],
                              markeredgecolor="#7a5500", label="gradient all-reduce"))
    if other_seen:
        handles.append(Line2D([], [], linestyle="none", marker="o", markersize=7, markerfacecolor="none",
                              markeredgecolor=PALETTE["comm"], label="other collective"))
    handles.append(Line2D([], [], color="#B00020", linestyle="--",
                          label=f"DDP bucket cap {fmt.mib(cap_mb)}\n({cap_src}; see below)"))
    _legend_outside(ax, handles)
    fig.supxlabel(cap_note(cap_mb, cap_src, c["bytes"].astype(float).to_numpy()), fontsize=8, ha="left", x=0.01)
    return fig


def cap_note(cap_mb: float, cap_src: str, sizes) -> str:
    """What the dashed line means, and where the calls lie against it, under the message-sizes plot."""
    cap = cap_mb * (1 << 20)
    above, below = int((sizes > cap * 1.5).sum()), int((sizes < cap / 1.5).sum())
    where = []
    if above:
        where.append(f"{fmt.count(above, 'call')} well above it (up to {_fmt_bytes(float(sizes.max()))}, "
                     f"{float(sizes.max()) / cap:.0f}x the cap): DDP never splits a parameter between buckets, so "
                     "such a bucket holds a parameter larger than the cap, or the run bucketed by another cap")
    if below:
        where.append(f"{fmt.count(below, 'call')} well below it: small buckets or other collectives, each with its "
                     "own launch and latency")
    text = (f"Dashed line: the DDP bucket cap ({fmt.mib(cap_mb)}, {cap_src}), the size up to which DDP packs "
            "gradients into one all-reduce (bucket_cap_mb)." + (" " + "; ".join(where) + "." if where else ""))
    return "\n".join(textwrap.wrap(text, 150))


# ----------------------------------------------------------------------------------------------------------------
# 4. Ranks side by side


def ranks_figure(d: ReportDoc | dict) -> Figure | None:
    """One bar per rank: its mean step split by category (min-max step whisker), and beside it the time it loses
    (GPU idle; waiting for other ranks at collectives, from the cross-rank analysis). None with fewer than 2 ranks."""
    d = report_doc(d)
    ranks = [r for r in _ranks_with_steps(d) if r.summary.steps]
    if len(ranks) < 2:
        return None
    wait = {p.rank: p.wait_per_step_us for p in given(d.cross_rank.per_rank) or []}
    strag = given(d.cross_rank.straggler)
    n = len(ranks)
    fig = _new_figure(12.0, _clamp(1.8 + 0.42 * n, 3.2, 16.0))
    ax, ax2 = fig.subplots(1, 2, sharey=True, gridspec_kw={"width_ratios": [3, 1.4]})
    used: list[str] = []
    ys = list(range(n))[::-1]
    for y, r in zip(ys, ranks):
        s = r.summary
        breakdown = given(s.mean_breakdown_us) or {}
        left = 0.0
        for key in _keys(r.basis):
            w = _ms(breakdown.get(key))
            if w <= 0:
                continue
            ax.barh(y, w, left=left, height=0.7, color=color(key), edgecolor="white", linewidth=0.3,
                    gid=f"mean:{r.rank}:{key}")
            left += w
            if key not in used:
                used.append(key)
        lo, hi, mean = _ms(given(s.min_wall_us)), _ms(given(s.max_wall_us)), _ms(given(s.mean_wall_us))
        ax.errorbar(mean, y, xerr=[[max(mean - lo, 0)], [max(hi - mean, 0)]], fmt="none", ecolor="#222222",
                    elinewidth=1.0, capsize=3)
        ax.annotate(fmt.ms(given(s.mean_wall_us), 1), xy=(hi, y), xytext=(5, 0), textcoords="offset points",
                    va="center", fontsize=8)
        idle = breakdown["idle"] if r.basis == "gpu" and "idle" in breakdown else None
        if idle is not None:
            ax2.barh(y + 0.18, _ms(idle), height=0.34, color=color("idle"), edgecolor="#777777", linewidth=0.4,
                     gid=f"idle:{r.rank}")
        if wait.get(r.rank) is not None:
            ax2.barh(y - 0.18, _ms(wait[r.rank]), height=0.34, color=PALETTE["wait"], gid=f"wait:{r.rank}")
    ax.set_yticks(ys)
    ax.set_yticklabels([f"rank {r.rank}" for r in ranks], fontsize=9)
    for tl_, r in zip(ax.get_yticklabels(), ranks):
        if strag is not None and r.rank == strag.rank:
            tl_.set_fontweight("bold")
            tl_.set_color("#B00020")
    ax.set_xlabel("mean step time (ms); whisker = fastest to slowest step")
    ax.set_title("Mean step by category", fontsize=10)
    ax2.set_xlabel("ms per step")
    ax2.set_title("Time lost per step", fontsize=10)
    xmax = max(_ms(given(r.summary.max_wall_us)) for r in ranks)
    ax.set_xlim(0, xmax * 1.18 if xmax > 0 else 1)
    for a in (ax, ax2):
        a.grid(axis="x", alpha=0.3)
        a.set_axisbelow(True)
        a.spines[["top", "right"]].set_visible(False)
    title = f"Ranks side by side ({n} ranks)"
    if strag is not None:
        cause = strag.cause.label if strag.cause is not None else None
        title += (f" · straggler: rank {strag.rank}, last at {strag.last_count} of "
                  f"{strag.matched} collectives" + (f" ({safe.plot_text(cause)})" if cause else ""))
    fig.suptitle(title, fontsize=11)
    handles = [Patch(facecolor=color(k), label=label(k)) for k in used]
    lost = []
    if any(r.basis == "gpu" for r in ranks):
        lost.append(Patch(facecolor=color("idle"), edgecolor="#777777", label="GPU idle"))
    if wait:
        lost.append(Patch(facecolor=PALETTE["wait"], label="waiting for other\nranks (collectives)"))
    ax2.legend(handles=handles + lost, loc="upper left", bbox_to_anchor=(1.04, 1.0), borderaxespad=0.0,
               frameon=False, fontsize=9)
    return fig


def tradeoff_figure(d: ReportDoc | dict) -> Figure | None:
    """Time per logical batch and peak memory across the batch x accumulation options, the device's capacity, the
    current and best rows marked (``tradeoff_plot``); None without a trade-off table."""
    return tradeoff_plot.figure(report_doc(d), _new_figure)


# ----------------------------------------------------------------------------------------------------------------


def figures(d: ReportDoc | dict) -> dict[str, Figure]:
    """Every plot the report supports, by file stem, in reading order; plots with nothing to show are left out.
    Drawn from the document alone."""
    d = report_doc(d)
    out: dict[str, Figure] = {}
    for name, make in (
        ("waterfall", lambda: waterfall_figure(d)),
        ("step_breakdown", lambda: step_breakdown_figure(d)),
        ("timeline", lambda: timeline_figure(d)),
        ("message_sizes", lambda: message_sizes_figure(d)),
        ("ranks", lambda: ranks_figure(d)),
        ("tradeoff", lambda: tradeoff_figure(d)),
    ):
        fig = make()
        if fig is not None:
            out[name] = fig
    return out


def png_bytes(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, facecolor="white")
    return buf.getvalue()


def write_plots(d: ReportDoc | dict, out_dir, write=None) -> list[Path]:
    """Write each plot as ``<out_dir>/<name>.png``; returns the paths written (in reading order). ``write(path,
    data)`` writes one file (default ``Path.write_bytes``; the CLI passes its atomic ``output.write_file``)."""
    d = report_doc(d)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write = write or Path.write_bytes
    paths = []
    for name, fig in figures(d).items():
        p = out / f"{name}.png"
        write(p, png_bytes(fig))
        paths.append(p)
    return paths


__all__ = ["PALETTE", "LABELS", "color", "label", "step_breakdown_figure", "timeline_figure", "message_sizes_figure",
           "ranks_figure", "waterfall_figure", "tradeoff_figure", "figures", "png_bytes", "write_plots"]
