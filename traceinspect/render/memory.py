"""The memory section of every page (docs/memory.md): what each renderer shows of ``ranks[].memory``, as plain
lines and tables of strings; the text, Markdown and HTML renderers lay them out. Nothing is computed here: every
number is a field of the report."""

from __future__ import annotations

from ..report.doc import MemoryDoc, RankDoc, ReportDoc
from . import safe
from .document import given
from .sections import MAX_STEP_ROWS  # as many step rows as the time section's step table

MB = 1e6
GB = 1e9


def size(nbytes) -> str:
    """Bytes in GB or MB (decimal, as every byte figure of the report); "-" for unknown."""
    if nbytes is None:
        return "-"
    return f"{nbytes / GB:.2f} GB" if abs(nbytes) >= GB else f"{nbytes / MB:.1f} MB"


def not_recorded(d: ReportDoc) -> str | None:
    """One line for a report none of whose ranks recorded memory events: why, and how to record them."""
    ranks = d.ranks
    if not ranks or any(given(r.memory) is not None for r in ranks):
        return None
    reason = next((r.memory_reason for r in ranks if given(r.memory_reason)), None)
    return f"not recorded: {reason}" if reason else None


def headline(r: RankDoc) -> str | None:
    """One line per rank with memory events: the peak, the capacity and its share, the batch and the largest batch
    that fits."""
    m = given(r.memory)
    if m is None:
        return None
    cap = m.capacity_bytes
    peak_r, peak_a = m.peak_reserved_bytes, m.peak_allocated_bytes
    where = "host" if m.device_type == 0 else f"device {m.device_id}"
    parts = [f"rank {r.rank} ({where}): peak {size(peak_a)} allocated"]
    if peak_r is not None:
        parts[0] += f", {size(peak_r)} reserved"
    if cap:
        parts.append(f"of {size(cap)} ({100 * (m.peak_share or 0):.0f} %)")
    b = m.batch_size
    if b:
        accum = m.accumulation_steps
        parts.append(f"batch {b}" + (f" x {accum} accumulation steps" if accum and accum > 1 else ""))
        mx = m.max_batch_predicted
        if mx is not None:
            parts.append(f"largest batch predicted to fit {mx}")
    if m.oom_events:
        parts.append(f"{m.oom_events} failed allocation(s) ([OutOfMemory])")
    growth = m.growth_bytes_per_step
    if growth and abs(growth) >= MB:
        parts.append(f"grows {size(growth)} a step")
    return "; ".join(parts)


STEP_HEAD = ["step", "start", "peak alloc", "peak at ms", "peak reserved", "slack", "end", "scales w/ batch"]


def shown_steps(m: MemoryDoc) -> list:
    """The steps the memory table shows: all of them up to ``MAX_STEP_ROWS``; else the first, the last and those of
    the highest peak allocated, in step order (a leak shows between the first and the last, the risk at the peaks)."""
    steps = list(m.steps)
    if len(steps) <= MAX_STEP_ROWS:
        return steps
    keep = {0, len(steps) - 1}
    by_peak = sorted(range(1, len(steps) - 1), key=lambda i: (-(steps[i].peak_allocated_bytes or 0), i))
    keep.update(by_peak[: MAX_STEP_ROWS - 2])
    return [steps[i] for i in sorted(keep)]


def step_rows(m: MemoryDoc) -> list[list[str]]:
    return [[str(s.step), size(s.start_allocated_bytes), size(s.peak_allocated_bytes),
             "-" if s.peak_at_us is None else f"{s.peak_at_us / 1000:.2f}",
             size(s.peak_reserved_bytes), size(s.slack_at_peak_bytes), size(s.end_allocated_bytes),
             size(s.scaling_at_peak_bytes)] for s in shown_steps(m)]


def steps_note(m: MemoryDoc) -> str | None:
    """Said under a memory table that shows only some of the steps."""
    if len(m.steps) <= MAX_STEP_ROWS:
        return None
    return (f"{len(m.steps)} steps, {MAX_STEP_ROWS} shown: the first, the last and those of the highest peak "
            "allocated (all in the JSON report)")


HOLDER_HEAD = ["held at the peak", "phase", "op", "bytes", "allocations"]
PREDICT_HEAD = ["batch", "predicted peak alloc", "with slack", "fits"]


def holder_rows(m: MemoryDoc, limit: int = 8) -> list[list[str]]:
    return [[h.origin, h.phase or "-", safe.one_line(h.op) or "-", size(h.bytes), str(h.count) if h.count else "-"]
            for h in m.peak_holders[:limit]]


def predict_rows(m: MemoryDoc) -> list[list[str]]:
    rows = []
    for p in m.predicted:
        fits = "-" if p.fits is None else ("yes" if p.fits else "no")
        rows.append([str(p.batch) + (" (measured)" if p.measured else ""), size(p.peak_allocated_bytes),
                     size(p.peak_reserved_bytes), fits])
    return rows


def tables(m: MemoryDoc, holders: int = 8) -> list[tuple[list[str], list[list[str]], int, str | None]]:
    """The memory section's tables of a rank, in order, each as (head, rows, name columns, the line said under
    it or None): steps, what is held at the peak (``holders`` rows), the predicted peaks; a table without rows is
    left out (its line too)."""
    out = [(STEP_HEAD, step_rows(m), 1, steps_note(m)), (HOLDER_HEAD, holder_rows(m, holders), 3, None),
           (PREDICT_HEAD, predict_rows(m), 1, None)]
    return [t for t in out if t[1]]


def notes(m: MemoryDoc) -> list[str]:
    """The lines said after a rank's memory tables: the (batch, accumulation) pairs that keep the logical batch,
    and the margin note; those that have something to say."""
    return [n for n in (accumulation_line(m), note(m)) if n]


def accumulation_line(m: MemoryDoc) -> str | None:
    opts = [a for a in m.accumulation_options if a.fits is not False]
    if not opts:
        return None
    logical = opts[0].logical_batch
    pairs = ", ".join(f"{a.batch} x {a.accum_steps}" + (" (now)" if a.current else "") for a in opts)
    return f"batch x accumulation steps that keep the logical batch of {logical} and fit: {pairs}"


def note(m: MemoryDoc) -> str:
    src = ("recorded by the capture" if m.unseen_source == "capture"
           else "assumed (memory_unseen_bytes): the capture did not record the device's free memory")
    return (f"Unseen by the allocator (CUDA context, NCCL buffers, other processes): {size(m.unseen_bytes)}, "
            f"{src}. Predictions: docs/memory.md.")


# --- cost and the batch x accumulation trade-off (docs/metrics.md) ----------------------------------------------

def gpu_time(hours) -> str:
    """GPU-hours as a short figure: GPU-h from a tenth of an hour, GPU-s below (never a long fraction)."""
    if hours is None:
        return "-"
    if hours >= 0.1:
        return f"{hours:,.3g} GPU-h" if hours < 1000 else f"{hours:,.0f} GPU-h"
    return f"{hours * 3600:,.3g} GPU-s" if hours * 3600 < 1000 else f"{hours * 3600:,.0f} GPU-s"


def money(v) -> str:
    return f"{v:,.2f}" if v >= 0.01 else f"{v:.2g}"


def cost_line(r: RankDoc) -> str | None:
    c = given(r.cost)
    if c is None or c.gpu_hours_per_million_samples is None:
        return None
    line = f"rank {r.rank}: {gpu_time(c.gpu_hours_per_million_samples)} per million samples"
    if c.projected_gpu_hours_per_million_samples is not None:
        line += f", {gpu_time(c.projected_gpu_hours_per_million_samples)} with every finding fixed"
    if c.cost_per_million_samples is not None:
        line += f"; {money(c.cost_per_million_samples)} per million samples at {c.gpu_hour_price:g} a GPU-hour"
        if c.projected_cost_per_million_samples is not None:
            line += f" ({money(c.projected_cost_per_million_samples)} fixed)"
    return line


TRADEOFF_HEAD = ["batch x accum", "ms per logical batch", "peak alloc", "all-reduces", "samples/s",
                 "GPU per M samples", ""]


def tradeoff_rows(r: RankDoc) -> list[list[str]]:
    rows = []
    for o in given(r.tradeoff) or []:
        precision = given(o.precision)
        mark = ", ".join(x for x, on in (("now", o.current), ("best", o.best),
                                         (f"{precision}, projected", precision),
                                         ("fit not known", o.fits is None and not precision)) if on)
        rows.append([f"{o.batch} x {o.accum_steps}", f"{o.step_ms:.2f}", size(o.peak_bytes), str(o.allreduces),
                     f"{o.samples_per_s:,.0f}", gpu_time(o.gpu_hours_per_million_samples), mark])
    return rows


def tradeoff_title(r: RankDoc) -> str | None:
    m = given(r.tradeoff_model)
    if m is None:
        return None
    return (f"rank {r.rank}: the logical batch of {m.logical_batch} as physical batch x accumulation steps, "
            "predicted from this trace (docs/metrics.md, \"The trade-off table\")")
