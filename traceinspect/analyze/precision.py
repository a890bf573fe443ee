"""Which precision the matrix work of each step actually ran in, and the GEMM shapes the precision rules need.

``rank_part`` (run by ``analyze_rank``) makes the tables:

* ``matmul``: per step, precision and family (``gemm``, ``conv``, ``attention``): kernel ``count``, ``total_us``;
* ``matmul_kernels``: per matrix kernel name: precision, family, how it was decided (``source``), the op that
  launched it most often, count and time over all steps;
* ``gemm_shapes`` (only with ``record_shapes``): per step and GEMM op shape: M, N, K, batch, precision, whether
  all of M, N, K are multiples of 8, count and kernel time;

and the step columns ``matmul_count``, ``matmul_us`` and ``matmul_<p>_us`` for every precision class ``p``,
plus ``matmul_16bit_us`` (bf16 + fp16 + 16-bit kernels whose bf16/fp16 type could not be told apart).

How a kernel's precision is decided is documented in docs/rules-precision.md (kernel-name table with sources).
The short version: the kernel's name first (it is what ran: a ``..._ffma_...`` kernel is fp32 on CUDA cores even
when its op asked for float math that TF32 could have served); the launching op's ``Input type`` (joined by
External id, else by the CPU op that encloses the launch) fills in names that do not say, and separates bf16 from
fp16 where a name says only "16-bit". Kernel time is the sum of kernel durations (kernels on several streams may
overlap). The optimizer and GradScaler facts are optimizer.py's. Nothing here imports torch.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from functools import lru_cache

import numpy as np
import pandas as pd

from .attribution import name_strings
from .links import launching_ops
from ..load.trace import Kind, RankTrace
from .results import RankPart

PRECISIONS = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8", "unknown")
FAMILIES = ("gemm", "conv", "attention")
SIXTEEN = "16bit"  # internal: a 16-bit kernel whose name does not say bf16 or fp16

GEMM_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear",
            "aten::_scaled_mm", "aten::_int_mm", "aten::addbmm")

MATMUL_COLUMNS = ["step", "precision", "family", "count", "total_us"]
KERNEL_COLUMNS = ["name", "precision", "family", "source", "op", "op_dtype", "count", "total_us"]
SHAPE_COLUMNS = ["step", "op", "precision", "batch", "m", "n", "k", "aligned8", "count", "total_us", "kernel"]


# --------------------------------------------------------------------------------------------------------------
# Kernel names -> (family, precision)

# Kernels that belong to a matrix op but are not its matrix math (layout transforms, split-K reductions,
# epilogues, attention-backward pre/post-processing): not matrix work, whatever their element type.
_HELPER = re.compile(
    r"splitkreduce|splitk_reduce|reducesplitk|reduce_wgrad|epilogue::impl|nchwtonhwc|nhwctonchw|computeoffsets|"
    r"convert_dq|dot_do_o|dq_to_16bits|flash_bwd_clear|memset|memcpy|fillfunctor|lpnorm|cask_cudnn|"
    r"compute_dot_do_o|init_device_workspace|transpose_|batchnorm|bn_fw|bn_bw|layer_norm|softmax_warp|rmsnorm"
)
_ATTENTION = re.compile(
    r"flash_fwd|flash_bwd|flashattn|pytorch_flash::|flash::|fmha|_sdpa_|native_sdpa|attn_fwd|attn_bwd|mha_fwd|"
    r"mha_bwd|attentionkernel|attention_kernel|prefillwith|decodewith"
)
_CONV = re.compile(
    r"conv(?!ert)|fprop|dgrad|wgrad|implicitgemm|implicit_gemm|scudnn|hcudnn|winograd|fft2d_r2c|fft2d_c2r|"
    r"implicit_convolve|explicit_convolve|h884cudnn|h1688cudnn|s884cudnn"
)
_GEMM = re.compile(
    r"gemm|gemv|nvjet|wgmma|tensorop|s1688|s16816|h884|h1688|h16816|i8816|i16832|cutlass|magma_|"
    r"triton_\w*_(?:b|add)?mm_|triton_tem_fused_\w*mm"
)

_NVJET = re.compile(r"nvjet_(?:sm\d+[a-z]?_)?([a-z]{3,5})_")
_NVJET_LETTER = {"t": "bf16", "h": "fp16", "q": "fp8", "e": "fp8", "i": "int8"}
_XMMA = re.compile(r"xmma_\w*?gemm(?:_indexed)?_([a-z0-9]+?)_([a-z0-9]+?)_")
_XMMA_TYPE = (("bf16", "bf16"), ("tf32", "tf32"), ("cf32", "fp32"), ("f32", "fp32"), ("f16", "fp16"),
              ("e4m3", "fp8"), ("e5m2", "fp8"), ("f8", "fp8"), ("i8", "int8"), ("s8", "int8"), ("u8", "int8"),
              ("f64", "unknown"))
_FMHA = re.compile(r"fmha_cutlass[fb]_(bf16|f16|f32)_")

# Ordered (pattern, precision): the first that matches the lower-cased name decides.
_NAME_RULES = [
    (re.compile(r"e4m3|e5m2|float8|_fp8|fp8_|f8f8|_f8_"), "fp8"),
    (re.compile(r"i8816|i16832|i161616|_s8_|int8|imma|i8i8|igemm"), "int8"),
    (re.compile(r"_ffma|fast_f32|3xtf32|fastf32"), "fp32"),  # FFMA = CUDA cores; 3xTF32 = fp32 accuracy
    (re.compile(r"tfloat32|tf32"), "tf32"),
    (re.compile(r"bf16|bfloat16"), "bf16"),
    (re.compile(r"cudnn_generated\w*_f16_|hmma|s16816gemm_(?!bf16|f16)"), SIXTEEN),
    (re.compile(r"fp16|_f16_|_f16$|half_t|__half|c10::half|h884|h1688|h16816|hgemm|hcudnn"), "fp16"),
    (re.compile(r"s1688gemm|s1688fprop|s1688dgrad|s1688wgrad|tensorop_s1688"), "tf32"),
    (re.compile(r"sgemm|scudnn|implicit_convolve_sgemm|explicit_convolve_sgemm"), "fp32"),
    (re.compile(r"dgemm|_f64_|<double"), "unknown"),
]
_TEMPLATE_FLOAT = re.compile(r"<[^<>]*?\b(float|double)\b")


@lru_cache(maxsize=8192)
def classify_kernel(name: str) -> tuple[str, str] | None:
    """(family, precision) of a kernel from its name, or None when it is not matrix work.

    ``precision`` is one of PRECISIONS, or ``"16bit"`` when the name says 16-bit but not which (cuDNN's generated
    attention kernels say ``f16`` for bf16 too); "unknown" when the name does not say.
    """
    n = name.lower().replace("fbgemm", "fb")  # FBGEMM-GPU's sparse ops are not GEMMs; its GEMMs say cutlass/f8
    if "nccl" in n or _HELPER.search(n):
        return None
    if _ATTENTION.search(n):
        family = "attention"
    elif _CONV.search(n):
        family = "conv"
    elif _GEMM.search(n):
        family = "gemm"
    else:
        return None
    return family, _name_precision(n)


def _name_precision(n: str) -> str:
    m = _NVJET.search(n)
    if m:  # cuBLASLt's Hopper/Blackwell kernels: the first letter is the A operand's type (docs: table)
        code = m.group(1)
        if code[0] == "s":
            return "tf32" if "tf32" in n else "unknown"
        return _NVJET_LETTER.get(code[0], "unknown")
    if "_ffma" in n:
        return "fp32"
    m = _XMMA.search(n)
    if m:  # sm80_xmma_gemm_<A><B>_<math><acc>_<C>: the math (MMA operand) type decides
        math = m.group(2)
        for token, prec in _XMMA_TYPE:
            if math.startswith(token):
                return prec
    m = _FMHA.search(n)
    if m:  # PyTorch's memory-efficient attention; f32 runs 3xTF32 (fp32 accuracy), counted as fp32
        return {"bf16": "bf16", "f16": "fp16", "f32": "fp32"}[m.group(1)]
    for pat, prec in _NAME_RULES:
        if pat.search(n):
            return prec
    m = _TEMPLATE_FLOAT.search(n)  # gemv / winograd / fft kernels templated on their element type
    if m:
        return "fp32" if m.group(1) == "float" else "unknown"
    return "unknown"


# --------------------------------------------------------------------------------------------------------------
# Input types of the launching op

_TYPE_MAP = {
    "float": "fp32", "c10::bfloat16": "bf16", "c10::half": "fp16", "double": "fp64",
    "signed char": "int8", "unsigned char": "int8", "int8_t": "int8", "uint8_t": "int8",
}


@lru_cache(maxsize=65536)
def op_dtype(in_types: str | None) -> str | None:
    """Data type of the first tensor input in an ``Input type`` JSON list: fp32, bf16, fp16, fp8, int8, fp64."""
    if not in_types:
        return None
    try:
        types = json.loads(in_types)
    except (ValueError, TypeError):
        return None
    for t in types if isinstance(types, list) else []:
        if not isinstance(t, str):
            continue
        low = t.lower()
        if "float8" in low:
            return "fp8"
        if low in _TYPE_MAP:
            return _TYPE_MAP[low]
    return None


@lru_cache(maxsize=65536)
def _dims(in_dims: str | None):
    if not in_dims:
        return None
    try:
        d = json.loads(in_dims)
    except (ValueError, TypeError):
        return None
    return d if isinstance(d, list) else None


def gemm_shape(op: str, in_dims: str | None) -> tuple[int, int, int, int] | None:
    """(batch, M, N, K) of a GEMM op from its ``Input Dims``, or None."""
    d = _dims(in_dims)
    if not d:
        return None
    mats = [x for x in d if isinstance(x, list) and len(x) >= 2 and all(isinstance(v, int) for v in x)]
    try:
        if op in ("aten::addmm", "aten::baddbmm", "aten::addbmm"):
            a, b = mats[-2], mats[-1]  # (bias, mat1, mat2): the bias may be 2-D too
        elif op in ("aten::mm", "aten::_scaled_mm", "aten::_int_mm", "aten::bmm", "aten::matmul"):
            a, b = mats[0], mats[1]
        else:
            a = b = None
        if a is not None:
            batch = int(np.prod(a[:-2])) if len(a) > 2 else 1
            return batch, int(a[-2]), int(b[-1]), int(a[-1])
        if op == "aten::linear":
            x, w = d[0], d[1]
            if not (isinstance(x, list) and isinstance(w, list) and len(x) >= 1 and len(w) == 2):
                return None
            m = int(np.prod(x[:-1])) if len(x) > 1 else 1
            return 1, m, int(w[0]), int(w[1])
    except (IndexError, TypeError, ValueError):
        return None
    return None


# --------------------------------------------------------------------------------------------------------------
# Joins: kernel -> launching runtime call -> the CPU op that issued it


# --------------------------------------------------------------------------------------------------------------
# rank_part


def rank_part(rank: RankTrace, steps, step_table: pd.DataFrame, thresholds=None) -> RankPart:
    """The tables ``matmul``, ``matmul_kernels``, ``gemm_shapes`` and the ``matmul_*`` step columns."""
    kt = _matrix_kernels(rank, steps)
    tables = {"matmul": _matmul_table(kt), "matmul_kernels": _kernel_table(kt), "gemm_shapes": _shape_table(kt)}
    return RankPart(tables=tables, columns=_step_columns(step_table, kt))


def _matrix_kernels(rank: RankTrace, steps) -> pd.DataFrame:
    """One row per matrix kernel inside a step: step, name, family, precision, source, dur, op, op_dtype, shape."""
    ev = rank.events
    cols = ["step", "name", "family", "precision", "source", "dur", "op", "op_dtype", "batch", "m", "n", "k"]
    gidx = steps.gpu_index
    if not len(gidx):
        return pd.DataFrame(columns=cols)
    kind = ev["kind"].to_numpy()[gidx]
    isk = (kind == int(Kind.KERNEL)) & (steps.gpu_step >= 0)
    cats = ev["name"].cat.categories
    fam_lut = np.full(len(cats) + 1, -1, np.int64)
    prec_lut = np.empty(len(cats) + 1, object)
    for i, c in enumerate(cats):
        r = classify_kernel(str(c))
        if r is not None:
            fam_lut[i] = FAMILIES.index(r[0])
            prec_lut[i] = r[1]
    codes = ev["name"].cat.codes.to_numpy()[gidx]
    sel = isk & (fam_lut[codes] >= 0)
    if not sel.any():
        return pd.DataFrame(columns=cols)
    rows = gidx[sel]
    step_ids = steps.table["step"].to_numpy()
    kt = pd.DataFrame({
        "step": step_ids[steps.gpu_step[sel]].astype(np.int64),
        "name": name_strings(ev, rows),
        "family": np.array(FAMILIES)[fam_lut[codes[sel]]],
        "precision": prec_lut[codes[sel]],
        "dur": ev["dur"].to_numpy()[rows],
    })
    kt["source"] = "name"
    kt["op"] = None
    kt["op_dtype"] = None
    for c in ("batch", "m", "n", "k"):
        kt[c] = -1
    if ev["in_types"].notna().any():
        _join_ops(ev, rows, kt)
    _resolve(kt)
    return kt[cols]


@lru_cache(maxsize=65536)
def _gemm_shape_cached(op, in_dims):
    return gemm_shape(op, in_dims)


def _join_ops(ev: pd.DataFrame, rows: np.ndarray, kt: pd.DataFrame) -> None:
    ops = launching_ops(ev, rows)
    has = ops >= 0
    if not has.any():
        return
    o = ops[has]
    names = name_strings(ev, o)
    types = ev["in_types"].to_numpy()[o]
    dims = ev["in_dims"].to_numpy()[o]
    kt.loc[has, "op"] = names
    kt.loc[has, "op_dtype"] = [op_dtype(t) for t in types]
    shapes = [_gemm_shape_cached(n, d) if n in GEMM_OPS else None for n, d in zip(names, dims)]
    arr = np.array([s if s is not None else (-1, -1, -1, -1) for s in shapes], np.int64).reshape(-1, 4)
    for j, c in enumerate(("batch", "m", "n", "k")):
        kt.loc[has, c] = arr[:, j]


def _resolve(kt: pd.DataFrame) -> None:
    """Combine name and op dtype into the final precision and say how it was decided."""
    prec = kt["precision"].to_numpy().astype(object)
    dt = kt["op_dtype"].to_numpy()
    src = kt["source"].to_numpy().astype(object)
    definite = np.isin(prec, ["fp32", "tf32", "bf16", "fp16", "fp8", "int8"])
    has_dt = np.array([d is not None for d in dt])
    # Name and op agree (tf32/fp32 kernels run on float data): the op confirms the name.
    agree = definite & has_dt & np.array([_agrees(p, d) for p, d in zip(prec, dt)])
    src[agree] = "name+op"
    # 16-bit names: the op's dtype says which.
    amb = (prec == SIXTEEN) & np.isin(dt, ["bf16", "fp16"])
    prec[amb] = dt[amb]
    src[amb] = "name(16-bit)+op"
    # Names that say nothing: the op's dtype, unless it is float (fp32 data could run as fp32 or TF32).
    unk = (prec == "unknown") & np.isin(dt, ["bf16", "fp16", "fp8", "int8"])
    prec[unk] = dt[unk]
    src[unk] = "op"
    # Remaining 16-bit names: the rank's own 16-bit matrix work says which (bf16 and fp16 are rarely mixed).
    left = prec == SIXTEEN
    if left.any():
        d = kt["dur"].to_numpy()
        bf, fp = d[prec == "bf16"].sum(), d[prec == "fp16"].sum()
        if bf or fp:
            prec[left] = "bf16" if bf >= fp else "fp16"
            src[left] = "name(16-bit)+rank"
        else:
            src[left] = "name(16-bit)"
    kt["precision"] = prec
    kt["source"] = src


def _agrees(p: str, d: str) -> bool:
    return (p in ("fp32", "tf32") and d == "fp32") or p == d


def _matmul_table(kt: pd.DataFrame) -> pd.DataFrame:
    if not len(kt):
        return pd.DataFrame({c: pd.Series(dtype=object) for c in MATMUL_COLUMNS})
    g = kt.groupby(["step", "precision", "family"], sort=True)["dur"].agg(["count", "sum"]).reset_index()
    return g.rename(columns={"sum": "total_us"})[MATMUL_COLUMNS]


def _kernel_table(kt: pd.DataFrame) -> pd.DataFrame:
    if not len(kt):
        return pd.DataFrame({c: pd.Series(dtype=object) for c in KERNEL_COLUMNS})
    rows = []
    # Each (name, precision, family) group's rows in table order, groups in order of first appearance (what
    # iterating the groupby gives), read from plain arrays.
    code = kt.groupby(["name", "precision", "family"], sort=False).ngroup().fillna(-1).to_numpy(np.int64)
    order = np.argsort(code, kind="stable")
    order = order[code[order] >= 0]
    cuts = np.flatnonzero(np.diff(code[order])) + 1
    names, precs, fams, srcs, op_col, dt_col = (kt[c].to_numpy() for c in ("name", "precision", "family", "source",
                                                                            "op", "op_dtype"))
    dur = kt["dur"].to_numpy(dtype=float)
    for pos in np.split(order, cuts) if len(order) else []:
        ops = Counter(x for x in op_col[pos] if x is not None)
        dts = Counter(x for x in dt_col[pos] if x is not None)
        d = dur[pos]
        total = float(np.where(np.isnan(d), 0.0, d).sum())  # as Series.sum: NaN skipped, same summation order
        i = pos[0]
        rows.append({"name": names[i], "precision": precs[i], "family": fams[i],
                     "source": Counter(srcs[pos]).most_common(1)[0][0],
                     "op": ops.most_common(1)[0][0] if ops else None, "op_dtype": dts.most_common(1)[0][0] if dts else None,
                     "count": len(pos), "total_us": total})
    return pd.DataFrame(rows, columns=KERNEL_COLUMNS).sort_values("total_us", ascending=False, ignore_index=True)


def _shape_table(kt: pd.DataFrame) -> pd.DataFrame:
    if not len(kt) or not (kt["m"] >= 0).any():
        return pd.DataFrame({c: pd.Series(dtype=object) for c in SHAPE_COLUMNS})
    s = kt[kt["m"] >= 0].copy()
    s["aligned8"] = (s["m"] % 8 == 0) & (s["n"] % 8 == 0) & (s["k"] % 8 == 0)
    g = s.groupby(["step", "op", "precision", "batch", "m", "n", "k", "aligned8"], sort=True)
    out = g["dur"].agg(["count", "sum"]).reset_index().rename(columns={"sum": "total_us"})
    keys = ["step", "op", "precision", "batch", "m", "n", "k", "aligned8"]
    # The most frequent kernel name per group (ties: the first name in sort order).
    top = (s.groupby(keys + ["name"], sort=True).size().reset_index(name="n_")
           .sort_values("n_", ascending=False, kind="stable").drop_duplicates(keys))
    out = out.merge(top[keys + ["name"]], on=keys, how="left").rename(columns={"name": "kernel"})
    return out[SHAPE_COLUMNS]


def _step_columns(step_table: pd.DataFrame, kt: pd.DataFrame) -> dict[str, np.ndarray]:
    steps = step_table["step"].to_numpy()
    by = {}
    if len(kt):
        piv = kt.pivot_table(index="step", columns="precision", values="dur", aggfunc="sum", fill_value=0.0)
        by = {p: piv[p].reindex(steps, fill_value=0.0).to_numpy() for p in piv.columns}
        counts = kt.groupby("step").size().reindex(steps, fill_value=0).to_numpy()
    else:
        counts = np.zeros(len(steps), np.int64)
    zero = np.zeros(len(steps))
    out = {"matmul_count": counts.astype(np.int64)}
    total = zero.copy()
    for p in PRECISIONS:
        v = by.get(p, zero)
        out[f"matmul_{p}_us"] = v
        total = total + v
    sixteen = by.get(SIXTEEN, zero)
    out["matmul_us"] = total + sixteen
    out["matmul_16bit_us"] = by.get("bf16", zero) + by.get("fp16", zero) + sixteen
    return out
