"""The throughput, MFU, GPU-hours and memory rows of ``traceinspect diff`` as cells and lines of plain text, for the
text, Markdown and HTML diffs (formatting only: every number is a field of the diff's ``throughput`` and ``memory``
rows, ``report/diff_figures.py``). A figure a side does not know is ``-``, and the lines under the table say why."""

from __future__ import annotations

from ..report.diff_doc import DiffDoc, FigureRowDoc
from .document import given
from .memory import gpu_time, size
from .safe import visible as plain

FIGURES_HEAD = ["figure", "base", "new", "change", ""]


def figure_value(v, unit: str) -> str:
    if v is None:
        return "-"
    if unit in ("samples/s", "tokens/s", "samples", "tokens"):
        return f"{v:,.0f}" if abs(v) >= 100 or v == int(v) else f"{v:.3g}"
    if unit == "TFLOP/s":
        return f"{v:,.2f}" if abs(v) >= 1 else f"{v:.3g}"
    if unit == "FLOP":
        return f"{v / 1e12:,.3g} TFLOP"
    if unit == "share":
        return f"{100 * v:.2f} %"
    if unit == "GPU-hours":
        return gpu_time(v)
    if unit == "bytes":
        return size(v)
    return f"{v:,.3g}"


def _change(r: FigureRowDoc) -> str:
    if r.delta is None:
        return "-"
    if r.unit == "share":
        return f"{100 * r.delta:+.2f} pt"
    if r.rel_change is None:
        return figure_value(r.delta, r.unit)
    return f"{100 * r.rel_change:+.1f} %"


def _shown(dd: DiffDoc) -> list[FigureRowDoc]:
    """The rows to show: the rank's and, where a side ran on several ranks, the job's; the memory rows where a side
    recorded memory."""
    multi = any(side.world_size not in (None, 1) for side in (dd.base, dd.new))
    rows = [r for r in given(dd.throughput) or [] if r.scope == "rank" or multi]
    mem = given(dd.memory) or []
    if any(r.base is not None or r.new is not None for r in mem):
        rows += mem
    return rows


def figure_cells(dd: DiffDoc) -> list[list[str]]:
    """Rows of the figures table: figure, base, new, change, better / worse."""
    return [[r.label, figure_value(r.base, r.unit), figure_value(r.new, r.unit), _change(r), r.assessment or ""]
            for r in _shown(dd)]


def unknown_lines(dd: DiffDoc) -> list[str]:
    """Why the figures shown as ``-`` are not known: one line per reason, naming the sides and the figures."""
    why: dict[str, tuple[list[str], list[str]]] = {}  # reason -> (sides, figures)
    for r in _shown(dd):
        for side, v, reason in (("base", r.base, r.reason.base), ("new", r.new, r.reason.new)):
            if v is None and reason:
                sides, labels = why.setdefault(reason, ([], []))
                sides += [side] if side not in sides else []
                labels += [r.label] if r.label not in labels else []
    out = [f"not known ({' and '.join(sides)}): {', '.join(labels)}: {plain(k)}" for k, (sides, labels) in why.items()]
    mem = given(dd.memory) or []
    if mem and all(r.base is None and r.new is None for r in mem):
        reason = mem[0].reason.base or mem[0].reason.new
        out.append("peak memory: not recorded on either side" + (f": {plain(reason)}" if reason else ""))
    return out


def per_sample_line(dd: DiffDoc) -> str:
    """The gate's per-sample comparison, where the samples per step changed."""
    gate = given(dd.gate)
    ps = given(gate.per_sample) if gate is not None else None
    if ps is None:
        return ""
    s, t = ps.samples_per_step, ps.us_per_sample
    rel = f" ({100 * ps.rel_change:+.1f} %)" if ps.rel_change is not None else ""
    return (f"Samples per step changed ({s.base:,.0f} -> {s.new:,.0f}): the gate compares the time per sample, "
            f"{t.base:,.2f} -> {t.new:,.2f} us{rel}.")
