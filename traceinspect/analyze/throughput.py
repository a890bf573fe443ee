"""Throughput, model FLOPs, MFU and GPU-time per sample of a rank and of the job, from a ``RankAnalysis``.

A pure function over what the per-rank stage made (the step table's ``wall_us``, ``model_flops``, ``input_batch``,
``input_tokens``, ``forward_passes``, ``backward_passes`` and ``matmul_*_us`` columns; the ``flop_ops`` and
``flops_status`` tables; the setup's autocast dtype; the capture metadata; the device name). Every number that
cannot be had is None with the reason in ``reasons`` (field -> one line), never zero and never a guess. The
definitions are in docs/metrics.md ("Throughput, FLOPs and MFU"). Nothing here imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .peaks import Peak, device_peak

ROOFLINE_ROWS = 10  # op groups the report lists, the most time lost against the roofline first
DATA_PARALLEL = {"ddp", "fsdp1", "fsdp2", "dp", "none"}


@dataclass(frozen=True)
class RooflineRow:
    """One op group (op, input shapes, dtype) over the rank's steps: its FLOPs, the bytes its calls read and write,
    its kernels' time, and where it sits against the device's roofline."""

    op: str
    shapes: str | None
    dtype: str | None
    causal: bool
    calls: int
    flops: float | None
    bytes: float | None
    kernel_us: float | None
    intensity: float | None  # FLOPs per byte
    achieved_tflops: float | None  # flops / kernel time
    attainable_tflops: float | None  # min(peak, intensity x memory bandwidth)
    efficiency: float | None  # achieved / attainable
    lost_us: float | None  # kernel_us - flops / attainable: the time above the roofline


@dataclass(frozen=True)
class Throughput:
    """One rank's throughput (docs/metrics.md). Per step figures are means over the rank's steps."""

    batch: int | None = None  # samples per micro-batch (physical batch)
    batch_source: str | None = None
    accum_steps: int | None = None  # micro-batches per optimizer step
    accum_source: str | None = None
    samples_per_step: float | None = None  # logical batch: batch x accum_steps
    tokens_per_step: float | None = None
    step_us: float | None = None  # mean wall time of a step
    samples_per_s: float | None = None
    tokens_per_s: float | None = None
    model_flops_per_step: float | None = None
    causal_skipped_flops_per_step: float | None = None
    achieved_tflops: float | None = None
    precision: str | None = None  # the peak's precision: bf16, fp16, tf32, fp32
    precision_source: str | None = None
    peak_device: str | None = None
    peak_tflops: float | None = None
    peak_source: str | None = None
    mfu: float | None = None
    gpu_seconds_per_1k_samples: float | None = None
    gpu_seconds_per_million_tokens: float | None = None
    gpu_hours_per_million_samples: float | None = None
    reasons: dict[str, str] = field(default_factory=dict)
    roofline: list[RooflineRow] = field(default_factory=list)


def _real_steps(steps: pd.DataFrame) -> pd.DataFrame:
    if "synthetic" in steps and len(steps):
        real = steps[~steps["synthetic"].astype(bool)]
        return real if len(real) else steps
    return steps


def _mean(steps: pd.DataFrame, col: str) -> float | None:
    if col not in steps or not len(steps):
        return None
    v = steps[col].to_numpy(float)
    v = v[np.isfinite(v)]
    return float(v.mean()) if len(v) else None


def _median_int(steps: pd.DataFrame, col: str) -> int | None:
    if col not in steps or not len(steps):
        return None
    v = steps[col].to_numpy(float)
    v = v[np.isfinite(v) & (v > 0)]
    return int(np.median(v)) if len(v) else None


def _positive_int(v) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def physical_batch(metadata: dict, steps: pd.DataFrame) -> tuple[int | None, str]:
    """Samples per micro-batch: the capture metadata's ``batch_size``, its DataLoader's, its workload's; else the
    leading dimension of the model's input in the recorded shapes (``input_batch``); else None with the reason."""
    meta = metadata if isinstance(metadata, dict) else {}
    for path, where in ((("batch_size",), "capture metadata: batch_size"),
                        (("dataloader", "batch_size"), "capture metadata: dataloader.batch_size"),
                        (("workload", "batch_size"), "capture metadata: workload.batch_size")):
        v = meta
        for key in path:
            v = v.get(key) if isinstance(v, dict) else None
        if _positive_int(v):
            return v, where
    b = _median_int(steps, "input_batch")
    if b is not None:
        return b, "recorded shapes: leading dimension of the model's first input op"
    if "input_batch" not in steps or not steps["input_batch"].notna().any():
        return None, ("no batch size in the capture metadata, and record_shapes was off: no input shapes to read it "
                      "from"
                      if "model_flops" not in steps or not steps["model_flops"].notna().any() else
                      "no batch size in the capture metadata and no model input op (embedding, linear, matmul, "
                      "convolution) with shapes in the steps")
    return None, "no batch size in the capture metadata or the recorded shapes"


def accumulation(metadata: dict, steps: pd.DataFrame) -> tuple[int | None, str]:
    """Micro-batches per step: the capture metadata's ``accumulation_steps`` (or its workload's ``accum_steps``),
    else the backward passes counted in the step, else the forward passes (the model's first input op with the
    same shapes, outside backward), else None with the reason."""
    meta = metadata if isinstance(metadata, dict) else {}
    if _positive_int(meta.get("accumulation_steps")):
        return meta["accumulation_steps"], "capture metadata: accumulation_steps"
    work = meta.get("workload") if isinstance(meta.get("workload"), dict) else {}
    if _positive_int(work.get("accum_steps")):
        return work["accum_steps"], "capture metadata: workload.accum_steps"
    b = _median_int(steps, "backward_passes")
    if b is not None:
        return b, "backward passes counted in the step"
    f = _median_int(steps, "forward_passes")
    if f is not None:
        return f, "forward passes counted in the step (the model's first input op)"
    return None, "micro-batches per step not recorded, and no backward pass or model input op to count"


def run_precision(ra, ops: pd.DataFrame | None) -> tuple[str | None, str | None]:
    """The precision whose peak MFU is measured against: bf16 / fp16 where autocast ran (the setup's autocast
    dtype) or the counted FLOPs' inputs are 16-bit; otherwise TF32 where the matrix kernels ran more TF32 than
    fp32 time, else fp32."""
    setup = getattr(ra, "setup", None)
    amp = getattr(setup, "amp_dtype", None)
    if amp in ("bfloat16", "float16"):
        return ("bf16" if amp == "bfloat16" else "fp16"), f"autocast {amp} ({setup.amp_source})"
    if ops is not None and len(ops) and ops["flops"].notna().any():
        by = ops.assign(f=ops["flops"].astype(float).fillna(0.0)).groupby(ops["dtype"].fillna("unknown"))["f"].sum()
        top = str(by.idxmax()) if by.sum() > 0 else None
        if top in ("bf16", "fp16"):
            return top, "input dtype of most of the counted FLOPs"
    steps = ra.steps
    tf32 = float(np.nansum(steps["matmul_tf32_us"].to_numpy(float))) if "matmul_tf32_us" in steps else 0.0
    fp32 = float(np.nansum(steps["matmul_fp32_us"].to_numpy(float))) if "matmul_fp32_us" in steps else 0.0
    if tf32 > 0 or fp32 > 0:
        return ("tf32" if tf32 > fp32 else "fp32"), "matrix kernels (no 16-bit autocast)"
    if ops is not None and len(ops) and ops["flops"].notna().any():
        return "fp32", "fp32 inputs, no matrix kernel to tell TF32 from fp32"
    return None, None


def rank_throughput(ra) -> Throughput:
    """One rank's ``Throughput`` from its ``RankAnalysis``."""
    reasons: dict[str, str] = {}
    steps = _real_steps(ra.steps)
    ops = ra.tables.get("flop_ops")
    status = ra.tables.get("flops_status")
    gpu = getattr(ra, "basis", "cpu") == "gpu"
    step_us = _mean(steps, "wall_us")
    step_s = step_us / 1e6 if step_us and step_us > 0 else None
    if step_s is None:
        reasons["step_us"] = "no step with a wall time"

    batch, batch_src = physical_batch(ra.metadata, steps)
    accum, accum_src = accumulation(ra.metadata, steps)
    if batch is None:
        reasons["batch"] = batch_src
    if accum is None:
        reasons["accum_steps"] = accum_src
    samples = float(batch * accum) if batch and accum else None
    if samples is None:
        reasons["samples_per_step"] = reasons.get("batch") or reasons["accum_steps"]

    tokens = None
    per_micro = _mean(steps, "input_tokens")
    in_batch = _mean(steps, "input_batch")
    if per_micro and in_batch and accum:
        seq = per_micro / in_batch  # tokens per sample: the token ids' second dimension
        tokens = (batch or in_batch) * seq * accum
    else:
        no_shapes = status is not None and len(status) and not bool(status["shapes_recorded"].iloc[0])
        reasons["tokens_per_step"] = (
            status["reason"].iloc[0] if no_shapes else
            "the model's input is not integer token ids of shape [batch, seq] (no aten::embedding of such indices "
            "first in the step)" if accum else reasons.get("accum_steps", ""))

    flops = _mean(steps, "model_flops")
    if flops is None:
        why = None
        if status is not None and len(status):
            why = status["reason"].iloc[0]
        reasons["model_flops_per_step"] = why or "no FLOPs counted"
    elif flops <= 0:
        reasons["model_flops_per_step"] = "no matrix multiply, convolution or attention op with shapes in the steps"
        flops = None
    causal = _mean(steps, "causal_skipped_flops") if flops is not None else None

    def per_s(x, name):
        if x is None or step_s is None:
            reasons.setdefault(name, reasons.get("step_us") or reasons.get("samples_per_step", ""))
            return None
        return x / step_s

    samples_per_s = per_s(samples, "samples_per_s")
    tokens_per_s = per_s(tokens, "tokens_per_s") if tokens is not None else None
    if tokens is None:
        reasons["tokens_per_s"] = reasons.get("tokens_per_step", "")
    achieved = flops / step_s / 1e12 if flops is not None and step_s else None
    if achieved is None:
        reasons["achieved_tflops"] = reasons.get("model_flops_per_step") or reasons.get("step_us", "")

    precision, precision_src = run_precision(ra, ops)
    peak = device_peak(ra.device)
    peak_tflops = peak.tflops(precision) if peak is not None and precision else None
    if peak is None:
        reasons["peak_tflops"] = (f"device {ra.device!r} is not in the peak table" if ra.device else
                                  "the trace names no GPU device")
    elif precision is None:
        reasons["peak_tflops"] = "the precision the matrix work ran in is not known"
    elif peak_tflops is None:
        reasons["peak_tflops"] = f"{peak.device} has no dense {precision} peak in its datasheet"
    mfu = achieved / peak_tflops if achieved is not None and peak_tflops else None
    if mfu is None:
        reasons["mfu"] = reasons.get("achieved_tflops") or reasons.get("peak_tflops", "")

    gpu_1k = gpu_tok = gpu_h = None
    if not gpu:
        for k in ("gpu_seconds_per_1k_samples", "gpu_seconds_per_million_tokens", "gpu_hours_per_million_samples"):
            reasons[k] = "no GPU activity in the trace"
    else:
        if samples and step_s:
            gpu_1k = step_s / samples * 1e3
            gpu_h = step_s / 3600 / samples * 1e6
        else:
            reasons["gpu_seconds_per_1k_samples"] = reasons["gpu_hours_per_million_samples"] = \
                reasons.get("samples_per_step") or reasons.get("step_us", "")
        if tokens and step_s:
            gpu_tok = step_s / tokens * 1e6
        else:
            reasons["gpu_seconds_per_million_tokens"] = reasons.get("tokens_per_step") or reasons.get("step_us", "")

    return Throughput(
        batch=batch, batch_source=batch_src if batch else None, accum_steps=accum,
        accum_source=accum_src if accum else None, samples_per_step=samples, tokens_per_step=tokens,
        step_us=step_us, samples_per_s=samples_per_s, tokens_per_s=tokens_per_s, model_flops_per_step=flops,
        causal_skipped_flops_per_step=causal, achieved_tflops=achieved, precision=precision,
        precision_source=precision_src, peak_device=peak.device if peak else None, peak_tflops=peak_tflops,
        peak_source=peak.source if peak else None, mfu=mfu, gpu_seconds_per_1k_samples=gpu_1k,
        gpu_seconds_per_million_tokens=gpu_tok, gpu_hours_per_million_samples=gpu_h,
        reasons={k: v for k, v in reasons.items() if v}, roofline=roofline(ops, peak, precision))


def _num(v) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if np.isfinite(f) else None


def roofline(ops: pd.DataFrame | None, peak: Peak | None, precision: str | None,
             limit: int = ROOFLINE_ROWS) -> list[RooflineRow]:
    """The op groups whose kernels ran on the GPU, against the roofline min(peak, intensity x bandwidth) of the
    group's own precision (16-bit inputs: their peak; fp32 inputs: the run's TF32 or fp32 peak): the most time lost
    first (groups without a peak: the longest first)."""
    if ops is None or not len(ops) or "kernel_us" not in ops:
        return []
    rows = []
    for r in ops.to_dict("records"):
        kus, fl, by = _num(r.get("kernel_us")), _num(r.get("flops")), _num(r.get("bytes"))
        if not kus or kus <= 0 or fl is None:
            continue
        intensity = fl / by if by else None
        achieved = fl / kus / 1e6
        prec = r.get("dtype") if r.get("dtype") in ("bf16", "fp16") else (precision if precision in ("tf32", "fp32")
                                                                          else "fp32")
        top = peak.tflops(prec) if peak is not None else None
        attainable = None
        if top is not None:
            attainable = min(top, intensity * peak.memory_tbps) if intensity is not None else top
        eff = achieved / attainable if attainable else None
        lost = kus - fl / (attainable * 1e6) if attainable else None
        rows.append(RooflineRow(op=r["op"], shapes=r.get("shapes"), dtype=r.get("dtype"), causal=bool(r.get("causal")),
                                calls=int(r["calls"]), flops=fl, bytes=by, kernel_us=kus, intensity=intensity,
                                achieved_tflops=achieved, attainable_tflops=attainable, efficiency=eff,
                                lost_us=max(lost, 0.0) if lost is not None else None))
    rows.sort(key=lambda x: -(x.lost_us if x.lost_us is not None else x.kernel_us or 0.0))
    return rows[:limit]


# --------------------------------------------------------------------------------------------------------------
# The job


@dataclass(frozen=True)
class JobThroughput:
    """The job: ranks that each train on their own samples (data parallel) add up; GPU-hours count every rank."""

    world_size: int | None
    ranks: int
    samples_per_s: float | None = None
    tokens_per_s: float | None = None
    model_flops_per_step: float | None = None  # summed over the world (mean rank x world size)
    achieved_tflops: float | None = None
    mfu: float | None = None  # mean over the ranks that have one
    gpu_seconds_per_1k_samples: float | None = None
    gpu_seconds_per_million_tokens: float | None = None
    gpu_hours_per_million_samples: float | None = None
    reasons: dict[str, str] = field(default_factory=dict)


def job_throughput(ranks: list[Throughput], world_size: int | None, kinds: tuple[str, ...] = ()) -> JobThroughput:
    """The job's figures from its ranks': each rank's mean x the world size (the ranks the trace lacks counted as
    their mean), for samples and tokens only where every rank trains on its own samples (data parallel or a single
    rank); GPU-time per sample = world size x step time / the job's samples per step."""
    world = world_size or len(ranks) or None
    reasons: dict[str, str] = {}

    def mean(name: str) -> float | None:
        vals = [getattr(r, name) for r in ranks if getattr(r, name) is not None]
        if not vals:
            reasons[name] = next((r.reasons.get(name) for r in ranks if r.reasons.get(name)), "not known on any rank")
            return None
        return float(np.mean(vals))

    data_parallel = set(kinds) <= DATA_PARALLEL
    sps, tps = mean("samples_per_s"), mean("tokens_per_s")
    if not data_parallel:
        why = (f"the ranks share their samples ({'+'.join(kinds)}): the job's samples are not the sum of the "
               "ranks'")
        for k in ("samples_per_s", "tokens_per_s", "gpu_seconds_per_1k_samples", "gpu_seconds_per_million_tokens",
                  "gpu_hours_per_million_samples"):
            reasons[k] = why
        sps = tps = None
    flops, achieved, mfu = mean("model_flops_per_step"), mean("achieved_tflops"), mean("mfu")
    g1k, gtok, gh = (mean(k) if data_parallel else None for k in
                     ("gpu_seconds_per_1k_samples", "gpu_seconds_per_million_tokens", "gpu_hours_per_million_samples"))
    scale = world or 1
    return JobThroughput(
        world_size=world_size, ranks=len(ranks),
        samples_per_s=sps * scale if sps is not None else None, tokens_per_s=tps * scale if tps is not None else None,
        model_flops_per_step=flops * scale if flops is not None else None,
        achieved_tflops=achieved * scale if achieved is not None else None, mfu=mfu,
        # world x step time / (world x samples per rank step): the rank's figure, every GPU counted
        gpu_seconds_per_1k_samples=g1k, gpu_seconds_per_million_tokens=gtok, gpu_hours_per_million_samples=gh,
        reasons=reasons)
