"""The batch x accumulation trade-off of a rank: for its logical batch, each (physical batch, accumulation steps)
pair that fits in memory, with its predicted time per logical batch, peak memory, all-reduces, samples per second
and GPU-hours per million samples (docs/metrics.md, "The trade-off table").

The model, from one trace (means over the rank's steps; every term measured there except where said):

* GPU basis. ``g`` = the step's GPU busy time less its optimizer kernels, per micro-batch: the forward and backward
  work, taken to grow in proportion to the batch (modelled: GEMMs, convolutions and attention scale with the rows
  they are given; the few kernels on weight-sized tensors, such as gradient accumulation, do not, and are counted
  as if they did). ``h`` = the CPU's issue time less the optimizer's, per micro-batch: launching a micro-batch's
  kernels costs the same whatever its batch (measured). A micro-batch takes ``max(g x b / b0, h)``: the GPU's work
  or the CPU's launches, whichever is longer.
* CPU basis (no GPU events): the training thread's forward and backward per micro-batch grow with the batch; the
  rest stays.
* Per step, once: the optimizer (the longer of its CPU and GPU time, measured), the DataLoader wait (the same
  samples per logical batch), and the exposed communication of one all-reduce round (measured per round) times the
  rounds: one with ``no_sync`` accumulation (or where the trace shows fewer rounds than micro-batches), else one
  per micro-batch.
* What the trace's step holds beyond these (Python between micro-batches, the loss, gaps) is a cost per
  micro-batch, so the model gives the measured step exactly at the measured batch.

Rows are only those the memory outlook does not predict to fail (analyze/outlook.py): up to the largest batch it
predicts to fit; where it cannot tell (no memory events, no capacity) every row is listed with ``fits`` null.
Physical batches under an eighth of today's are left out. The best row has the most samples per second among
those known to fit (a larger batch whose fit is not known is listed, never marked best).

bf16 rows (``precision`` "bf16"), only where the report's precision finding projects the switch for the rank
(``bf16``: the GPU time per step at today's batch that bf16 autocast saves, and the CPU time per step its casts
add, both the no-mixed-precision rule's terms): the same model with ``g`` less the saving per micro-batch (scaled
with the batch like the rest of ``g``) and ``h`` plus the casts per micro-batch. Their memory is not projected
(``peak_bytes`` and ``fits`` null), they are listed for the batches the recorded precision's rows list, and never
marked best: what fits in bf16 is not in an fp32 trace.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from .outlook import divisors, predicted_peak


# Physical batches below today's / this are not listed: each micro-batch's fixed cost only grows there.
MIN_BATCH_SHARE = 8


@dataclass(frozen=True)
class Option:
    batch: int
    accum_steps: int
    step_us: float  # predicted time per logical batch (one optimizer step)
    peak_bytes: int | None  # predicted peak allocated memory (None without memory events)
    fits: bool | None
    allreduces: int  # all-reduce rounds per logical batch
    samples_per_s: float
    gpu_hours_per_million_samples: float | None  # per GPU: x world size for the job, whose samples scale alike
    current: bool
    best: bool = False
    precision: str = "recorded"  # "recorded": the precision the trace ran; "bf16": projected with bf16 autocast


@dataclass(frozen=True)
class Tradeoff:
    logical_batch: int
    basis: str
    terms: dict  # the model's measured terms (us): per micro-batch scaling/fixed, per step optimizer, data, comm
    options: list[Option]


def _mean(s: pd.DataFrame, col: str) -> float:
    return float(np.nanmean(s[col].to_numpy(float))) if col in s and len(s) and s[col].notna().any() else 0.0


def _option(b: int, k: int, t: float, logical: int, allreduces: int, **kw) -> Option:
    """The row of batch ``b`` x ``k`` steps taking ``t`` us per logical batch, with its rates."""
    return Option(batch=b, accum_steps=k, step_us=t, allreduces=allreduces,
                  samples_per_s=logical / (t / 1e6) if t > 0 else 0.0,
                  gpu_hours_per_million_samples=(t / 1e6) / logical * 1e6 / 3600 if t > 0 else None, **kw)


def tradeoff(ra, thr, outlook, bf16: tuple[float, float] | None = None) -> Tradeoff | None:
    """The rank's trade-off table, or None where the batch or the micro-batches per step are not known.
    ``bf16``: (GPU us saved, CPU us added) per step at today's batch by bf16 autocast, where projected."""
    b0, k0 = thr.batch, thr.accum_steps
    steps = ra.steps
    if "synthetic" in steps and steps["synthetic"].astype(bool).any() and (~steps["synthetic"].astype(bool)).any():
        steps = steps[~steps["synthetic"].astype(bool)]
    if not b0 or not k0 or not len(steps):
        return None
    wall = _mean(steps, "wall_us")
    opt = ra.tables.get("optimizer")
    opt = opt[opt["step"].isin(steps["step"])] if opt is not None and len(opt) else None
    n = len(steps)
    opt_gpu = float(opt["gpu_us"].sum()) / n if opt is not None else 0.0
    opt_cpu = float(opt["cpu_us"].sum()) / n if opt is not None else 0.0
    data = _mean(steps, "idle_dataloader_us") if ra.basis == "gpu" else _mean(steps, "cpu_dataloader")
    rounds0 = _mean(steps, "allreduce_rounds") or _mean(steps, "backward_passes")
    md = ra.metadata if isinstance(ra.metadata, dict) else {}
    no_sync = bool(md.get("no_sync")) or (k0 > 1 and 0 < rounds0 < k0)
    if ra.basis == "gpu":
        comm = _mean(steps, "bd_comm_exposed")
        g = max(_mean(steps, "gpu_busy_us") - opt_gpu, 0.0) / k0
        h = max(_mean(steps, "cpu_issue_us") - opt_cpu, 0.0) / k0
        fixed_step = max(opt_gpu, opt_cpu)
    else:
        comm = _mean(steps, "cpu_comm")
        g = (_mean(steps, "cpu_forward") + _mean(steps, "cpu_backward")) / k0
        h = 0.0
        fixed_step = _mean(steps, "cpu_optimizer")
    per_round = comm / rounds0 if rounds0 > 0 else 0.0

    def rounds(k: int) -> int:
        return (1 if no_sync else k) if rounds0 > 0 else 0

    def model(b: int, k: int, resid: float, g: float = g, h: float = h) -> float:
        return k * (max(g * b / b0, h) + resid) + fixed_step + data + per_round * rounds(k)

    resid = (wall - model(b0, k0, 0.0)) / k0
    logical = b0 * k0
    limit = outlook.max_batch if outlook is not None and outlook.max_batch is not None else b0 * k0
    world = ra.world_size or 1
    options = []
    for b in divisors(logical):
        if b > max(limit, b0) or b * MIN_BATCH_SHARE < b0:
            continue
        k = logical // b
        t = model(b, k, resid)
        peak = predicted_peak(outlook.envelope, outlook.batch, b) if outlook is not None and outlook.batch else None
        fits = (bool(peak <= outlook.budget) if outlook is not None and outlook.budget is not None
                and peak is not None else None)
        if fits is False and b != b0:
            continue
        options.append(_option(b, k, t, logical, rounds(k), current=b == b0, fits=fits,
                               peak_bytes=int(round(peak)) if peak is not None and np.isfinite(peak) else None))
    if options:
        known = [o for o in options if o.fits is True or (o.fits is None and o.batch <= b0)]
        best = max(known, key=lambda o: o.samples_per_s, default=None)
        options = [Option(**{**o.__dict__, "best": o is best}) for o in options]
    if bf16 is not None and ra.basis == "gpu":
        g16 = max(g - bf16[0] / k0, 0.0)
        h16 = h + bf16[1] / k0
        for o in list(options):
            t = model(o.batch, o.accum_steps, resid, g16, h16)
            options.append(_option(o.batch, o.accum_steps, t, logical, o.allreduces, current=False, fits=None,
                                   peak_bytes=None, precision="bf16"))
    terms = {"gpu_per_micro_us": g if ra.basis == "gpu" else None, "cpu_issue_per_micro_us": h if ra.basis == "gpu"
             else None, "compute_per_micro_us": g, "other_per_micro_us": resid, "optimizer_us": fixed_step,
             "dataloader_us": data, "comm_per_round_us": per_round, "rounds_measured": rounds0,
             "no_sync": no_sync, "world_size": world}
    return Tradeoff(logical_batch=logical, basis=ra.basis, terms=terms, options=options)
