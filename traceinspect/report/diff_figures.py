"""Throughput, MFU, GPU-hours and peak memory of the two sides of a diff, base against new (pure; no I/O).

The figures are the reports' own (docs/metrics.md, "Throughput, FLOPs and MFU", "Cost"; docs/memory.md), read, not
recomputed: for the rank each capture compares (``runs.ranks``), ``ranks[].throughput`` and ``ranks[].memory``,
and for the job, the report's ``throughput``. A side's value is the mean over its captures (each capture weighs the
same, as for the step time); ``spread`` is the range of the captures' values (0 with one). A figure one capture of
a side does not know is null on that side, with that capture's reason (``reason``), never zero.

``delta`` is new - base, ``rel_change`` delta / base; ``better`` says which way is good (``higher``, ``lower``, or
``none`` for what a step carries: samples, tokens, FLOPs, capacity), and ``assessment`` reads the sign against it
(``better``, ``worse``, ``same`` where the values are equal; null where either side is unknown or ``better`` is
``none``). Whether a change is beyond the noise is the step time's question (``overall``); the regression gate reads
the time per sample (``per_sample``, ``report/diff_explain.py``).
"""

from __future__ import annotations

from typing import NamedTuple


class Figure(NamedTuple):
    section: str  # the rank's report field the figure is read from: throughput or memory
    field: str
    label: str
    unit: str  # samples, tokens, FLOP, samples/s, tokens/s, TFLOP/s, share, GPU-hours, bytes
    better: str  # higher, lower, none


#: The compared rank's figures, in reading order.
RANK_FIGURES: tuple[Figure, ...] = (
    Figure("throughput", "samples_per_step", "samples per step (batch x accumulation)", "samples", "none"),
    Figure("throughput", "tokens_per_step", "tokens per step", "tokens", "none"),
    Figure("throughput", "samples_per_s", "samples/s", "samples/s", "higher"),
    Figure("throughput", "tokens_per_s", "tokens/s", "tokens/s", "higher"),
    Figure("throughput", "model_flops_per_step", "model FLOPs per step", "FLOP", "none"),
    Figure("throughput", "achieved_tflops", "achieved TFLOP/s", "TFLOP/s", "higher"),
    Figure("throughput", "mfu", "MFU", "share", "higher"),
    Figure("throughput", "gpu_hours_per_million_samples", "GPU time per million samples", "GPU-hours", "lower"),
)
#: The job's figures (the report's ``throughput``: the ranks' figures with the world size).
JOB_FIGURES: tuple[Figure, ...] = (
    Figure("job", "samples_per_s", "job samples/s", "samples/s", "higher"),
    Figure("job", "tokens_per_s", "job tokens/s", "tokens/s", "higher"),
    Figure("job", "achieved_tflops", "job achieved TFLOP/s", "TFLOP/s", "higher"),
    Figure("job", "mfu", "job MFU", "share", "higher"),
    Figure("job", "gpu_hours_per_million_samples", "job GPU time per million samples", "GPU-hours", "lower"),
)
#: The compared rank's device memory, where the trace recorded it (docs/memory.md).
MEMORY_FIGURES: tuple[Figure, ...] = (
    Figure("memory", "peak_allocated_bytes", "peak allocated", "bytes", "lower"),
    Figure("memory", "peak_reserved_bytes", "peak reserved", "bytes", "lower"),
    Figure("memory", "capacity_bytes", "device capacity", "bytes", "none"),
    Figure("memory", "peak_share", "peak reserved / capacity", "share", "lower"),
)

NO_THROUGHPUT = "the report has no throughput for this rank (a report saved before it existed)"
NO_JOB = "the report has no job throughput (a report saved before it existed)"
NO_RANK = "no rank with steps to compare"
_MEMORY_REASON = {
    "peak_reserved_bytes": "the allocator reports no reserved bytes (host memory)",
    "capacity_bytes": "the trace names no device memory (deviceProperties[].totalGlobalMem)",
    "peak_share": "no capacity or no reserved bytes known",
}


def _rank(d: dict, rank: int | None) -> dict | None:
    return next((r for r in d.get("ranks", []) if r["rank"] == rank), None) if rank is not None else None


def _one(d: dict, rank: int | None, f: Figure) -> tuple[float | None, str | None]:
    """One capture's figure and, where it is null, why."""
    if f.section == "job":
        t = d.get("throughput")
        if not t:
            return None, NO_JOB
        v = t.get(f.field)
        return (v, None) if v is not None else (None, (t.get("reasons") or {}).get(f.field) or "not known")
    r = _rank(d, rank)
    if r is None:
        return None, NO_RANK
    if f.section == "memory":
        m = r.get("memory")
        if not m:
            return None, r.get("memory_reason") or "the report has no memory section for this rank"
        v = m.get(f.field)
        if v is not None:
            return v, None
        why = next((x for x in m.get("reasons") or [] if x.startswith(f.field.split("_bytes")[0] + ":")), None)
        return None, why or _MEMORY_REASON.get(f.field, "not known")
    t = r.get("throughput")
    if not t:
        return None, NO_THROUGHPUT
    v = t.get(f.field)
    return (v, None) if v is not None else (None, (t.get("reasons") or {}).get(f.field) or "not known")


def _side(reports: list[dict], ranks: list[int | None], f: Figure) -> tuple[float | None, float | None, str | None]:
    """(mean over the captures, range of their values, reason): null with the first capture's reason where any
    capture does not know the figure."""
    vals = []
    for d, rank in zip(reports, ranks):
        v, why = _one(d, rank, f)
        if v is None:
            return None, None, why
        vals.append(float(v))
    if not vals:
        return None, None, NO_RANK
    return sum(vals) / len(vals), max(vals) - min(vals), None


def _assess(f: Figure, a: float | None, b: float | None) -> str | None:
    if a is None or b is None or f.better == "none":
        return None
    if a == b:
        return "same"
    return "better" if (b > a) == (f.better == "higher") else "worse"


def figure_row(f: Figure, bases: list[dict], news: list[dict], ranks_a: list[int | None],
               ranks_b: list[int | None]) -> dict:
    a, sa, wa = _side(bases, ranks_a, f)
    b, sb, wb = _side(news, ranks_b, f)
    delta = b - a if a is not None and b is not None else None
    return {"key": f"{f.section}.{f.field}", "scope": "job" if f.section == "job" else "rank", "label": f.label,
            "unit": f.unit, "better": f.better, "base": a, "new": b, "delta": delta,
            "rel_change": delta / a if delta is not None and a else None,
            "spread": {"base": sa, "new": sb}, "reason": {"base": wa, "new": wb},
            "assessment": _assess(f, a, b)}


def figure_rows(bases: list[dict], news: list[dict], ranks_a: list[int | None],
                ranks_b: list[int | None]) -> dict:
    """``throughput`` (the compared ranks' figures, then the job's) and ``memory`` rows of the diff."""
    rows = lambda figs: [figure_row(f, bases, news, ranks_a, ranks_b) for f in figs]  # noqa: E731
    return {"throughput": rows(RANK_FIGURES) + rows(JOB_FIGURES), "memory": rows(MEMORY_FIGURES)}


def per_sample(figures: list[dict], base_walls: list[list[float]], new_walls: list[list[float]],
               se_factor: float, min_share: float) -> dict | None:
    """The step time per sample of each side, where both sides know their samples per step ``S``: every step's
    wall time over its side's ``S``, compared by the step time's own rule over every capture
    (``diff_noise.compare_runs``: the mean, the noise across steps and runs, beyond it or not). None where either
    side's ``S`` or step times are not known."""
    from .diff_noise import compare_runs

    row = next((r for r in figures if r["key"] == "throughput.samples_per_step"), None)
    if not row or not row["base"] or not row["new"] or not any(base_walls) or not any(new_walls):
        return None
    sa, sb = row["base"], row["new"]
    per = lambda runs, n: [[w / n for w in walls if w is not None] for walls in runs]  # noqa: E731
    a, b = per(base_walls, sa), per(new_walls, sb)
    c = compare_runs(a, b, sum(a[0]) / len(a[0]) if a[0] else None, se_factor, min_share)
    if c["delta_us"] is None:
        return None
    return {"samples_per_step": {"base": sa, "new": sb}, "changed": sa != sb,
            "us_per_sample": {"base": c["base"]["mean_us"], "new": c["new"]["mean_us"]},
            "rel_change": c["rel_change"], "threshold_us": c["threshold_us"], "significant": c["significant"]}
