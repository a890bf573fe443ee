"""The text of ``traceinspect diff`` (and of ``demo``), from the diff document (``report.diff.diff_reports``).

Formatting only: every number comes from the typed diff document (``report/diff_doc.py``). Printed as rich
``Text``, never markup (``text.plain``).
"""

from __future__ import annotations

import io

from ..report.diff_doc import DiffDoc, MetricDoc, OverallDoc, StatsDoc, check
from . import format as fmt, safe
from .document import given
from .vocabulary import LABELS

_ms = fmt.ms_num


def _mean_sd(side: StatsDoc) -> str:
    if side.mean_us is None:
        return "-"
    sd = side.sd_us
    return f"{side.mean_us / 1000:.2f} ± {sd / 1000:.2f}" if sd is not None else f"{side.mean_us / 1000:.2f}"


def _delta(row: MetricDoc | OverallDoc) -> str:
    d = row.delta_us
    if d is None:
        return "-"
    s = fmt.ms_num(d) if round(d / 1000, 2) == 0 else f"{round(d / 1000, 2) + 0.0:+.2f}"  # + 0.0: no "-0.00"
    share = row.share_of_step
    if share is not None and round(100 * share, 1) != 0:  # no "(+0.0% of step)" beside a change
        s += f" ({round(100 * share, 1) + 0.0:+.1f} % of step)"
    return s


def _verdict(row: MetricDoc | OverallDoc, wall: bool) -> tuple[str, str]:
    sig = row.significant
    if row.delta_us is None:
        return "not on both sides", "dim"
    if sig is None:
        return "cannot tell (<2 steps)", "dim"
    if not sig:
        return "within noise", "dim"
    up = row.delta_us > 0
    if wall:
        return ("slower", "bold red") if up else ("faster", "bold green")
    return ("more", "red") if up else ("less", "green")


def captures(dd: DiffDoc) -> dict[str, list]:
    """Per side, the captures the diff reads (``runs``; one: the side's own source). With several, the step time
    is their mean (``overall``) while the per-rank tables and the findings are the first capture's."""
    runs = given(dd.runs)
    return {"base": list((runs.base if runs is not None else None) or [dd.base.source]),
            "new": list((runs.new if runs is not None else None) or [dd.new.source])}


def _of(runs: list) -> str:
    return f", mean of {len(runs)} captures" if len(runs) > 1 else ""


def render_diff_text(dd: DiffDoc | dict, width: int = 120, color: bool = False) -> str:
    from rich.table import Table
    from rich.text import Text

    from .text import console_for, plain

    dd = check(dd)
    buf = io.StringIO()
    con = console_for(buf, width, color)
    con.print(Text("traceinspect diff", style="bold"))
    runs = captures(dd)
    for side, s in (("base", dd.base), ("new", dd.new)):
        steps = ", ".join(f"rank {r}: {fmt.count(n, 'step')}" for r, n in s.steps.items()) or "no ranks"
        more = runs[side][1:]
        also = (f"; also {', '.join(safe.path(x) for x in more)}: {len(runs[side])} captures, the step time below is "
                "their mean, the tables and findings are the first's") if more else ""
        con.print(plain(f"{side:4s}: {safe.path(s.source)} ({steps}{also})"))
    o = dd.overall
    if o is not None and o.delta_us is not None:
        v, style = _verdict(o, True)
        line = Text("Step time (slowest rank): ", style="bold")
        line.append(plain(f"{_ms(o.base.mean_us)} ms (rank {o.base_rank}{_of(runs['base'])}) -> "
                          f"{_ms(o.new.mean_us)} ms (rank {o.new_rank}{_of(runs['new'])}), "
                          f"{_delta(o).split(' (')[0]} ms"))
        if o.rel_change is not None:
            line.append(f" ({100 * o.rel_change:+.1f} %)")
        line.append(": ")
        line.append(v, style=style)
        con.print(line)
    con.print(plain(f"Noise rule: {dd.rule.text}.", style="dim"))
    for rk in dd.ranks:
        con.print()
        names = (f"rank {rk.base_rank}" if rk.base_rank == rk.new_rank
                 else f"base rank {rk.base_rank} vs new rank {rk.new_rank}")
        basis = rk.basis
        what = ("GPU timeline" if basis.base == "gpu" else "training thread") if basis.base == basis.new \
            else f"basis changed: {basis.base} -> {basis.new}"
        first = ("" if len(runs["base"]) == len(runs["new"]) == 1 else
                 f" of the first capture of each side ({safe.path(dd.base.source)} vs {safe.path(dd.new.source)})")
        con.print(plain(f"{names.capitalize()} · {what} · ms per step, mean ± sd over "
                       f"{len(rk.steps.base)} / {len(rk.steps.new)} steps{first}", style="bold"))
        t = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
        for col, just in (("category", "left"), ("base", "right"), ("new", "right"), ("change ms", "right"),
                          ("noise 2·SE", "right"), ("", "left")):
            t.add_column(col, justify=just)
        for row in rk.metrics:
            v, style = _verdict(row, row.metric == "wall")
            cells = (LABELS.get(row.metric, row.metric), _mean_sd(row.base), _mean_sd(row.new), _delta(row),
                     _ms(row.noise_us))
            t.add_row(*(plain(safe.name(c)) for c in cells), Text(v, style=style))
        con.print(t)
    if dd.only_in_base or dd.only_in_new:
        con.print()
        if dd.only_in_base:
            con.print(plain(f"Ranks only in the base: {', '.join(map(str, dd.only_in_base))}"))
        if dd.only_in_new:
            con.print(plain(f"Ranks only in the new run: {', '.join(map(str, dd.only_in_new))}"))
        if not dd.ranks and dd.only_in_base and dd.only_in_new:
            con.print(plain(f"No rank is in both runs; to compare two different ranks: --pair "
                           f"{dd.only_in_base[0]}:{dd.only_in_new[0]}", style="yellow"))
    f = dd.findings
    con.print()
    con.print(Text("Findings", style="bold"))
    if not (f.disappeared or f.appeared or f.severity_changed or f.unchanged):
        con.print(plain("  none in either run"))
    for e in f.disappeared:
        con.print(plain(f"  gone:      [{e.severity.base}] {e.id}: {safe.words(e.title_base)}", style="green"))
    for e in f.appeared:
        con.print(plain(f"  new:       [{e.severity.new}] {e.id}: {safe.words(e.title_new)}", style="red"))
    for e in f.severity_changed:
        con.print(plain(f"  {e.direction + ':':10s} {e.id}: {e.severity.base} -> {e.severity.new} "
                        f"({safe.words(e.title_new)})", style="green" if e.direction == "better" else "red"))
    for e in f.unchanged:
        at = e.time_at_stake_us
        stake = (f", at stake {_ms(at.base)} -> {_ms(at.new)} ms/step"
                 if at.base is not None and at.new is not None else "")
        con.print(plain(f"  unchanged: [{e.severity.new}] {e.id}{stake}", style="dim"))
    return buf.getvalue()
