"""gradscaler-with-bf16: a GradScaler runs in a run whose matrix work is bf16.

**Detects** GradScaler work inside steps (the ops ``aten::_amp_foreach_non_finite_check_and_unscale_`` and
``aten::_amp_update_scale_``, which only ``torch.amp.GradScaler`` issues) on a rank whose matrix kernels are bf16
and not fp16 (the kernels' precision as decided in docs/rules-precision.md: their names, confirmed by the ops'
``Input type`` when shapes were recorded).

**Condition**: the GradScaler ops run in at least one step, the rank has bf16 matrix time, and fp16 matrix
kernels are under 1 % of its 16-bit matrix time. Loss scaling exists for fp16, whose 5 exponent bits let small
gradients underflow; bf16 has fp32's 8 exponent bits, so scaling only adds work: an unscale pass over every
gradient, an inf/NaN check, a scale update, and a ``.item()`` in ``scaler.step`` that blocks the CPU on the GPU
once per step. Its claim is the scaler ops' CPU and GPU time per step (the fix is free whatever it claims).

**Evidence**: per rank, the scaler ops per step (count, CPU time, kernels they launched and their GPU time), the
bf16 and fp16 matrix time, and the capture's AMP settings when traceinspect recorded them.

**Fix**: drop the scaler for bf16::

    with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
        loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()

or keep the code path and disable it: ``scaler = torch.amp.GradScaler("cuda", enabled=(amp_dtype == torch.float16))``.
"""

from __future__ import annotations

import msgspec

from ._rule import Claim, Fixed, Needs, PerRank, RankHit, Rule
from ._util import by_row
from .takes import Estimate
from .units import Count, Share, Us

FIX = (
    'scaler = torch.amp.GradScaler("cuda", enabled=(amp_dtype == torch.float16))  # off for bf16\n'
    "# or drop it: loss.backward(); optimizer.step()"
)
FP16_TOLERANCE = 0.01


class ScalerOp(msgspec.Struct, kw_only=True):
    """One of GradScaler's ops, per step."""

    count: Count
    cpu_us: Us
    kernel_count: Count
    gpu_us: Us


class RankEvidence(RankHit, kw_only=True):
    scaler_ops_per_step: dict[str, ScalerOp]  # by op
    scaler_cpu_us_per_step: Us
    scaler_gpu_us_per_step: Us
    share_of_step: Share
    bf16_matmul_us_per_step: Us
    fp16_matmul_us_per_step: Us
    capture_amp_dtype: str | None  # what the capture recorded
    capture_grad_scaler: bool | None


class Evidence(msgspec.Struct, kw_only=True):
    per_rank: list[RankEvidence]
    fp16_tolerance: Share  # of the 16-bit matrix time: fp16 up to this share still reads as a bf16 run


def _rank(ra, config, report):
    s = ra.steps
    amp = ra.tables.get("amp_ops")
    if ra.basis != "gpu" or amp is None or not len(amp) or "matmul_bf16_us" not in s or not len(s):
        return None
    bf16 = float(s["matmul_bf16_us"].sum())
    fp16 = float(s["matmul_fp16_us"].sum())
    if bf16 <= 0 or fp16 > FP16_TOLERANCE * (bf16 + fp16):
        return None
    amp = amp[amp["step"].isin(s["step"])]
    if not len(amp):
        return None
    nsteps = len(s)
    by = amp.groupby("name")[["count", "cpu_us", "kernel_count", "gpu_us"]].sum() / nsteps
    cost = float(by["cpu_us"].sum() + by["gpu_us"].sum())
    meta = ra.metadata or {}
    return RankEvidence(
        rank=ra.rank,
        steps=sorted(int(x) for x in amp["step"].unique()),
        scaler_ops_per_step={op: ScalerOp(**row) for op, row in by_row(by).items()},
        scaler_cpu_us_per_step=float(by["cpu_us"].sum()),
        scaler_gpu_us_per_step=float(by["gpu_us"].sum()),
        share_of_step=cost / max(float(s["wall_us"].mean()), 1e-9),
        bf16_matmul_us_per_step=bf16 / nsteps,
        fp16_matmul_us_per_step=fp16 / nsteps,
        capture_amp_dtype=meta.get("amp_dtype"),
        capture_grad_scaler=meta.get("grad_scaler"),
    )


def _summary(hits, w, report, config):
    e = w.ev
    cost = e.scaler_cpu_us_per_step + e.scaler_gpu_us_per_step
    title = (f"GradScaler runs every step ({cost:.0f} us CPU+GPU, rank {e.rank}) but the matrix work is bf16, which "
             f"needs no loss scaling")
    return Evidence(per_rank=[h.ev for h in hits], fp16_tolerance=FP16_TOLERANCE), title, cost


RULE = Rule(
    id="gradscaler-with-bf16",
    title="GradScaler used with bf16 autocast",
    needs=Needs(steps=("step", "wall_us"), gpu_steps=("matmul_bf16_us", "matmul_fp16_us"), tables=("amp_ops",)),
    claim=Claim(order=100, gpu=Estimate(("launch", "compute")), cpu=Estimate(("optimizer", "other"))),
    label="GradScaler",
    thresholds=(),
    evidence=Evidence, fix=Fixed(FIX), check=PerRank(_rank, _summary, worst=lambda e: e.share_of_step),
)
