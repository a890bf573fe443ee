"""gradscaler-with-bf16: a GradScaler runs in a run whose matrix work is bf16.

**Detects** GradScaler work inside steps (the ops ``aten::_amp_foreach_non_finite_check_and_unscale_`` and
``aten::_amp_update_scale_``, which only ``torch.amp.GradScaler`` issues) on a rank whose matrix kernels are bf16
and not fp16 (the kernels' precision as decided in docs/rules-precision.md: their names, confirmed by the ops'
``Input type`` when shapes were recorded).

**Condition**: the GradScaler ops run in at least one step, the rank has bf16 matrix time, and fp16 matrix
kernels are under 1 % of its 16-bit matrix time. Loss scaling exists for fp16, whose 5 exponent bits let small
gradients underflow; bf16 has fp32's 8 exponent bits, so scaling only adds work: an unscale pass over every
gradient, an inf/NaN check, a scale update, and a ``.item()`` in ``scaler.step`` that blocks the CPU on the GPU
once per step. Severity: *warning* when the scaler ops' CPU and GPU time reach ``gradscaler_share_warning``
(1 %) of the step, *info* below (the fix is still free).

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

from . import Needs
from .finding import Finding

ID = "gradscaler-with-bf16"
TITLE = "GradScaler used with bf16 autocast"
NEEDS = Needs(steps=("step", "wall_us"), gpu_steps=("matmul_bf16_us", "matmul_fp16_us"), tables=("amp_ops",))

FIX = (
    'scaler = torch.amp.GradScaler("cuda", enabled=(amp_dtype == torch.float16))  # off for bf16\n'
    "# or drop it: loss.backward(); optimizer.step()"
)
FP16_TOLERANCE = 0.01


def check(report, config) -> list[Finding]:
    warn = config.gradscaler_share_warning
    per_rank, ranks, steps = [], [], set()
    worst_share = 0.0
    for ra in report.ranks:
        s = ra.steps
        amp = ra.tables.get("amp_ops")
        if ra.basis != "gpu" or amp is None or not len(amp) or "matmul_bf16_us" not in s or not len(s):
            continue
        bf16 = float(s["matmul_bf16_us"].sum())
        fp16 = float(s["matmul_fp16_us"].sum())
        if bf16 <= 0 or fp16 > FP16_TOLERANCE * (bf16 + fp16):
            continue
        amp = amp[amp["step"].isin(s["step"])]
        if not len(amp):
            continue
        nsteps = len(s)
        by = amp.groupby("name")[["count", "cpu_us", "kernel_count", "gpu_us"]].sum() / nsteps
        cost = float(by["cpu_us"].sum() + by["gpu_us"].sum())
        share = cost / max(float(s["wall_us"].mean()), 1e-9)
        worst_share = max(worst_share, share)
        meta = ra.metadata or {}
        per_rank.append({
            "rank": ra.rank,
            "steps": sorted(int(x) for x in amp["step"].unique()),
            "scaler_ops_per_step": {k: {c: float(v[c]) for c in by.columns} for k, v in by.iterrows()},
            "scaler_cpu_us_per_step": float(by["cpu_us"].sum()),
            "scaler_gpu_us_per_step": float(by["gpu_us"].sum()),
            "share_of_step": share,
            "bf16_matmul_us_per_step": bf16 / nsteps,
            "fp16_matmul_us_per_step": fp16 / nsteps,
            "capture_amp_dtype": meta.get("amp_dtype"),
            "capture_grad_scaler": meta.get("grad_scaler"),
        })
        ranks.append(ra.rank)
        steps.update(per_rank[-1]["steps"])
    if not per_rank:
        return []
    r0 = max(per_rank, key=lambda r: r["share_of_step"])
    per_rank.sort(key=lambda e: e is not r0)  # the rank the title names comes first (renderers show it)
    cost = r0["scaler_cpu_us_per_step"] + r0["scaler_gpu_us_per_step"]
    return [Finding(
        id=ID,
        severity="warning" if worst_share >= warn else "info",
        title=(f"GradScaler runs every step ({cost:.0f} us CPU+GPU, rank {r0['rank']}) but the matrix work is "
               f"bf16, which needs no loss scaling"),
        ranks=sorted(ranks),
        steps=sorted(steps),
        evidence={"per_rank": per_rank, "threshold_share_warning": warn, "fp16_tolerance": FP16_TOLERANCE},
        fix=FIX,
        time_at_stake_us=cost,
    )]
