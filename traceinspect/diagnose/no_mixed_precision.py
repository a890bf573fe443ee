"""no-mixed-precision: matrix work runs in plain fp32 on a GPU with bf16/TF32 tensor cores.

**Detects** GEMM, convolution and attention kernels that compute in fp32 on CUDA cores (``sgemm``,
``simt_sgemm``, ``xmma_gemm_f32f32_f32f32_..._ffma``, ``scudnn``, winograd / FFT convolutions,
``fmha_cutlass*_f32``), on a device of compute capability 8.0 or newer (A100, H100/H200, L4, RTX 30xx+), where
bf16 and TF32 tensor cores exist. TF32 kernels (``tensorop_s1688gemm``, ``xmma_gemm_f32f32_tf32f32``,
``nvjet_sss_tf32``) and 16-bit kernels do not count: they already use tensor cores. How each kernel's precision
is decided (its name first, the launching op's ``Input type`` when shapes were recorded): docs/rules-precision.md.

**Condition**: in at least half of a rank's steps, fp32 matrix kernels take at least ``fp32_matmul_share_warning``
(20 %) of the step's compute-kernel time. Why 20 %: a
bf16 tensor-core GEMM runs 8-16x faster than an FFMA one on these parts (A100: 312 vs 19.5 dense TFLOP/s;
H100/H200 SXM: 989 vs 67), so at 20 % of kernel time the fix returns well over a sixth of the GPU's compute
time; below that the fp32 work is usually deliberate (a loss, a norm, a tiny head) and not worth a precision
review. The rule never fires below compute capability 8.0 (V100 has fp16 tensor cores but no bf16/TF32) nor on
CPU-only traces.

**Evidence**: per rank, fp32 / TF32 / 16-bit matrix time per step and the fp32 share, the top fp32 kernels with
the op that launched them, the device and its compute capability. **Time at stake**: 75 % of the fp32 matrix
time per step (a conservative 4x speed-up): GPU time; the step shortens only where the GPU is the bottleneck,
less the CPU work autocast's casts add (``autocast_casts_per_gemm`` cast kernels per fp32 GEMM kernel, each at the
step's CPU time per launch), and nothing of a step the DataLoader paced until the loader keeps up
(docs/findings.md); no step shorter than the DataLoader can feed (its measured bound, or for pinning workers
whose pinning thread the capture did not time, the estimate of bounds.py). Where an untimed DataLoader feeds the loop
the saving assumes it can feed a faster step, which no trace shows: the finding says so (``saving_holds_if``) and
is at most a warning.

**Fix**::

    with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
        loss = loss_fn(model(x), y)
    loss.backward()            # no GradScaler needed with bf16

Where fp32 must stay (numerics), let it run on TF32 tensor cores::

    torch.backends.cuda.matmul.allow_tf32 = True    # or torch.set_float32_matmul_precision("high")
    torch.backends.cudnn.allow_tf32 = True
"""

from __future__ import annotations

import msgspec
import numpy as np

from ._rule import Claim, Needs, PerRank, RankHit, Rule
from ._util import loader_period_us, mean, shown, step_ids
from .bounds import autocast_cpu_us
from .takes import Column
from .units import Share, Us

FIX = (
    'with torch.autocast(device_type="cuda", dtype=torch.bfloat16):\n'
    "    loss = loss_fn(model(x), y)\n"
    "# where fp32 must stay: torch.backends.cuda.matmul.allow_tf32 = True; torch.backends.cudnn.allow_tf32 = True\n"
    "# then profile again: with faster matmuls the data pipeline, which this trace cannot show, may set the step"
)
FIX_NO_LOADER = FIX.rsplit("\n", 1)[0]  # no DataLoader in the loop, or one the capture timed: no caveat
# What the time at stake assumes where the capture did not time the loader: that it keeps up with the faster step.
# A run that waits for data in some steps shows it does not (those steps claim nothing: accounting), and a loop fed
# by pinning workers cannot count a step shorter than its pinned bytes take the pinning thread (accounting's
# estimate). Beyond those, a loader that never made a GPU-bound step wait cannot be told from one with room to
# spare: its workers and the pinning thread are not profiled. A bf16 twin of such a run became loader-bound at
# the same step time (docs/findings.md, big_fp32), so the finding says what it assumes and is at most a warning
# there. Where the capture timed the loader (loader_timing, process_threads) its bound is applied instead.
HOLDS_IF = ("the DataLoader keeps up with a faster step: how fast it could feed one is not in the trace (its "
            "workers are not profiled, and the batches also pass through the training process)")
SAVING = 0.75  # share of the fp32 matrix time a switch to bf16 saves, conservatively (4x)


class Fp32Kernel(msgspec.Struct, kw_only=True):
    """One of the fp32 matrix kernels that take the most time (analyze/precision.py's ``matmul_kernels``)."""

    kernel: str
    family: str
    op: str | None  # the op that launched it, where known
    source: str  # how its precision was decided
    us_per_step: Us


class RankEvidence(RankHit, kw_only=True):
    device: str | None
    compute_capability: list[int]
    fp32_matmul_us_per_step: Us
    tf32_matmul_us_per_step: Us
    matmul_16bit_us_per_step: Us
    matmul_us_per_step: Us
    compute_kernel_us_per_step: Us
    fp32_share_of_kernel_time: Share
    top_fp32_kernels: list[Fp32Kernel]
    loader_period_us: Us | msgspec.UnsetType = msgspec.UNSET  # where the capture timed the loader


class Evidence(msgspec.Struct, kw_only=True):
    per_rank: list[RankEvidence]
    threshold_share_warning: Share
    assumed_saving: Share  # of the fp32 matrix time
    saving_holds_if: str | None  # what the saving assumes that no trace shows (thin evidence)


def fix(ev: Evidence, setup=None) -> str:
    """With the caveat to profile again where an untimed DataLoader feeds the loop."""
    return FIX if ev.saving_holds_if else FIX_NO_LOADER


def _rank(ra, config, report):
    s = ra.steps
    cc = ra.compute_capability
    if ra.basis != "gpu" or not cc or tuple(cc)[0] < 8 or "matmul_fp32_us" not in s or not len(s):
        return None
    kernel_us = s["compute_kernel_time_us"].where(s["compute_kernel_time_us"] > 0)
    share = (s["matmul_fp32_us"] / kernel_us).fillna(0.0)
    mask = (share >= config.fp32_matmul_share_warning).to_numpy()
    if mask.sum() * 2 < len(s):
        return None
    sel = s[mask]
    kt = ra.tables.get("matmul_kernels")
    top = []
    if kt is not None and len(kt):
        k = kt[kt["precision"] == "fp32"].head(5)
        nsteps = max(len(s), 1)
        top = [Fp32Kernel(kernel=r["name"], family=r["family"], op=r["op"], source=r["source"],
                          us_per_step=float(r["total_us"]) / nsteps) for _, r in k.iterrows()]
    period = loader_period_us(ra)  # where the capture timed the loader (its workers, its pinning thread)
    ev = RankEvidence(
        rank=ra.rank, device=ra.device, compute_capability=list(cc), steps=step_ids(s, mask),
        fp32_matmul_us_per_step=mean(sel["matmul_fp32_us"]), tf32_matmul_us_per_step=mean(sel["matmul_tf32_us"]),
        matmul_16bit_us_per_step=mean(sel["matmul_16bit_us"]), matmul_us_per_step=mean(sel["matmul_us"]),
        compute_kernel_us_per_step=mean(sel["compute_kernel_time_us"]), fp32_share_of_kernel_time=mean(share[mask]),
        top_fp32_kernels=top, **({} if period is None else {"loader_period_us": period}))
    # fed by a loader whose pace the capture did not measure
    fed = period is None and "dataloader_us" in s and bool((s["dataloader_us"].fillna(0) > 0).any())
    return ev, fed


def _summary(hits, w, report, config):
    e = w.ev
    device = f", {shown(e.device)}" if e.device else ""
    title = (f"fp32 matrix kernels take {100 * e.fp32_share_of_kernel_time:.0f} % of GPU kernel time "
             f"({e.fp32_matmul_us_per_step / 1000:.2f} ms/step, rank {e.rank}{device}): no autocast, no TF32")
    fed = any(h.aux for h in hits)
    ev = Evidence(per_rank=[h.ev for h in hits], threshold_share_warning=config.fp32_matmul_share_warning,
                  assumed_saving=SAVING, saving_holds_if=HOLDS_IF if fed else None)
    return ev, title, float(np.mean([h.ev.fp32_matmul_us_per_step for h in hits])) * SAVING


RULE = Rule(
    id="no-mixed-precision",
    title="Matrix work in plain fp32 on a GPU with tensor cores",
    needs=Needs(steps=("step",), gpu_steps=("matmul_fp32_us", "compute_kernel_time_us"), tables=("matmul_kernels",)),
    claim=Claim(order=80, gpu=Column("compute", "matmul_fp32_us", scale=SAVING), cpu=None, adds_cpu=autocast_cpu_us),
    label="fp32 matmuls",
    thresholds=("fp32_matmul_share_warning", "autocast_casts_per_gemm"),
    evidence=Evidence, fix=fix, check=PerRank(_rank, _summary, worst=lambda e: e.fp32_share_of_kernel_time),
)
