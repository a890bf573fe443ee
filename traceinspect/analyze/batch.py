"""The model's input in each step, from the recorded shapes: its batch, its tokens, and how many forward passes ran.

``rank_part`` (run by ``analyze_rank``) makes the step columns

* ``input_batch``: the leading dimension of the model's input in the step's first forward pass (NaN: not known);
* ``input_tokens``: batch x sequence of that input where it is integer token ids of shape [batch, seq] (the index
  tensor of an ``aten::embedding``), else NaN;
* ``forward_passes``: how many times the step runs that first input op with the same shapes outside a backward
  pass (each forward pass of the model runs it once), NaN where no input op was found;

and the table ``batch_inputs`` (per step: the op, its input shapes and dtype). The model's input is the first op in
the step, on the training thread and outside any backward pass (``autograd::engine::evaluate_function``), that is
an ``aten::embedding`` with integer indices, a linear, matmul or convolution op (of the ops that nest, the
outermost). What it says is read with the capture metadata in ``throughput.py``: the metadata's batch size, where
recorded, comes first. Nothing here imports torch.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .events import name_mask, step_at
from .flops import _column, _input_shapes
from .precision import _dims, op_dtype
from .nesting import _enclosing, _frame, _nested
from ..load.trace import Kind, RankTrace
from .results import RankPart

INPUT_OPS = ("aten::embedding", "aten::linear", "aten::matmul", "aten::convolution", "aten::_convolution",
             "aten::cudnn_convolution", "aten::addmm", "aten::mm")
INTEGER_TYPES = ("long int", "int", "long", "short int", "unsigned char", "signed char")
TABLE_COLUMNS = ["step", "op", "shapes", "dtype", "batch", "tokens", "passes"]


def _parse(text):
    return _dims(text)


def input_batch(op: str, dims: str | None, types: str | None) -> tuple[int | None, int | None] | None:
    """(batch, tokens) the model's input op says, or None when the op is no model input (an embedding of
    non-integer indices, shapes not recorded). ``tokens`` only for token ids of shape [batch, seq]."""
    d, t = _parse(dims), _parse(types) or []
    if not d:
        return None
    if op == "aten::embedding":  # (weight, indices)
        idx = d[1] if len(d) > 1 and isinstance(d[1], list) else None
        if not idx or (len(t) > 1 and str(t[1]).lower() not in INTEGER_TYPES):
            return None
        return int(idx[0]), (int(idx[0]) * int(idx[1]) if len(idx) == 2 else None)
    x = d[0] if isinstance(d[0], list) else None
    if op in ("aten::addmm",):  # (bias, mat1, mat2)
        x = d[1] if len(d) > 1 and isinstance(d[1], list) else None
    if not x or len(x) < 2 or not all(isinstance(v, int) for v in x):
        return None
    return int(x[0]), None


def rank_part(rank: RankTrace, steps, step_table: pd.DataFrame, thresholds=None) -> RankPart:
    """The step columns ``input_batch``, ``input_tokens``, ``forward_passes`` and the table ``batch_inputs``."""
    ids = step_table["step"].to_numpy()
    n = len(ids)
    empty = {c: np.full(n, np.nan) for c in ("input_batch", "input_tokens", "forward_passes")}
    table = pd.DataFrame({c: pd.Series(dtype=object) for c in TABLE_COLUMNS})
    ev = rank.events
    if "in_dims" not in ev.columns or not ev["in_dims"].notna().any() or not len(steps.table):
        return RankPart(tables={"batch_inputs": table}, columns=empty)
    kind = ev["kind"].to_numpy()
    cand = np.flatnonzero((kind == int(Kind.CPU_OP)) & name_mask(ev, lambda s: s in INPUT_OPS)
                          & ev["in_dims"].notna().to_numpy())
    if steps.main_tid is not None:
        cand = cand[ev["tid"].to_numpy()[cand] == steps.main_tid]
    bwd = np.flatnonzero((kind == int(Kind.CPU_OP))
                         & name_mask(ev, lambda s: s.startswith("autograd::engine::evaluate_function")))
    if len(cand) and len(bwd):
        cand = cand[_enclosing(_frame(ev, bwd), _frame(ev, cand)) < 0]
    if len(cand):  # of nesting input ops (linear over addmm, convolution over _convolution), the outermost
        cand = cand[~_nested(_frame(ev, cand))]
    st = steps.table
    ts = ev["ts"].to_numpy()
    k = step_at(st["cpu_start"].to_numpy(), st["cpu_end"].to_numpy(), ts[cand], ev["window"].to_numpy()[cand],
                st["window"].to_numpy())
    cand, k = cand[k >= 0], k[k >= 0]
    names = np.asarray(ev["name"].cat.categories, dtype=object)[ev["name"].cat.codes.to_numpy()[cand]]
    dims, types = _column(ev, "in_dims")[cand], _column(ev, "in_types")[cand]
    rows = []
    for j in np.unique(k):
        at = np.flatnonzero(k == j)
        at = at[np.argsort(ts[cand[at]], kind="stable")]
        first = next((i for i in at if input_batch(names[i], dims[i], types[i]) is not None), None)
        if first is None:
            continue
        batch, tokens = input_batch(names[first], dims[first], types[first])
        passes = int(sum(1 for i in at if names[i] == names[first] and dims[i] == dims[first]))
        rows.append({"step": int(st["step"].to_numpy()[j]), "op": names[first], "shapes": _input_shapes(dims[first]),
                     "dtype": op_dtype(types[first]), "batch": batch, "tokens": tokens, "passes": passes})
    if not rows:
        return RankPart(tables={"batch_inputs": table}, columns=empty)
    table = pd.DataFrame(rows, columns=TABLE_COLUMNS)
    by = table.set_index("step")
    cols = {
        "input_batch": by["batch"].astype(float).reindex(ids).to_numpy(float),
        "input_tokens": by["tokens"].astype(float).reindex(ids).to_numpy(float),
        "forward_passes": by["passes"].astype(float).reindex(ids).to_numpy(float),
    }
    return RankPart(tables={"batch_inputs": table}, columns=cols)
