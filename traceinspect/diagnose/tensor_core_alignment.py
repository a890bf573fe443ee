"""tensor-core-alignment: 16-bit GEMMs whose dimensions are not multiples of 8.

**Detects**, from the shapes the profiler recorded (``record_shapes=True``; without them the rule is silent),
bf16 / fp16 GEMM ops (``aten::mm``, ``addmm``, ``bmm``, ``baddbmm``, ``matmul``, ``linear``) with M, N or K not a
multiple of 8, and the GPU time of the kernels they launched. Tensor cores read 16-byte (8-element) aligned
tiles: with a dimension that is not a multiple of 8, cuBLAS either picks a kernel that loads 2 or 4 bytes at a
time (the kernel name says ``align1`` / ``align2``, see docs/rules-precision.md) or an older, slower kernel
family, and pads the tiles; NVIDIA's performance guide asks for multiples of 8 (16-bit), 64 being better still.

**Condition**: misaligned GEMMs take at least ``tc_alignment_share`` (10 %) of the rank's 16-bit GEMM kernel
time. Severity: *warning* when kernels with narrow loads (``align1`` / ``align2`` / ``align4`` in the name) run
at least ``tc_alignment_narrow_share`` (10 %) of that time, *info* otherwise (the dimensions are off but the
library still found full-width kernels, so the gain is small). GEMMs with a dimension below 8 (a 2-class head,
a matrix-vector product) are left out of both times: they are bound by memory, not by tensor cores, and
padding them gains nothing.

**Evidence**: per rank, the misaligned shapes (op, M, N, K, batch), their count and kernel time per step, the
kernel that ran, and the shares. **Time at stake**: half the time of the narrow-load kernels (such kernels
commonly run 1.5-3x slower than aligned ones of the same size).

**Fix**: pad the dimensions you own to multiples of 8 (64 is better)::

    vocab = (vocab + 63) // 64 * 64                       # e.g. 50257 -> 50304
    tokenizer(texts, padding=True, pad_to_multiple_of=8)  # sequence length
    nn.Linear(1024, 4096)                                 # hidden sizes: multiples of 64
"""

from __future__ import annotations

import re

from . import Needs
from .finding import Finding

ID = "tensor-core-alignment"
TITLE = "16-bit GEMMs with dimensions not multiple of 8"
NEEDS = Needs(tables=("gemm_shapes",))

FIX = (
    "vocab = (vocab + 63) // 64 * 64          # pad embedding / output sizes\n"
    "tokenizer(..., padding=True, pad_to_multiple_of=8)\n"
    "# hidden / feature sizes: multiples of 64"
)
_ALIGN = re.compile(r"align(\d+)")
SAVING = 0.5
MIN_DIM = 8


def _narrow(kernel: str) -> bool:
    m = _ALIGN.findall(str(kernel))
    return bool(m) and min(int(x) for x in m) < 8


def check(report, config) -> list[Finding]:
    share_min = config.tc_alignment_share
    narrow_min = config.tc_alignment_narrow_share
    per_rank, ranks, steps = [], [], set()
    sev = "info"
    for ra in report.ranks:
        shapes = ra.tables.get("gemm_shapes")
        if ra.basis != "gpu" or shapes is None or not len(shapes):
            continue
        # Skinny GEMMs (a dimension below 8, e.g. a 2-class head) are matrix-vector work bound by memory: no
        # tensor-core tile to fill, nothing to gain from padding.
        g16 = shapes[shapes["precision"].isin(["bf16", "fp16"])
                     & (shapes[["m", "n", "k"]].min(axis=1) >= MIN_DIM)]
        total = float(g16["total_us"].sum())
        if total <= 0:
            continue
        bad = g16[~g16["aligned8"].astype(bool)]
        bad_us = float(bad["total_us"].sum())
        share = bad_us / total
        if share < share_min:
            continue
        narrow_us = float(bad.loc[bad["kernel"].map(_narrow), "total_us"].sum())
        narrow = narrow_us / total
        if narrow >= narrow_min:
            sev = "warning"
        nsteps = max(len(ra.steps), 1)
        agg = (bad.groupby(["op", "precision", "batch", "m", "n", "k"])
               .agg(count=("count", "sum"), total_us=("total_us", "sum"),
                    kernel=("kernel", lambda x: x.iloc[0]))
               .reset_index().sort_values("total_us", ascending=False).head(8))
        per_rank.append({
            "rank": ra.rank,
            "steps": sorted(int(x) for x in bad["step"].unique()),
            "misaligned_us_per_step": bad_us / nsteps,
            "gemm16_us_per_step": total / nsteps,
            "misaligned_share": share,
            "narrow_kernel_share": narrow,
            "narrow_kernel_us_per_step": narrow_us / nsteps,
            "shapes": [{"op": r["op"], "precision": r["precision"], "batch": int(r["batch"]), "m": int(r["m"]),
                        "n": int(r["n"]), "k": int(r["k"]), "count_per_step": float(r["count"]) / nsteps,
                        "us_per_step": float(r["total_us"]) / nsteps, "kernel": r["kernel"]}
                       for _, r in agg.iterrows()],
        })
        ranks.append(ra.rank)
        steps.update(per_rank[-1]["steps"])
    if not per_rank:
        return []
    r0 = max(per_rank, key=lambda r: r["misaligned_us_per_step"])
    per_rank.sort(key=lambda e: e is not r0)  # the rank the title names comes first (renderers show it)
    top = r0["shapes"][0]
    return [Finding(
        id=ID,
        severity=sev,
        title=(f"{100 * r0['misaligned_share']:.0f} % of 16-bit GEMM time has dims not multiple of 8 "
               f"(rank {r0['rank']}; largest {top['op']} M={top['m']} N={top['n']} K={top['k']})"),
        ranks=sorted(ranks),
        steps=sorted(steps),
        evidence={"per_rank": per_rank, "threshold_share": share_min, "threshold_narrow_share": narrow_min},
        fix=FIX,
        time_at_stake_us=max(r["narrow_kernel_us_per_step"] for r in per_rank) * SAVING,
    )]
