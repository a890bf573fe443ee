"""The work-vs-rate part of ``traceinspect diff``'s text, and the regression gate's line (formatting only: every
number comes from the typed diff document, ``report/diff_doc.py``). Names read from traces are shown as plain text:
control characters become ``?`` and nothing in them is taken as markup."""

from __future__ import annotations

import io
import re

from ..report.diff_doc import DiffDoc, GateDoc, check
from .document import given, present

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def plain(s) -> str:
    """A name or sentence from the diff as one line of plain text."""
    return _CONTROL.sub("?", str(s))


def value(v, unit: str) -> str:
    if v is None:
        return "-"
    if unit == "bytes":
        return f"{v / 1e6:.2f} MB"
    if unit == "us":
        return f"{v / 1000:.2f} ms" if abs(v) >= 1000 else f"{v:.1f} us"
    return f"{v:.0f}" if abs(v - round(v)) < 0.05 else f"{v:.1f}"


def rel(v) -> str:
    return "-" if v is None else f"{100 * v:+.0f} %"


def signed_ms(us) -> str:
    return "-" if us is None else f"{us / 1000:+.2f} ms"


def work_cells(dd: DiffDoc) -> list[list[str]]:
    """Rows of the work table: what, base, new, changed."""
    return [[r.label, value(r.base, r.unit), value(r.new, r.unit), "changed" if r.changed else "same"]
            for r in given(dd.work) or []]


def rate_cells(dd: DiffDoc) -> list[list[str]]:
    """Rows of the rate table: what, base, new, change, time effect per step."""
    return [[r.label, value(r.base, r.unit), value(r.new, r.unit), rel(r.rel_change), signed_ms(r.effect_us)]
            for r in given(dd.rate) or []]


def same_shape_cells(dd: DiffDoc) -> list[list[str]]:
    """Rows of the table of kernels of the same name and shape on both sides (most GPU time first): kernel, shape,
    calls per step, base and new GPU time per call, change."""
    names = given(dd.names)
    n = given(names.kernel_shapes) if names is not None else None
    if n is None or not n.available:
        return []
    return [[plain(r.name)[:80], plain(given(r.shape) or ""), value(r.count, "count"), value(r.base_us_per_call, "us"),
             value(r.new_us_per_call, "us"), rel(r.rel_change)] for r in given(n.same) or []]


SAME_SHAPE_HEAD = ["kernel (same name and shape)", "shape", "calls/step", "base/call", "new/call", "change"]


def name_lines(dd: DiffDoc) -> list[str]:
    out = []
    names = given(dd.names)
    if names is None:  # a diff of two reports alone (report/diff.py) has no name sections
        return out
    for section, n in (("kernels", names.kernels), ("ops", names.ops), ("kernel_shapes", given(names.kernel_shapes))):
        if n is None or not n.available:
            if section == "kernel_shapes" and names.kernels.available:
                out.append("kernel shapes: not read (the trace files are too large, or do not decode)")
            continue
        what = "kernels by name and shape" if section == "kernel_shapes" else f"{n.what}s by name"
        if not n.changed_names:
            out.append(f"{what}: the same names and counts per step")
            continue
        out.append(f"{what}: {n.changed_names} changed count per step "
                   f"({signed_ms(n.changed_delta_us)} of time with them):")
        for c in n.changed[:5]:
            shape = f"  ({plain(c.shape)})" if present(c.shape) else ""
            out.append(f"  {value(c.base_count, 'count')} -> {value(c.new_count, 'count')}  "
                       f"{signed_ms(c.delta_us)}  {plain(c.name)[:100]}{shape}")
    return out


def runs_line(dd: DiffDoc) -> str:
    runs = given(dd.overall.runs) if dd.overall is not None else None
    if runs is None:
        return ""
    if runs.note:
        return f"Noise: {runs.note}."
    sd = runs.between_run_sd_us
    parts = [f"{side} {n} capture(s), between-run sd {value(v, 'us')}"
             for side, n, v in (("base", runs.base, sd.base), ("new", runs.new, sd.new))]
    return f"Noise across runs: {'; '.join(parts)} (joins the step-to-step noise)."


def render_work_rate_text(dd: DiffDoc | dict, width: int = 120) -> str:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    dd = check(dd)
    v = given(dd.verdict)
    if v is None:
        return ""
    buf = io.StringIO()
    con = Console(file=buf, width=width, force_terminal=False, color_system=None, highlight=False, soft_wrap=False)
    con.print()
    con.print(Text("Work vs rate", style="bold"))
    con.print(Text(f"Verdict ({v.kind}): {plain(v.text)}"))
    line = runs_line(dd)
    if line:
        con.print(Text(line))
    work = Table(show_edge=False, pad_edge=False, box=None, header_style="bold", title="what it did, per step")
    for col in ("work", "base", "new", ""):
        work.add_column(col, justify="left" if col in ("work", "") else "right")
    for row in work_cells(dd):
        work.add_row(*row)
    rate = Table(show_edge=False, pad_edge=False, box=None, header_style="bold", title="how fast")
    for col in ("rate", "base", "new", "change", "effect/step"):
        rate.add_column(col, justify="left" if col == "rate" else "right")
    for row in rate_cells(dd):
        rate.add_row(*row)
    grid = Table.grid(padding=(0, 4))
    grid.add_row(work, rate)
    con.print(grid)
    same = same_shape_cells(dd)
    if same:
        t = Table(show_edge=False, pad_edge=False, box=None, header_style="bold",
                  title="GPU time per kernel of the same name and shape")
        for col in SAME_SHAPE_HEAD:
            if col == SAME_SHAPE_HEAD[0]:
                t.add_column(col, justify="left", max_width=44, no_wrap=True, overflow="ellipsis")
            else:
                t.add_column(col, justify="left" if col == "shape" else "right", no_wrap=True)
        for row in same:
            t.add_row(*row)
        con.print(t)
    for ln in name_lines(dd):
        con.print(Text(ln))
    _figures(con, dd)
    return buf.getvalue()


def _figures(con, dd: DiffDoc) -> None:
    """Throughput, MFU, GPU-hours and peak memory, base against new (``render/diff_figures.py``)."""
    from rich.table import Table
    from rich.text import Text

    from .diff_figures import FIGURES_HEAD, figure_cells, per_sample_line, unknown_lines

    cells = figure_cells(dd)
    if not cells:
        return
    con.print()
    t = Table(show_edge=False, pad_edge=False, box=None, header_style="bold",
              title="Throughput, MFU, GPU-hours and memory (the compared ranks; docs/diff.md)", title_justify="left")
    for col in FIGURES_HEAD:
        t.add_column(col, justify="left" if col in ("figure", "") else "right", no_wrap=col != "figure")
    for row in cells:
        t.add_row(*row)
    con.print(t)
    for ln in unknown_lines(dd) + [x for x in (per_sample_line(dd),) if x]:
        con.print(Text(ln))


def render_gate_line(gate: GateDoc) -> str:
    head = (f"regression gate ({gate.pct:g} %{', machine differences counted' if gate.count_machine else ''}): "
            f"{'TRIPPED' if gate.tripped else 'passed'}")
    return head + "".join(f"\n  {plain(r)}" for r in gate.reasons)
