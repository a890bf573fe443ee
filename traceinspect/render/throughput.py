"""The throughput section's words and numbers, for every renderer: per rank and for the job, samples and tokens per
second, model FLOPs per step, achieved TFLOP/s, MFU and GPU time per sample, each unknown one with its reason; and
the roofline table (the op groups that lose the most kernel time against the device's roofline). From the typed
report only (``ranks[].throughput``, ``throughput``): formatting, no computing (docs/metrics.md).
"""

from __future__ import annotations

from ..report.doc import JobThroughputDoc, RankDoc, ReportDoc, ThroughputDoc
from . import format as fmt
from .document import given

ROOFLINE_SHOWN = 5
ROOFLINE_HEAD = ["op", "input shapes", "dtype", "calls", "GFLOP", "kernel ms", "FLOP/B", "TFLOP/s", "roof TFLOP/s",
                 "of roof", "lost ms"]


def _tera(flops) -> str:
    """FLOPs in the unit that keeps the number readable: TFLOP, GFLOP or MFLOP."""
    if flops is None:
        return fmt.DASH
    scale, unit = next(((s, u) for s, u in ((1e12, "TFLOP"), (1e9, "GFLOP")) if abs(flops) >= s), (1e6, "MFLOP"))
    return f"{fmt.number(flops / scale)} {unit}"


def _rate(tflops) -> str:
    """TFLOP/s in the unit that keeps the number readable (TFLOP/s, GFLOP/s, MFLOP/s)."""
    return fmt.DASH if tflops is None else _tera(tflops * 1e12) + "/s"


def _gpu_time(hours) -> str:
    """GPU time in hours, minutes or seconds, whichever keeps the number at 1 or more."""
    if hours is None:
        return fmt.DASH
    if hours >= 1:
        return f"{fmt.number(hours)} GPU-hours"
    if hours * 60 >= 1:
        return f"{fmt.number(hours * 60)} GPU-minutes"
    return f"{fmt.number(hours * 3600)} GPU-seconds"


Figures = ThroughputDoc | JobThroughputDoc


def _value(t: Figures, v, field: str, text: str) -> str:
    """``text`` (the formatted value ``v``), or ``-`` with the reason the figure ``field`` is not known."""
    if v is not None:
        return text
    why = t.reasons.get(field)
    return f"- ({why})" if why else fmt.DASH


def _figures(t: Figures, peak: str = "") -> list[str]:
    """The figures of a rank or of the job; ``peak``: the device peak the MFU is a share of."""
    return [
        "samples/s " + _value(t, t.samples_per_s, "samples_per_s", fmt.number(t.samples_per_s, 4)),
        "tokens/s " + _value(t, t.tokens_per_s, "tokens_per_s", fmt.number(t.tokens_per_s, 4)),
        "model FLOPs per step " + _value(t, t.model_flops_per_step, "model_flops_per_step",
                                         _tera(t.model_flops_per_step)),
        "achieved " + _value(t, t.achieved_tflops, "achieved_tflops", _rate(t.achieved_tflops)),
        "MFU " + _value(t, t.mfu, "mfu", f"{fmt.pct(t.mfu, 2)}{peak}"),
        "GPU time per million samples " + _value(t, t.gpu_hours_per_million_samples, "gpu_hours_per_million_samples",
                                                 _gpu_time(t.gpu_hours_per_million_samples)),
    ]


def _none_known(t: Figures) -> bool:
    return all(v is None for v in (t.samples_per_s, t.tokens_per_s, t.model_flops_per_step, t.achieved_tflops, t.mfu,
                                   t.gpu_hours_per_million_samples))


def rank_lines(r: RankDoc) -> list[str]:
    """A rank's figures, one per line, with where the batch came from."""
    t = given(r.throughput)
    if t is None:
        return []
    if _none_known(t):
        samples, flops = (t.reasons.get(field) for field in ("samples_per_s", "model_flops_per_step"))
        return [f"no figure known: samples {samples or fmt.DASH}; FLOPs {flops or fmt.DASH}"]
    peak = ""
    if t.peak_tflops is not None:
        peak = f" of {t.peak_device} {t.precision} {fmt.number(t.peak_tflops, 4)} TFLOP/s"
    lines = _figures(t, peak)
    if t.samples_per_step is not None:
        lines.append(f"samples per step {fmt.number(t.samples_per_step)} = batch {fmt.number(t.batch)} "
                     f"({t.batch_source}) x {fmt.number(t.accum_steps)} micro-batches ({t.accum_source})")
    if t.causal_skipped_flops_per_step:
        lines.append(f"of the model FLOPs, {_tera(t.causal_skipped_flops_per_step)} per step are the masked half "
                     "of causal attention (counted, as torch's flop counter counts them)")
    return lines


def job_lines(d: ReportDoc) -> list[str]:
    """The job's figures (several ranks or a world size above 1 only)."""
    j = given(d.throughput)
    if j is None or (j.world_size or 1) <= 1 and j.ranks <= 1:
        return []
    if _none_known(j):
        return []  # the ranks' lines say why
    return [f"job (world size {j.world_size or '-'}): " + "; ".join(_figures(j))]


def roofline_rows(r: RankDoc, limit: int = ROOFLINE_SHOWN) -> list[list[str]]:
    """The rank's roofline table rows (the most time lost first), as text cells."""
    t = given(r.throughput)
    rows = []
    for x in (t.roofline if t is not None else [])[:limit]:
        rows.append([x.op, x.shapes or fmt.DASH, x.dtype or fmt.DASH, fmt.number(x.calls),
                     fmt.number(x.flops / 1e9) if x.flops is not None else fmt.DASH,
                     fmt.ms_num(x.kernel_us), fmt.number(x.intensity), fmt.number(x.achieved_tflops),
                     fmt.number(x.attainable_tflops), fmt.pct(x.efficiency), fmt.ms_num(x.lost_us)])
    return rows


def has_any(d: ReportDoc) -> bool:
    return any(given(r.throughput) is not None for r in d.ranks)
