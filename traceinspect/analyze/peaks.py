"""Dense peak TFLOP/s and memory bandwidth of the accelerators traces name, each from its vendor's datasheet.

One row per device: the dense (no structured sparsity) tensor/matrix-core peak for bf16, fp16 and TF32, the peak an
fp32 matrix multiply can reach (NVIDIA: the FP32 CUDA-core figure; AMD: the FP32 matrix-core figure), and the
memory bandwidth, with the datasheet each number is read from. Datasheets that quote "with sparsity" figures only
(marked * there) are halved: the dense figure is half the sparse one. A precision the device has no tensor-core
path for (V100: bf16, TF32; MI250: TF32) is None. ``device_peak(name)`` matches the ``deviceProperties`` name a
trace records (``RankTrace.device_name``); an unknown device gives None, never a guess. docs/metrics.md, "Peak
table", lists the rows.
"""

from __future__ import annotations

import re
from typing import NamedTuple


class Peak(NamedTuple):
    device: str  # the row's name
    bf16: float | None  # dense TFLOP/s
    fp16: float | None
    tf32: float | None
    fp32: float | None
    memory_tbps: float  # TB/s (10^12 bytes per second)
    source: str  # the vendor document the numbers come from

    def tflops(self, precision: str) -> float | None:
        """The dense peak for a precision: "bf16", "fp16", "tf32" or "fp32" (None: no such path, or another)."""
        return getattr(self, precision, None) if precision in ("bf16", "fp16", "tf32", "fp32") else None


_A100 = "NVIDIA A100 Tensor Core GPU datasheet (tensor-core figures without sparsity)"
_H100 = "NVIDIA H100 Tensor Core GPU datasheet (figures with sparsity halved)"
_H200 = "NVIDIA H200 Tensor Core GPU datasheet (figures with sparsity halved)"
_B200 = "NVIDIA HGX B200 datasheet (8-GPU figures divided by 8, figures with sparsity halved)"
_V100 = "NVIDIA Tesla V100 GPU datasheet (Tensor Performance: fp16 in, fp32 accumulate)"
_MI250 = "AMD Instinct MI250 / MI250X accelerator datasheets"
_MI300 = "AMD Instinct MI300X accelerator datasheet (figures without sparsity)"

# (pattern on the lower-cased device name, row); the first that matches decides, so specific names come first.
PEAKS: tuple[tuple[re.Pattern, Peak], ...] = (
    (re.compile(r"h100.*nvl"), Peak("H100 NVL", 835.5, 835.5, 417.5, 60.0, 3.9, _H100)),
    (re.compile(r"h100.*pcie"), Peak("H100 PCIe", 756.5, 756.5, 378.0, 51.0, 2.0, _H100)),
    (re.compile(r"h100.*(sxm|hbm3)"), Peak("H100 SXM", 989.5, 989.5, 494.5, 67.0, 3.35, _H100)),
    (re.compile(r"h200.*nvl"), Peak("H200 NVL", 835.5, 835.5, 417.5, 60.0, 4.8, _H200)),
    (re.compile(r"h200"), Peak("H200 SXM", 989.5, 989.5, 494.5, 67.0, 4.8, _H200)),
    (re.compile(r"b200"), Peak("B200 (HGX)", 2250.0, 2250.0, 1125.0, 75.0, 8.0, _B200)),
    (re.compile(r"a100.*80gb.*pcie|a100.*pcie.*80gb"), Peak("A100 80GB PCIe", 312.0, 312.0, 156.0, 19.5, 1.935, _A100)),
    (re.compile(r"a100.*80gb"), Peak("A100 80GB SXM", 312.0, 312.0, 156.0, 19.5, 2.039, _A100)),
    # The 40 GB A100 (SXM4 or PCIe, and the SXM4 board spelled A100-PG509-200) share compute peaks and 1,555 GB/s.
    (re.compile(r"a100"), Peak("A100 40GB", 312.0, 312.0, 156.0, 19.5, 1.555, _A100)),
    (re.compile(r"v100s"), Peak("V100S PCIe", None, 130.0, None, 16.4, 1.134, _V100)),
    (re.compile(r"v100.*pcie"), Peak("V100 PCIe", None, 112.0, None, 14.0, 0.9, _V100)),
    (re.compile(r"v100"), Peak("V100 SXM2", None, 125.0, None, 15.7, 0.9, _V100)),
    (re.compile(r"mi250x"), Peak("MI250X", 383.0, 383.0, None, 95.7, 3.2768, _MI250)),
    (re.compile(r"mi250"), Peak("MI250", 362.1, 362.1, None, 90.5, 3.2768, _MI250)),
    (re.compile(r"mi300x"), Peak("MI300X", 1307.4, 1307.4, 653.7, 163.4, 5.3, _MI300)),
)


def device_peak(name: str | None) -> Peak | None:
    """The peak row of a trace's device name (``NVIDIA H100 80GB HBM3``, ``AMD Instinct MI300X VF``), or None."""
    if not isinstance(name, str) or not name:
        return None
    low = name.lower()
    for pattern, peak in PEAKS:
        if pattern.search(low):
            return peak
    return None


def peaks_markdown() -> str:
    """The table as docs/metrics.md carries it (a test keeps the two equal)."""

    def f(v):
        return "n/a" if v is None else f"{v:g}"

    rows = ["| device | bf16 | fp16 | TF32 | fp32 | memory TB/s | source |", "| --- | --- | --- | --- | --- | --- | --- |"]
    rows += [f"| {p.device} | {f(p.bf16)} | {f(p.fp16)} | {f(p.tf32)} | {f(p.fp32)} | {f(p.memory_tbps)} | {p.source} |"
             for _, p in PEAKS]
    return "\n".join(rows) + "\n"
