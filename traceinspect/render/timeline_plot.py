"""One step's GPU timeline, at true scale, from the report document (``ranks[].timeline``).

The picture is what the breakdown adds up to. The step is cut into ``COLUMNS`` equal columns; in each lane and
column every category is drawn as a bar whose height is the share of the column's time it covers, stacked in the
breakdown's priority order (each lane is an image sampled to the nearest pixel, so colours stay pure). So the
area of a colour in a lane is exactly that category's time: an event shorter
than a column is a short column, never a widened bar, and no outline adds ink. The top lane is the whole GPU as
the breakdown counts it (each instant goes to the highest-priority category running, the rest is idle, grey); the
lanes below are the streams, each category's events merged.
"""

from __future__ import annotations

import numpy as np
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from ..report.doc import RankDoc, ReportDoc, TimelineDoc
from . import format as fmt
from .document import given
from .vocabulary import PALETTE, TIMELINE, TIMELINE_KEYS, color

COLUMNS = 1000  # columns across the step (about one per pixel of the plot at 120 dpi)
ROWS = 100  # rows per lane: a category's share of a column is drawn to 1 %
MAX_LANES = 24  # stream lanes drawn (the busiest; the title says when some are left out)
LANE_HEIGHT = 0.7  # of the 1.0 between lane centres


MANY_MARKS = 40  # more pageable copies than this in a step: thin ticks, so a thousand of them stay a row of ticks


def pageable_marker(n: int) -> dict:
    if n > MANY_MARKS:
        return {"marker": "|", "markersize": 5, "markeredgewidth": 0.6, "color": PALETTE["pageable"]}
    return {"marker": "v", "markersize": 5, "markerfacecolor": PALETTE["pageable"], "markeredgecolor": "white",
            "markeredgewidth": 0.4}


def pick_rank(d: ReportDoc, rank: int | None = None) -> RankDoc | None:
    """The rank whose timeline is drawn: ``rank``, else rank 0, else the lowest rank with a timeline."""
    cands = [r for r in d.ranks if given(r.timeline) is not None]
    if rank is not None:
        cands = [r for r in cands if r.rank == rank]
    cands.sort(key=lambda r: (r.rank != 0, r.rank))
    return cands[0] if cands else None


def coverage(spans, edges: np.ndarray) -> np.ndarray:
    """Time covered by disjoint ``[[start, duration], ...]`` in each column between ``edges`` (microseconds)."""
    if not spans:
        return np.zeros(len(edges) - 1)
    a = np.asarray(spans, float)
    s, e = a[:, 0], a[:, 0] + a[:, 1]
    done = np.concatenate([[0.0], np.cumsum(a[:, 1])])
    # Covered time up to t is piecewise linear through (s_i, done_i) and (e_i, done_i+1): interpolate at the edges.
    xs = np.column_stack([s, e]).ravel()
    ys = np.column_stack([done[:-1], done[1:]]).ravel()
    return np.diff(np.interp(edges, xs, ys, left=0.0, right=done[-1]))


def lanes(tl: TimelineDoc) -> tuple[list[tuple[str, dict, bool]], int]:
    """(label, {category: spans}, is_breakdown) per lane, top first; and the number of streams left out."""
    out = [("GPU (breakdown)", tl.breakdown, True)]
    streams = list(tl.streams)
    busy = {id(s): sum(x[1] for v in s.intervals.values() for x in v) for s in streams}
    kept = sorted(sorted(streams, key=lambda s: -busy[id(s)])[:MAX_LANES], key=lambda s: s.stream)
    out += [(f"stream {s.stream}", s.intervals, False) for s in kept]
    return out, len(streams) - len(kept)


def _rgba(hexcolor: str) -> tuple[int, int, int, int]:
    return tuple(int(hexcolor[i:i + 2], 16) for i in (1, 3, 5)) + (255,)


def lane_image(fracs: list[tuple[str, np.ndarray]], fill: str | None) -> np.ndarray:
    """An RGBA image of one lane, ``ROWS`` x ``COLUMNS``: in each column, each category's share of the column as
    that many rows from the bottom (stacked in the given order; cumulative rounding keeps the total exact to
    one row), the rest ``fill`` (or transparent)."""
    colours = np.array([_rgba(color(c)) for c, _ in fracs] + [_rgba(fill) if fill else (0, 0, 0, 0)], np.uint8)
    if fracs:
        cum = np.cumsum(np.stack([np.clip(f, 0, 1) for _, f in fracs]), axis=0)
        bounds = np.rint(np.minimum(cum, 1.0) * ROWS)  # (categories, columns): the row each category ends at
    else:
        bounds = np.zeros((0, COLUMNS))
    rows = np.arange(ROWS)[:, None, None] + 0.5
    which = (rows >= bounds[None, :, :]).sum(axis=1)  # (rows, columns): index of the category at that row
    return colours[which]


def draw(ax, tl: TimelineDoc) -> dict:
    """Draw the lanes into ``ax`` as images sampled to the nearest pixel (no anti-aliasing blends a colour away, no
    outline widens an event); returns what the caption needs (lanes, short events, column width)."""
    wall = float(tl.wall_us)
    edges = np.linspace(0.0, wall, COLUMNS + 1)
    col_us = wall / COLUMNS
    rows, left_out = lanes(tl)
    short = total = 0
    for i, (name, cats, is_bd) in enumerate(rows):
        y = len(rows) - 1 - i
        fracs = [(cat, coverage(cats[cat], edges) / col_us) for cat in TIMELINE_KEYS if cats.get(cat)]
        ax.imshow(lane_image(fracs, color("idle") if is_bd else None), origin="lower", interpolation="nearest",
                  aspect="auto", extent=(0.0, wall / 1000.0, y - LANE_HEIGHT / 2, y + LANE_HEIGHT / 2),
                  gid=f"lane:{i}", zorder=2)
        if not is_bd:
            total += sum(len(cats[c]) for c, _ in fracs)
            short += sum(1 for c, _ in fracs for sp in cats[c] if sp[1] < col_us)
    pg = tl.pageable
    if pg:  # pageable copies: a mark above the lanes where each starts (a mark, not a width)
        ax.plot([s[0] / 1000.0 for s in pg], [len(rows) - 1 + LANE_HEIGHT / 2 + 0.12] * len(pg), linestyle="none",
                clip_on=False, **pageable_marker(len(pg)))
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([r[0] for r in reversed(rows)], fontsize=9)
    ax.set_ylim(-0.6, len(rows) - 0.25)
    ax.set_xlim(0, max(wall / 1000.0, 1e-3))
    return {"lanes": rows, "left_out": left_out, "short": short, "intervals": total, "col_us": col_us}


def figure(d: ReportDoc, rank: int | None = None, new_figure=None):
    """The timeline Figure of one rank (rank 0 when present), or None when no rank has a timeline."""
    r = pick_rank(d, rank)
    if r is None:
        return None
    tl = r.timeline
    n_streams = len(tl.streams)
    fig = new_figure(12.0, min(max(1.9 + 0.5 * (min(n_streams, MAX_LANES) + 1), 3.0), 14.0))
    ax = fig.add_subplot()
    info = draw(ax, tl)
    xlabel = (f"time since the step's start (ms); each column is {fmt.ms(info['col_us'])}, filled to the share "
              "of it each category runs")
    if info["short"]:
        xlabel += (f"\n{fmt.number(info['short'])} of {fmt.count(info['intervals'], 'interval')} "
                   "are shorter than one column: "
                   "drawn as partial columns, never widened")
    ax.set_xlabel(xlabel)
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    ax.spines[["top", "right"]].set_visible(False)
    n = tl.steps_in_rank or 1
    how = f"median of {fmt.count(n, 'step')}" if n > 1 else "the only step"
    more = f"; {fmt.count(info['left_out'], 'quieter stream')} left out" if info["left_out"] else ""
    fig.suptitle(f"GPU timeline at true scale · rank {r.rank} · step {tl.step} ({how}, "
                 f"{fmt.ms(tl.wall_us, 1)}){more}", fontsize=11)
    used = {c for _n, cats, _b in info["lanes"] for c, v in cats.items() if v}
    handles = [Patch(facecolor=color(k), label=lab) for k, lab in TIMELINE if k in used]
    handles.append(Patch(facecolor=color("idle"), label="idle (breakdown lane)"))
    pg = tl.pageable
    if pg:
        handles.append(Line2D([], [], linestyle="none", label=f"pageable copy ({fmt.count(len(pg), 'copy')})",
                              **pageable_marker(len(pg))))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, frameon=False,
              title="GPU activity", fontsize=9, title_fontsize=9)
    return fig
