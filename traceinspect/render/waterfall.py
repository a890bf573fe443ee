"""The waterfall of the step: from the measured step, each finding's claimed time, down to the projected step.

Read from the document: the top-level ``verdict`` names the rank; that rank's ``step_us``, ``projected_step_us``
and ``claims`` (``[{"id", "us"}]``: per-step time each finding claims, disjoint, so they add up) give the bars.
Reports without claims have no waterfall (``rows`` returns None). Formatting and layout only.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..report.doc import ReportDoc
from . import format as fmt, safe
from .document import given

MIN_US = 5.0  # claims below this (0.00 ms as written) get no bar of their own; the count is said instead
SEVERITY_COLORS = {"critical": "#B00020", "warning": "#B26A00", "info": "#0B57D0"}
BAR = "\u2588"
MIN_BAR = 12  # the fewest characters the measured step's bar gets beside the labels before they go on lines of their own


@dataclass(frozen=True)
class Bar:
    """A finding's bar: its claim per step (``us``), drawn down from ``from_us``; ``after``: the finding whose fix
    this saving needs first."""

    id: str
    after: str | None
    label: str
    title: str
    severity: str
    us: float
    from_us: float


@dataclass(frozen=True)
class Waterfall:
    """The bars of one rank: its step, each claim drawn, the projected step; ``tiny`` counts the claims too small
    to draw."""

    rank: int
    step_us: float
    claims: list[Bar]
    tiny: int
    projected_step_us: float
    text: str | None


def rows(d: ReportDoc) -> Waterfall | None:
    """The waterfall of the verdict's rank (else the rank with the longest step), or None without claims."""
    ranks = {r.rank: r for r in d.ranks}
    v = given(d.verdict)
    r = ranks.get(given(v.rank)) if v is not None else None
    if r is None:
        withs = [x for x in ranks.values() if given(x.step_us) is not None]
        r = max(withs, key=lambda x: x.step_us, default=None)
    if r is None or given(r.step_us) is None or not isinstance(r.claims, list):
        return None
    by_id = {f.id: f for f in d.findings}
    at = float(r.step_us)
    claims, tiny = [], 0
    for c in r.claims:
        us = c.us
        if not us or us < MIN_US:
            tiny += 1 if us else 0
            continue
        f = by_id.get(c.id)
        after = given(c.after)
        label = f"{c.id} after {after}" if after else c.id
        claims.append(Bar(id=c.id, after=after, label=label, title=f.title if f is not None else "",
                          severity=f.severity if f is not None else "info", us=float(us), from_us=at))
        at -= float(us)
    proj = given(r.projected_step_us)
    return Waterfall(rank=r.rank, step_us=float(r.step_us), claims=claims, tiny=tiny,
                     projected_step_us=float(proj) if proj is not None else at,
                     text=given(v.text) if v is not None else None)


def bar_lines(w: Waterfall, width: int = 40, columns: int | None = None) -> list[str]:
    """The waterfall as text bars: one line per bar, aligned, ``width`` characters for the measured step. With
    ``columns``, every line fits in that many: the bars shrink (to ``MIN_BAR``), then each label goes on a line of
    its own above its value and bar."""
    step = w.step_us or 1.0
    labels = ["measured step"] + ["- " + c.label for c in w.claims] + ["projected step"]
    name_w = max(len(x) for x in labels)
    stacked = False
    if columns is not None:
        width = min(width, columns - name_w - 14)
        if width < MIN_BAR:
            stacked, width = True, max(min(40, columns - 14), 1)

    def bar(lo: float, hi: float) -> str:
        a, b = round(width * lo / step), round(width * hi / step)
        return " " * a + BAR * max(b - a, 1 if hi > lo else 0)

    bars = [(fmt.ms(w.step_us), bar(0, w.step_us))]
    bars += [(fmt.signed_ms(-c.us), bar(c.from_us - c.us, c.from_us)) for c in w.claims]
    bars.append((fmt.ms(w.projected_step_us), bar(0, w.projected_step_us)))
    out = []
    for label, (value, drawn) in zip(labels, bars):
        out += [label, f"  {value:>10}  {drawn}"] if stacked else [f"{label:<{name_w}}  {value:>10}  {drawn}"]
    if w.tiny:
        out.append(f"({fmt.count(w.tiny, 'more finding')} claiming under {fmt.ms(MIN_US * 1.0, 3)} per step)")
    return out


def figure(d: ReportDoc, new_figure):
    """Horizontal waterfall bars (ms): measured step, each claim, projected step. None without claims."""
    w = rows(d)
    if w is None or not w.claims:
        return None
    labels = ["measured step"] + [safe.plot_text(c.label) for c in w.claims] + ["projected step"]
    n = len(labels)
    fig = new_figure(10.0, min(max(1.5 + 0.42 * n, 2.8), 9.0))
    ax = fig.add_subplot()
    ys = list(range(n))[::-1]
    ms = lambda us: us / 1000.0  # noqa: E731
    ax.barh(ys[0], ms(w.step_us), color="#5F6368", height=0.6, gid="wf:measured")
    for y, c in zip(ys[1:-1], w.claims):
        ax.barh(y, ms(c.us), left=ms(c.from_us - c.us), height=0.6,
                color=SEVERITY_COLORS.get(c.severity, "#0B57D0"), gid=f"wf:{c.id}")
        ax.annotate(fmt.signed_ms(-c.us), xy=(ms(c.from_us), y), xytext=(4, 0), textcoords="offset points",
                    va="center", fontsize=8)
    ax.barh(ys[-1], ms(w.projected_step_us), color="#137333", height=0.6, gid="wf:projected")
    for y, us in ((ys[0], w.step_us), (ys[-1], w.projected_step_us)):
        ax.annotate(fmt.ms(us), xy=(ms(us), y), xytext=(4, 0), textcoords="offset points", va="center", fontsize=8)
    ax.set_yticks(ys)
    ax.set_yticklabels(labels, fontsize=9)
    ax.set_xlim(0, ms(w.step_us) * 1.15)
    ax.set_xlabel("time per step (ms)")
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    ax.spines[["top", "right"]].set_visible(False)
    fig.suptitle(f"Where the step could go · rank {w.rank}: {fmt.ms(w.step_us)} measured, "
                 f"{fmt.ms(w.projected_step_us)} with every finding fixed", fontsize=11)
    return fig
