"""Model FLOPs from the recorded input shapes (traces recorded with ``record_shapes=True``).

``rank_part`` (run by ``analyze_rank``) makes:

* the step columns ``model_flops`` (FLOPs of the step's matrix multiplies, convolutions and attention, forward
  and backward), ``causal_skipped_flops`` (the half of causal attention's FLOPs that a causal kernel skips; counted
  in ``model_flops``, as torch's flop counter counts them), ``flop_ops`` (ops counted) and ``flop_ops_unknown``
  (ops of a counted kind whose FLOPs the recorded arguments do not give). A trace without shapes gives null
  (``NaN`` in the table), never zero;
* the table ``flop_ops``: per op group (op name, input shapes, dtype, causal) over the rank's steps: ``calls``,
  ``flops``, ``bytes`` (inputs and outputs, from shapes and dtypes), ``kernel_us`` (the time of the GPU kernels
  the group's calls launched; null without GPU kernels) and ``steps``;
* the table ``flops_status``: one row, whether shapes were recorded and, where FLOPs are null, why.

The formulas are those of ``torch.utils.flop_counter.FlopCounterMode`` (2*M*N*K per matrix multiply, its
convolution and attention formulas), so the totals compare with it (docs/metrics.md, "Model FLOPs"). Ops nest (an
``aten::linear`` calls ``aten::addmm``; an ``aten::_convolution`` calls ``aten::cudnn_convolution``): of the ops
this module knows, only those with no other known op inside them on their thread are counted (the leaf), so no
work is counted twice. Backward ops are the same aten ops (``aten::mm`` under ``MmBackward0``,
``aten::convolution_backward``, the attention ``_backward`` ops) and count the same way. Nothing here imports torch.
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from typing import Callable, NamedTuple

import numpy as np
import pandas as pd

from .events import step_at
from .links import launching_ops
from .precision import _dims, op_dtype
from ..load.trace import Kind, RankTrace
from .results import RankPart

OP_COLUMNS = ["op", "shapes", "dtype", "causal", "calls", "flops", "bytes", "kernel_us", "steps"]
STATUS_COLUMNS = ["shapes_recorded", "reason"]
NO_SHAPES = "record_shapes was off: the trace records no input shapes"


class OpCost(NamedTuple):
    """One call's FLOPs (FlopCounterMode's convention), the bytes it reads and writes (None where a dtype is not
    known), and whether it is causal attention."""

    flops: int
    bytes: int | None
    causal: bool = False


# --------------------------------------------------------------------------------------------------------------
# Recorded arguments

# ``Input type`` spellings -> bytes per element.
_ELEMENT_BYTES = {
    "float": 4, "double": 8, "c10::bfloat16": 2, "c10::half": 2, "long int": 8, "long": 8, "int": 4,
    "short int": 2, "short": 2, "long unsigned int": 8, "unsigned int": 4, "short unsigned int": 2, "signed char": 1, "unsigned char": 1, "bool": 1, "c10::complex<float>": 8,
    "c10::complex<double>": 16, "c10::float8_e4m3fn": 1, "c10::float8_e5m2": 1, "c10::float8_e4m3fnuz": 1,
    "c10::float8_e5m2fnuz": 1,
}


def element_bytes(type_name) -> int | None:
    """Bytes per element of an ``Input type`` entry, or None (not a tensor, or a type not listed)."""
    return _ELEMENT_BYTES.get(type_name.lower()) if isinstance(type_name, str) else None


def _json_list(text: str | None) -> list | None:
    """A recorded JSON list (``Input Dims``, ``Input type``, ``Concrete Inputs``), or None."""
    return _dims(text)


class Args:
    """One call's recorded arguments: ``dims`` (``Input Dims``), ``types`` (``Input type``) and ``concrete``
    (``Concrete Inputs``: the scalar and list arguments as text), each a list or None."""

    __slots__ = ("dims", "types", "concrete")

    def __init__(self, dims: list | None, types: list | None, concrete: list | None):
        self.dims, self.types, self.concrete = dims, types, concrete

    def shape(self, i: int) -> list[int] | None:
        """Shape of tensor argument ``i`` (a list of ints; [] is a scalar or a non-tensor), or None."""
        d = self.dims
        if d is None or i >= len(d) or not isinstance(d[i], list):
            return None
        s = d[i]
        return s if all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in s) else None

    def tensor(self, i: int, ndim: int | None = None, min_ndim: int = 1) -> list[int] | None:
        """Shape of argument ``i`` when it is a tensor of ``ndim`` (or at least ``min_ndim``) dimensions."""
        s = self.shape(i)
        if s is None or not s or (ndim is not None and len(s) != ndim) or len(s) < min_ndim:
            return None
        return s

    def value(self, i: int):
        """The concrete value of argument ``i`` parsed from its text (``"[1, 1]"`` -> [1, 1], ``"True"`` -> True),
        or None where not recorded."""
        c = self.concrete
        if c is None or i >= len(c) or not isinstance(c[i], str) or c[i] == "":
            return None
        return _concrete(c[i])

    def itemsize(self, i: int) -> int | None:
        t = self.types
        return element_bytes(t[i]) if t is not None and i < len(t) else None

    def input_bytes(self) -> int | None:
        """Bytes of every tensor input (a list of tensors counts each), None where a tensor's dtype is unknown."""
        if self.dims is None:
            return None
        total = 0
        for i, d in enumerate(self.dims):
            shapes = d if d and isinstance(d[0], list) else [d]
            for s in shapes:
                if not isinstance(s, list) or not s or not all(isinstance(x, int) for x in s):
                    continue
                size = self.itemsize(i)
                if size is None:
                    t = self.types[i] if self.types is not None and i < len(self.types) else None
                    if t == "TensorList":
                        size = self.itemsize(0)
                if size is None:
                    return None
                total += math.prod(s) * size
        return total


@lru_cache(maxsize=4096)
def _concrete(text: str):
    low = text.strip()
    if low in ("True", "False"):
        return low == "True"
    try:
        return json.loads(low.replace("True", "true").replace("False", "false"))
    except (ValueError, TypeError):
        return None


def _ints(v, n: int) -> list[int] | None:
    """A list argument of ``n`` ints (one int, or a 1-list, is repeated: PyTorch expands them the same way)."""
    if isinstance(v, int) and not isinstance(v, bool):
        v = [v]
    if not isinstance(v, list) or not v or not all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        return None
    if len(v) == 1:
        return v * n
    return v if len(v) == n else None


# --------------------------------------------------------------------------------------------------------------
# Formulas (torch.utils.flop_counter's)


def mm_flops(m: int, n: int, k: int, batch: int = 1) -> int:
    return 2 * batch * m * n * k


def conv_flop_count(x: list[int], w: list[int], out: list[int], transposed: bool) -> int:
    """torch.utils.flop_counter.conv_flop_count: 2 x batch x prod(output or, transposed, input spatial dims) x
    prod(filter) x w[0] x w[1] (bias not counted)."""
    conv_shape = (x if transposed else out)[2:]
    return 2 * x[0] * math.prod(conv_shape) * math.prod(w[2:]) * w[0] * w[1]


def sdpa_flops(b: int, h: int, sq: int, sk: int, dq: int, dv: int) -> int:
    """Q @ K^T and P @ V: torch's sdpa_flop_count (GQA: the query's heads)."""
    return mm_flops(sq, sk, dq, b * h) + mm_flops(sq, dv, sk, b * h)


def sdpa_backward_flops(b: int, h: int, sq: int, sk: int, dq: int, dv: int) -> int:
    """The scores recomputed, then the gradients of V, P, Q and K: torch's sdpa_backward_flop_count."""
    return (mm_flops(sq, sk, dq, b * h) + mm_flops(sq, sk, dv, b * h) + mm_flops(sk, dv, sq, b * h)
            + mm_flops(sq, dq, sk, b * h) + mm_flops(dq, sk, sq, b * h))


def _bytes(a: Args, out_elems: int, out_size_of: int = 0) -> int | None:
    """Inputs' bytes plus ``out_elems`` elements of argument ``out_size_of``'s dtype."""
    inp = a.input_bytes()
    size = a.itemsize(out_size_of)
    return None if inp is None or size is None else inp + out_elems * size


def _mm(a: Args, i: int = 0) -> OpCost | None:
    x, y = a.tensor(i, 2), a.tensor(i + 1, 2)
    if x is None or y is None or x[1] != y[0]:
        return None
    return OpCost(mm_flops(x[0], y[1], x[1]), _bytes(a, x[0] * y[1], i))


def _bmm(a: Args, i: int = 0) -> OpCost | None:
    x, y = a.tensor(i, 3), a.tensor(i + 1, 3)
    if x is None or y is None or x[2] != y[1] or x[0] != y[0]:
        return None
    return OpCost(mm_flops(x[1], y[2], x[2], x[0]), _bytes(a, x[0] * x[1] * y[2], i))


def _broadcast(p: list[int], q: list[int]) -> list[int] | None:
    out = []
    for i in range(1, max(len(p), len(q)) + 1):
        u = p[-i] if i <= len(p) else 1
        v = q[-i] if i <= len(q) else 1
        if u != v and 1 not in (u, v):
            return None
        out.append(max(u, v))
    return out[::-1]


def _matmul(a: Args) -> OpCost | None:
    """torch.matmul of any ranks: vectors as 1 x K / K x 1, batch dimensions broadcast."""
    x, y = a.tensor(0), a.tensor(1)
    if x is None or y is None:
        return None
    m, k = (1, x[0]) if len(x) == 1 else (x[-2], x[-1])
    k2, n = (y[0], 1) if len(y) == 1 else (y[-2], y[-1])
    batch = _broadcast(x[:-2], y[:-2])
    if k != k2 or batch is None:
        return None
    b = math.prod(batch)
    return OpCost(mm_flops(m, n, k, b), _bytes(a, b * m * n))


def _linear(a: Args) -> OpCost | None:
    x, w = a.tensor(0), a.tensor(1, 2)
    if x is None or w is None or x[-1] != w[1]:
        return None
    m = math.prod(x[:-1])
    return OpCost(mm_flops(m, w[0], w[1]), _bytes(a, m * w[0]))


def _conv(stride_at: int, padding_at: int, dilation_at: int, transposed_at: int | None,
          output_padding_at: int | None, groups_at: int | None) -> Callable[[Args], OpCost | None]:
    """A convolution op whose arguments sit at these positions (input 0, weight 1)."""

    def cost(a: Args) -> OpCost | None:
        x, w = a.tensor(0, min_ndim=3), a.tensor(1, min_ndim=3)
        if x is None or w is None or len(x) != len(w):
            return None
        n = len(x) - 2
        transposed = a.value(transposed_at) if transposed_at is not None else False
        stride, padding, dilation = (_ints(a.value(i), n) for i in (stride_at, padding_at, dilation_at))
        groups = a.value(groups_at) if groups_at is not None else 1
        if not isinstance(transposed, bool) or stride is None or padding is None or dilation is None:
            return None  # no Concrete Inputs (older torch): the output size is not known
        groups = groups if isinstance(groups, int) and groups > 0 else 1
        if transposed:
            op = _ints(a.value(output_padding_at), n) if output_padding_at is not None else [0] * n
            op = op or [0] * n
            spatial = [(x[2 + i] - 1) * stride[i] - 2 * padding[i] + dilation[i] * (w[2 + i] - 1) + op[i] + 1
                       for i in range(n)]
            out = [x[0], w[1] * groups, *spatial]
        else:
            spatial = [(x[2 + i] + 2 * padding[i] - dilation[i] * (w[2 + i] - 1) - 1) // stride[i] + 1
                       for i in range(n)]
            out = [x[0], w[0], *spatial]
        if min(spatial) <= 0:
            return None
        return OpCost(conv_flop_count(x, w, out, transposed), _bytes(a, math.prod(out)))

    return cost


def _conv_backward(a: Args) -> OpCost | None:
    """aten::convolution_backward(grad_out, input, weight, bias_sizes, stride, padding, dilation, transposed,
    output_padding, groups, output_mask): the input gradient and the weight gradient where the mask asks for them
    (both where the mask is not recorded), as torch's conv_backward_flop."""
    go, x, w = a.tensor(0, min_ndim=3), a.tensor(1, min_ndim=3), a.tensor(2, min_ndim=3)
    if go is None or x is None or w is None:
        return None
    transposed = a.value(7)
    transposed = transposed if isinstance(transposed, bool) else False
    mask = a.value(10)
    mask = mask if isinstance(mask, list) and len(mask) == 3 else [True, True, False]

    def t(s):
        return [s[1], s[0], *s[2:]]

    flops, out = 0, 0
    if mask[0]:
        flops += conv_flop_count(go, w, x, not transposed)
        out += math.prod(x)
    if mask[1]:
        flops += conv_flop_count(t(go), t(x), t(w), False) if transposed else conv_flop_count(t(x), t(go), t(w), False)
        out += math.prod(w)
    if mask[2]:
        out += w[1] if transposed else w[0]
    return OpCost(flops, _bytes(a, out))


def _attention(q_at: int, causal_at: int | None, layout: str, backward: bool,
               causal_values: tuple = (True,)) -> Callable[[Args], OpCost | None]:
    """An attention op: query, key, value at ``q_at`` .. ``q_at + 2`` in ``layout`` "bhsd" (batch, heads, sequence,
    head dim: the scaled_dot_product ops) or "bshd" (the flash / efficient kernels' own ops); ``causal_at``: the
    argument that says causal (a value in ``causal_values``)."""

    def cost(a: Args) -> OpCost | None:
        q, k, v = (a.tensor(q_at + i, 4) for i in range(3))
        if q is None or k is None or v is None:
            return None  # variable-length (nested) attention: 3-d tensors, lengths not recorded
        if layout == "bshd":
            q, k, v = ([s[0], s[2], s[1], s[3]] for s in (q, k, v))
        b, h, sq, dq = q
        sk, dv = k[2], v[3]
        if k[3] != dq or v[2] != sk or b != k[0] or b != v[0]:
            return None
        flag = a.value(causal_at) if causal_at is not None else None
        causal = any(flag is c if isinstance(c, bool) else (type(flag) is int and flag == c) for c in causal_values)
        if backward:
            flops = sdpa_backward_flops(b, h, sq, sk, dq, dv)
            out = math.prod(q) + math.prod(k) + math.prod(v)
        else:
            flops = sdpa_flops(b, h, sq, sk, dq, dv)
            out = b * h * sq * dv
        return OpCost(flops, _bytes(a, out, q_at), causal)

    return cost


# Op name -> its cost from the recorded arguments. Argument positions are the aten schemas'.
FORMULAS: dict[str, Callable[[Args], OpCost | None]] = {
    "aten::mm": _mm,
    "aten::addmm": lambda a: _mm(a, 1),
    "aten::_scaled_mm": _mm,
    "aten::bmm": _bmm,
    "aten::baddbmm": lambda a: _bmm(a, 1),
    "aten::addbmm": lambda a: _bmm(a, 1),
    "aten::matmul": _matmul,
    "aten::linear": _linear,
    # convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
    "aten::convolution": _conv(3, 4, 5, 6, 7, 8),
    "aten::_convolution": _conv(3, 4, 5, 6, 7, 8),
    # cudnn_convolution(self, weight, padding, stride, dilation, groups, benchmark, deterministic, allow_tf32)
    "aten::cudnn_convolution": _conv(3, 2, 4, None, None, 5),
    "aten::convolution_backward": _conv_backward,
    # (query, key, value, dropout_p, is_causal, ...)
    "aten::_scaled_dot_product_flash_attention": _attention(0, 4, "bhsd", False),
    "aten::_scaled_dot_product_flash_attention_for_cpu": _attention(0, 4, "bhsd", False),
    # (query, key, value, attn_bias, compute_log_sumexp, dropout_p, is_causal, ...)
    "aten::_scaled_dot_product_efficient_attention": _attention(0, 6, "bhsd", False),
    "aten::_scaled_dot_product_cudnn_attention": _attention(0, 6, "bhsd", False),
    # (grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, ...)
    "aten::_scaled_dot_product_flash_attention_backward": _attention(1, 11, "bhsd", True),
    # (grad_out, query, key, value, attn_bias, out, logsumexp, philox_seed, philox_offset, dropout_p,
    #  grad_input_mask, is_causal, ...)
    "aten::_scaled_dot_product_efficient_attention_backward": _attention(1, 11, "bhsd", True),
    # (grad_out, query, key, value, out, logsumexp, philox_seed, philox_offset, attn_bias, cum_seq_q, cum_seq_k,
    #  max_q, max_k, dropout_p, is_causal, ...)
    "aten::_scaled_dot_product_cudnn_attention_backward": _attention(1, 14, "bhsd", True),
    # (grad_out, query, key, value, out, logsumexp, dropout_p, is_causal, ...)
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward": _attention(1, 7, "bhsd", True),
    # (query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, ...)
    "aten::_flash_attention_forward": _attention(0, 8, "bshd", False),
    # (grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, ...)
    "aten::_flash_attention_backward": _attention(1, 11, "bshd", True),
    # (query, key, value, bias, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
    #  custom_mask_type, ...): mask type 1 and 2 are causal
    "aten::_efficient_attention_forward": _attention(0, 9, "bshd", False, (1, 2)),
    # (grad_out, query, key, value, bias, out, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, logsumexp,
    #  dropout_p, philox_seed, philox_offset, custom_mask_type, ...)
    "aten::_efficient_attention_backward": _attention(1, 14, "bshd", True, (1, 2)),
}


@lru_cache(maxsize=65536)
def op_cost(name: str, dims: str | None, types: str | None, concrete: str | None) -> OpCost | None:
    """One call's cost from its recorded arguments (the JSON texts of the trace), or None: not an op this module
    counts, or arguments that do not give its FLOPs."""
    f = FORMULAS.get(name)
    if f is None or not dims:
        return None
    try:
        return f(Args(_json_list(dims), _json_list(types), _json_list(concrete)))
    except (TypeError, ValueError, IndexError, ZeroDivisionError):
        return None


# --------------------------------------------------------------------------------------------------------------
# Which calls count


def _column(ev: pd.DataFrame, name: str) -> np.ndarray:
    """A text column, or all None where the events lack it."""
    return ev[name].to_numpy() if name in ev.columns else np.full(len(ev), None, dtype=object)


def shapes_recorded(ev: pd.DataFrame) -> bool:
    """Whether any CPU op carries recorded input shapes."""
    return "in_dims" in ev.columns and bool(ev["in_dims"].notna().any())


def known_rows(ev: pd.DataFrame) -> np.ndarray:
    """Rows of the CPU ops this module has a formula for."""
    cats = ev["name"].cat.categories
    known = np.array([str(c) in FORMULAS for c in cats] + [False])
    codes = ev["name"].cat.codes.to_numpy()
    return np.flatnonzero(known[codes] & (ev["kind"].to_numpy() == int(Kind.CPU_OP)))


def leaf_rows(ev: pd.DataFrame, rows: np.ndarray) -> np.ndarray:
    """Of ``rows`` (ops on threads, nesting by time), those with no other of ``rows`` inside them on their thread
    (the same window and thread, starting at or after and ending at or before; of two equal spans the later row
    is the inner one)."""
    if not len(rows):
        return rows
    ts = ev["ts"].to_numpy()[rows]
    end = ts + ev["dur"].to_numpy()[rows]
    win = ev["window"].to_numpy()[rows].astype(np.int64)
    tid = ev["tid"].to_numpy()[rows]
    order = np.lexsort((rows, -end, ts, tid, win))
    s_ts, s_end, s_win, s_tid = ts[order], end[order], win[order], tid[order]
    has_inner = np.zeros(len(rows), bool)
    # Ops on a thread nest or are disjoint: one that holds another holds the next one to start after it.
    nxt = slice(1, None)
    same = (s_win[nxt] == s_win[:-1]) & (s_tid[nxt] == s_tid[:-1])
    inside = same & (s_ts[nxt] >= s_ts[:-1]) & (s_end[nxt] <= s_end[:-1] + 1e-3) & (s_ts[nxt] < s_end[:-1] + 1e-3)
    has_inner[order[:-1][inside]] = True
    return rows[~has_inner]


# --------------------------------------------------------------------------------------------------------------
# rank_part


def counted_calls(rank: RankTrace, steps) -> pd.DataFrame:
    """One row per counted call inside a step: row, step (its id), op, shapes, dtype, causal, flops (NaN: not
    known), bytes, ts, end, window, tid."""
    ev = rank.events
    cols = ["row", "step", "op", "shapes", "dtype", "causal", "flops", "bytes", "ts", "end", "window", "tid"]
    rows = leaf_rows(ev, known_rows(ev))
    st = steps.table
    if not len(rows) or not len(st):
        return pd.DataFrame({c: [] for c in cols})
    ts = ev["ts"].to_numpy()[rows]
    k = step_at(st["cpu_start"].to_numpy(), st["cpu_end"].to_numpy(), ts, ev["window"].to_numpy()[rows],
                st["window"].to_numpy())
    rows, ts, k = rows[k >= 0], ts[k >= 0], k[k >= 0]
    names = np.asarray(ev["name"].cat.categories, dtype=object)[ev["name"].cat.codes.to_numpy()[rows]]
    dims, types, conc = (_column(ev, c)[rows] for c in ("in_dims", "in_types", "in_concrete"))
    costs = [op_cost(n, d, t, c) for n, d, t, c in zip(names, dims, types, conc)]
    return pd.DataFrame({
        "row": rows,
        "step": st["step"].to_numpy()[k],
        "op": names,
        "shapes": [_input_shapes(d) for d in dims],
        "dtype": [_first_type(t) for t in types],
        "causal": [bool(c.causal) if c is not None else False for c in costs],
        "flops": np.array([float(c.flops) if c is not None else np.nan for c in costs], float),
        "bytes": np.array([float(c.bytes) if c is not None and c.bytes is not None else np.nan for c in costs], float),
        "ts": ts,
        "end": ts + ev["dur"].to_numpy()[rows],
        "window": ev["window"].to_numpy()[rows],
        "tid": ev["tid"].to_numpy()[rows],
    })[cols]


@lru_cache(maxsize=65536)
def _input_shapes(dims: str | None) -> str | None:
    """The tensor inputs' shapes, compactly: ``[64, 32] x [32, 96]``."""
    d = _json_list(dims)
    if d is None:
        return None
    parts = [str(s) for s in d if isinstance(s, list) and s and all(isinstance(x, int) for x in s)]
    return " x ".join(parts) if parts else None


def _first_type(types: str | None) -> str | None:
    return op_dtype(types)


def _kernel_time(rank: RankTrace, steps, calls: pd.DataFrame) -> np.ndarray:
    """Per counted call: the summed duration of the GPU kernels launched from inside it (NaN without kernels in
    the trace). A kernel belongs to the counted call on its launching op's thread whose span holds the launch."""
    ev = rank.events
    out = np.zeros(len(calls))
    gidx = steps.gpu_index
    if not len(gidx) or not len(calls):
        return np.full(len(calls), np.nan)
    kind = ev["kind"].to_numpy()[gidx]
    krows = gidx[(kind == int(Kind.KERNEL)) & (steps.gpu_step >= 0)]
    if not len(krows):
        return np.full(len(calls), np.nan)
    ops = launching_ops(ev, krows)
    has = ops >= 0
    krows, ops = krows[has], ops[has]
    op_ts, op_win, op_tid = ev["ts"].to_numpy()[ops], ev["window"].to_numpy()[ops], ev["tid"].to_numpy()[ops]
    dur = ev["dur"].to_numpy()[krows]
    c = calls.reset_index(drop=True)
    for (w, t), g in c.groupby(["window", "tid"], sort=False):
        g = g.sort_values("ts")
        sel = np.flatnonzero((op_win == w) & (op_tid == t))
        if not len(sel):
            continue
        starts, ends = g["ts"].to_numpy(), g["end"].to_numpy()
        j = np.searchsorted(starts, op_ts[sel], side="right") - 1
        ok = (j >= 0) & (op_ts[sel] <= ends[np.clip(j, 0, None)])
        np.add.at(out, g.index.to_numpy()[j[ok]], dur[sel[ok]])
    return out


def rank_part(rank: RankTrace, steps, step_table: pd.DataFrame, thresholds=None) -> RankPart:
    """The tables ``flop_ops``, ``flops_status`` and the step columns ``model_flops``, ``causal_skipped_flops``,
    ``flop_ops``, ``flop_ops_unknown``."""
    ev = rank.events
    ids = step_table["step"].to_numpy()
    n = len(ids)
    if not shapes_recorded(ev):
        nan = np.full(n, np.nan)
        return RankPart(tables={"flop_ops": _empty_ops(), "flops_status": _status(False, NO_SHAPES)},
                        columns={"model_flops": nan, "causal_skipped_flops": nan.copy(),
                                 "flop_ops": np.zeros(n, np.int64), "flop_ops_unknown": np.zeros(n, np.int64)})
    calls = counted_calls(rank, steps)
    calls["kernel_us"] = _kernel_time(rank, steps, calls)
    known = calls["flops"].notna()
    by_step = calls[known].groupby("step")
    flops = by_step["flops"].sum().reindex(ids, fill_value=0.0).to_numpy(float)
    causal = calls[known & calls["causal"].astype(bool)].groupby("step")["flops"].sum()
    columns = {
        "model_flops": flops,
        "causal_skipped_flops": causal.reindex(ids, fill_value=0.0).to_numpy(float) / 2,
        "flop_ops": by_step.size().reindex(ids, fill_value=0).to_numpy(np.int64),
        "flop_ops_unknown": calls[~known].groupby("step").size().reindex(ids, fill_value=0).to_numpy(np.int64),
    }
    reason = None if len(calls) else "no matrix multiply, convolution or attention op with shapes in the steps"
    return RankPart(tables={"flop_ops": op_groups(calls), "flops_status": _status(True, reason)}, columns=columns)


def op_groups(calls: pd.DataFrame) -> pd.DataFrame:
    """Counted calls grouped by (op, shapes, dtype, causal) over the rank's steps, the most FLOPs first."""
    if not len(calls):
        return _empty_ops()
    c = calls.assign(shapes=calls["shapes"].fillna(""), dtype=calls["dtype"].fillna(""))
    g = c.groupby(["op", "shapes", "dtype", "causal"], sort=False)
    out = g.agg(calls=("row", "size"), flops=("flops", lambda s: s.sum(min_count=1)),
                bytes=("bytes", lambda s: s.sum(min_count=len(s))),
                kernel_us=("kernel_us", lambda s: s.sum(min_count=1)), steps=("step", "nunique")).reset_index()
    for col in ("shapes", "dtype"):
        out[col] = out[col].replace("", None)
    return out.sort_values("flops", ascending=False, kind="stable", ignore_index=True)[OP_COLUMNS]


def _empty_ops() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=object) for c in OP_COLUMNS})


def _status(recorded: bool, reason: str | None) -> pd.DataFrame:
    return pd.DataFrame({"shapes_recorded": [recorded], "reason": [reason]})
