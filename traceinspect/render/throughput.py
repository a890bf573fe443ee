"""The throughput section's words and numbers, for every renderer: per rank and for the job, samples and tokens per
second, model FLOPs per step, achieved TFLOP/s, MFU and GPU time per sample, each unknown one with its reason; and
the roofline table (the op groups that lose the most kernel time against the device's roofline). From the report
dict only (``ranks[].throughput``, ``throughput``): formatting, no computing (docs/metrics.md).
"""

from __future__ import annotations

from . import format as fmt

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


def _value(t: dict, key: str, text: str) -> str:
    """The formatted value, or ``-`` with the reason it is not known."""
    if t.get(key) is not None:
        return text
    why = (t.get("reasons") or {}).get(key)
    return f"- ({why})" if why else fmt.DASH


def _figures(t: dict) -> list[str]:
    mfu = t.get("mfu")
    peak = ""
    if t.get("peak_tflops") is not None:
        peak = f" of {t.get('peak_device')} {t.get('precision')} {fmt.number(t['peak_tflops'], 4)} TFLOP/s"
    return [
        "samples/s " + _value(t, "samples_per_s", fmt.number(t.get("samples_per_s"), 4)),
        "tokens/s " + _value(t, "tokens_per_s", fmt.number(t.get("tokens_per_s"), 4)),
        "model FLOPs per step " + _value(t, "model_flops_per_step", _tera(t.get("model_flops_per_step"))),
        "achieved " + _value(t, "achieved_tflops", _rate(t.get("achieved_tflops"))),
        "MFU " + _value(t, "mfu", f"{fmt.pct(mfu, 2)}{peak}"),
        "GPU time per million samples " + _value(t, "gpu_hours_per_million_samples",
                                                 _gpu_time(t.get("gpu_hours_per_million_samples"))),
    ]


def rank_lines(r: dict) -> list[str]:
    """A rank's figures, one per line, with where the batch came from."""
    t = r.get("throughput")
    if not t:
        return []
    main = ("samples_per_s", "tokens_per_s", "model_flops_per_step", "achieved_tflops", "mfu",
            "gpu_hours_per_million_samples")
    if all(t.get(k) is None for k in main):
        why = t.get("reasons") or {}
        return ["no figure known: samples " + (why.get("samples_per_s") or fmt.DASH) + "; FLOPs "
                + (why.get("model_flops_per_step") or fmt.DASH)]
    lines = _figures(t)
    if t.get("samples_per_step") is not None:
        lines.append(f"samples per step {fmt.number(t['samples_per_step'])} = batch {fmt.number(t.get('batch'))} "
                     f"({t.get('batch_source')}) x {fmt.number(t.get('accum_steps'))} micro-batches "
                     f"({t.get('accum_source')})")
    if t.get("causal_skipped_flops_per_step"):
        lines.append(f"of the model FLOPs, {_tera(t['causal_skipped_flops_per_step'])} per step are the masked half "
                     "of causal attention (counted, as torch's flop counter counts them)")
    return lines


def job_lines(d: dict) -> list[str]:
    """The job's figures (several ranks or a world size above 1 only)."""
    j = d.get("throughput")
    if not j or (j.get("world_size") or 1) <= 1 and j.get("ranks", 1) <= 1:
        return []
    if all(j.get(k) is None for k in ("samples_per_s", "tokens_per_s", "model_flops_per_step", "achieved_tflops",
                                      "mfu", "gpu_hours_per_million_samples")):
        return []  # the ranks' lines say why
    return [f"job (world size {j.get('world_size') or '-'}): " + "; ".join(_figures(j))]


def roofline_rows(r: dict, limit: int = ROOFLINE_SHOWN) -> list[list[str]]:
    """The rank's roofline table rows (the most time lost first), as text cells."""
    t = r.get("throughput") or {}
    rows = []
    for x in (t.get("roofline") or [])[:limit]:
        rows.append([x["op"], x.get("shapes") or fmt.DASH, x.get("dtype") or fmt.DASH, fmt.number(x.get("calls")),
                     fmt.number(x["flops"] / 1e9) if x.get("flops") is not None else fmt.DASH,
                     fmt.ms_num(x.get("kernel_us")), fmt.number(x.get("intensity")),
                     fmt.number(x.get("achieved_tflops")), fmt.number(x.get("attainable_tflops")),
                     fmt.pct(x.get("efficiency")), fmt.ms_num(x.get("lost_us"))])
    return rows


def has_any(d: dict) -> bool:
    return any(r.get("throughput") for r in d.get("ranks") or [])
