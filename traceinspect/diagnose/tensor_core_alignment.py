"""tensor-core-alignment: 16-bit GEMMs whose dimensions are not multiples of 8.

**Detects**, from the shapes the profiler recorded (``record_shapes=True``; without them the rule is silent),
bf16 / fp16 GEMM ops (``aten::mm``, ``addmm``, ``bmm``, ``baddbmm``, ``matmul``, ``linear``) with M, N or K not a
multiple of 8, and the GPU time of the kernels they launched. Tensor cores read 16-byte (8-element) aligned
tiles: with a dimension that is not a multiple of 8, cuBLAS either picks a kernel that loads 2 or 4 bytes at a
time (the kernel name says ``align1`` / ``align2``, see docs/rules-precision.md) or an older, slower kernel
family, and pads the tiles; NVIDIA's performance guide asks for multiples of 8 (16-bit), 64 being better still.

**Condition**: misaligned GEMMs take at least ``tc_alignment_share`` (10 %) of the rank's 16-bit GEMM kernel
time. Its claim is half the time of the kernels with narrow loads (``align1`` / ``align2`` / ``align4`` in the name;
where the library still found full-width kernels the gain is small), and its severity comes from that claim
(docs/findings.md). GEMMs with a dimension below 8 (a 2-class head,
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
from typing import Annotated

import msgspec

from ._rule import Claim, Fixed, Needs, PerRank, RankHit, Rule
from ._util import shown
from .takes import Estimate
from .units import COUNT, Count, Share, Us

FIX = (
    "vocab = (vocab + 63) // 64 * 64          # pad embedding / output sizes\n"
    "tokenizer(..., padding=True, pad_to_multiple_of=8)\n"
    "# hidden / feature sizes: multiples of 64"
)
_ALIGN = re.compile(r"align(\d+)")
SAVING = 0.5
MIN_DIM = 8


class Shape(msgspec.Struct, kw_only=True):
    """One misaligned GEMM shape (analyze/precision.py's ``gemm_shapes``), per step."""

    op: str
    precision: str
    batch: Annotated[int, COUNT]
    m: Annotated[int, COUNT]
    n: Annotated[int, COUNT]
    k: Annotated[int, COUNT]
    count_per_step: Count
    us_per_step: Us
    kernel: str  # its most frequent kernel


class RankEvidence(RankHit, kw_only=True):
    misaligned_us_per_step: Us
    gemm16_us_per_step: Us
    misaligned_share: Share  # of the 16-bit GEMM time
    narrow_kernel_share: Share  # of the 16-bit GEMM time
    narrow_kernel_us_per_step: Us
    shapes: list[Shape]  # the costliest (8 at most)


class Evidence(msgspec.Struct, kw_only=True):
    per_rank: list[RankEvidence]
    threshold_share: Share


def _narrow(kernel: str) -> bool:
    m = _ALIGN.findall(str(kernel))
    return bool(m) and min(int(x) for x in m) < 8


def _rank(ra, config, report):
    shapes = ra.tables.get("gemm_shapes")
    if ra.basis != "gpu" or shapes is None or not len(shapes):
        return None
    # Skinny GEMMs (a dimension below 8, e.g. a 2-class head) are matrix-vector work bound by memory: no
    # tensor-core tile to fill, nothing to gain from padding.
    g16 = shapes[shapes["precision"].isin(["bf16", "fp16"]) & (shapes[["m", "n", "k"]].min(axis=1) >= MIN_DIM)]
    total = float(g16["total_us"].sum())
    if total <= 0:
        return None
    bad = g16[~g16["aligned8"].astype(bool)]
    bad_us = float(bad["total_us"].sum())
    if bad_us / total < config.tc_alignment_share:
        return None
    narrow_us = float(bad.loc[bad["kernel"].map(_narrow), "total_us"].sum())
    nsteps = max(len(ra.steps), 1)
    agg = (bad.groupby(["op", "precision", "batch", "m", "n", "k"])
           .agg(count=("count", "sum"), total_us=("total_us", "sum"), kernel=("kernel", lambda x: x.iloc[0]))
           .reset_index().sort_values("total_us", ascending=False).head(8))
    return RankEvidence(
        rank=ra.rank,
        steps=sorted(int(x) for x in bad["step"].unique()),
        misaligned_us_per_step=bad_us / nsteps,
        gemm16_us_per_step=total / nsteps,
        misaligned_share=bad_us / total,
        narrow_kernel_share=narrow_us / total,
        narrow_kernel_us_per_step=narrow_us / nsteps,
        shapes=[Shape(op=r["op"], precision=r["precision"], batch=int(r["batch"]), m=int(r["m"]), n=int(r["n"]),
                      k=int(r["k"]), count_per_step=float(r["count"]) / nsteps,
                      us_per_step=float(r["total_us"]) / nsteps, kernel=r["kernel"]) for _, r in agg.iterrows()],
    )


def _summary(hits, w, report, config):
    e = w.ev
    top = e.shapes[0]
    title = (f"{100 * e.misaligned_share:.0f} % of 16-bit GEMM time has dims not multiple of 8 "
             f"(rank {e.rank}; largest {shown(top.op)} M={top.m} N={top.n} K={top.k})")
    ev = Evidence(per_rank=[h.ev for h in hits], threshold_share=config.tc_alignment_share)
    return ev, title, max(h.ev.narrow_kernel_us_per_step for h in hits) * SAVING


RULE = Rule(
    id="tensor-core-alignment",
    title="16-bit GEMMs with dimensions not multiple of 8",
    needs=Needs(tables=("gemm_shapes",)),
    claim=Claim(order=90, gpu=Estimate(("compute",)), cpu=None),
    label="misaligned GEMMs",
    thresholds=("tc_alignment_share",),
    evidence=Evidence, fix=Fixed(FIX), check=PerRank(_rank, _summary, worst=lambda e: e.misaligned_us_per_step),
)
