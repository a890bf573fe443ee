"""The optimizer and GradScaler work of each step: what ran inside ``Optimizer.step`` / ``zero_grad`` and the AMP
ops, the facts the ``optimizer-not-fused`` and ``gradscaler-with-bf16`` rules read.

``rank_part`` (run by ``analyze_rank``) makes the tables:

* ``amp_ops``: per step, GradScaler ops (count, CPU time, kernels they launched and their GPU time);
* ``optimizer``: per step, ``Optimizer.step#*`` and ``Optimizer.zero_grad#*`` calls and what ran inside them: CPU
  ops (foreach, fused, per-parameter, zeroing) on the same thread, and the kernels they launched; ``truncated``
  counts the calls that end after the last step of their window (their last events may be missing from the file);
* ``fused_optimizer_ops``: every fused optimizer op (``aten::_fused_adam_``, ``_fused_adamw_``, ``_fused_sgd_``,
  ``_fused_adagrad_``...) anywhere in the file, steps or not, with ``in_step`` (inside a step's CPU window). Where
  the profiler's step boundary falls inside ``optimizer.step(closure)`` (Lightning), the fused update of a step
  runs in the next step's window, or after the last one.

Kernels belong to the span whose thread made the runtime call that launched them, inside the span's time. The
columns are defined in docs/rules-precision.md. Nothing here imports torch.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from .attribution import name_strings
from .events import step_at
from .links import launch_calls, launch_rows
from ..load.trace import Kind, RankTrace
from .results import RankPart

GRADSCALER_OPS = ("aten::_amp_foreach_non_finite_check_and_unscale_", "aten::_amp_update_scale_",
                  "aten::_amp_non_finite_check_and_unscale_")
OPT_STEP_PREFIX = "Optimizer.step#"
OPT_ZERO_PREFIX = "Optimizer.zero_grad#"

AMP_COLUMNS = ["step", "name", "count", "cpu_us", "kernel_count", "gpu_us"]
OPT_COLUMNS = ["step", "kind", "optimizer", "calls", "cpu_us", "ops", "foreach_ops", "fused_ops",
               "single_tensor_ops", "zero_ops", "kernel_count", "multi_tensor_kernels", "gpu_us", "truncated"]
FUSED_COLUMNS = ["name", "count", "in_step"]
_FUSED_OPT_OP = re.compile(r"^aten::_fused_(adam|adamw|sgd|adagrad|rmsprop|adadelta|adamax|nadam|radam)_?$")

_MULTI_TENSOR = re.compile(r"multi_tensor_apply|fusedoptimizer|multitensor|fused_adam|fused_sgd", re.I)


def rank_part(rank: RankTrace, steps, step_table: pd.DataFrame | None = None, thresholds=None) -> RankPart:
    """The tables ``amp_ops``, ``optimizer`` and ``fused_optimizer_ops``."""
    return RankPart(tables={"amp_ops": _amp_table(rank.events, steps), "optimizer": _optimizer_table(rank.events, steps),
                            "fused_optimizer_ops": _fused_ops(rank.events, steps)})


def _fused_ops(ev: pd.DataFrame, steps) -> pd.DataFrame:
    """Fused optimizer ops anywhere in the file, by name and whether inside a step's CPU window."""
    kind = ev["kind"].to_numpy()
    cats = ev["name"].cat.categories
    want = [i for i, c in enumerate(cats) if _FUSED_OPT_OP.match(str(c))]
    rows = np.flatnonzero((kind == int(Kind.CPU_OP)) & np.isin(ev["name"].cat.codes.to_numpy(), want)) if want else []
    if not len(rows):
        return pd.DataFrame({c: pd.Series(dtype=object) for c in FUSED_COLUMNS})
    df = pd.DataFrame({"name": name_strings(ev, rows), "in_step": _step_of(steps, ev["ts"].to_numpy()[rows]) >= 0})
    return df.groupby(["name", "in_step"], sort=True).size().rename("count").reset_index()[FUSED_COLUMNS]


def _step_of(steps, rows_ts: np.ndarray) -> np.ndarray:
    """Step index (into steps.table) whose CPU window holds each timestamp, or -1."""
    return step_at(steps.table["cpu_start"].to_numpy(), steps.table["cpu_end"].to_numpy(), rows_ts)


def kernels_inside(ev: pd.DataFrame, spans: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For CPU span rows (annotations / ops): number and summed GPU time of the kernels (and memsets) launched by
    runtime calls that run inside each span on the span's thread, and how many of them are multi-tensor kernels
    (``multi_tensor_apply``: one launch for a list of tensors, what foreach / fused optimizers launch)."""
    n = len(spans)
    cnt = np.zeros(n, np.int64)
    gpu = np.zeros(n)
    multi = np.zeros(n, np.int64)
    if not n:
        return cnt, gpu, multi
    kind = ev["kind"].to_numpy()
    ts, dur, tid, win, corr = (ev[c].to_numpy() for c in ("ts", "dur", "tid", "window", "corr"))
    g = np.flatnonzero((kind == int(Kind.KERNEL)) | (kind == int(Kind.MEMSET)))
    if not len(g):
        return cnt, gpu, multi
    cats = ev["name"].cat.categories
    mlut = np.array([bool(_MULTI_TENSOR.search(str(c))) for c in cats] + [False])
    rt = launch_rows(launch_calls(ev), win[g], corr[g])
    linked = rt >= 0
    if not linked.any():
        return cnt, gpu, multi
    r, g = rt[linked], g[linked]
    launch = pd.DataFrame({"t": tid[r], "w": win[r], "x": ts[r], "gdur": dur[g],
                           "multi": mlut[ev["name"].cat.codes.to_numpy()[g]]})
    for (w, t), grp in launch.groupby(["w", "t"], sort=False):
        mine = np.flatnonzero((win[spans] == w) & (tid[spans] == t))
        if not len(mine):
            continue
        order = np.argsort(grp["x"].to_numpy(), kind="stable")
        xs = grp["x"].to_numpy()[order]
        cum = np.concatenate([[0.0], np.cumsum(grp["gdur"].to_numpy()[order])])
        cm = np.concatenate([[0], np.cumsum(grp["multi"].to_numpy()[order])])
        a = np.searchsorted(xs, ts[spans[mine]], side="left")
        b = np.searchsorted(xs, ts[spans[mine]] + dur[spans[mine]], side="right")
        cnt[mine] = b - a
        gpu[mine] = cum[b] - cum[a]
        multi[mine] = cm[b] - cm[a]
    return cnt, gpu, multi


def _amp_table(ev: pd.DataFrame, steps) -> pd.DataFrame:
    kind = ev["kind"].to_numpy()
    cats = ev["name"].cat.categories
    want = [i for i, c in enumerate(cats) if str(c) in GRADSCALER_OPS]
    if not want:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in AMP_COLUMNS})
    rows = np.flatnonzero((kind == int(Kind.CPU_OP)) & np.isin(ev["name"].cat.codes.to_numpy(), want))
    k = _step_of(steps, ev["ts"].to_numpy()[rows])
    rows, k = rows[k >= 0], k[k >= 0]
    cnt, gpu, _ = kernels_inside(ev, rows)
    df = pd.DataFrame({"step": steps.table["step"].to_numpy()[k], "name": name_strings(ev, rows),
                       "cpu_us": ev["dur"].to_numpy()[rows], "kernel_count": cnt, "gpu_us": gpu})
    g = df.groupby(["step", "name"], sort=True).agg(count=("cpu_us", "size"), cpu_us=("cpu_us", "sum"),
                                                     kernel_count=("kernel_count", "sum"), gpu_us=("gpu_us", "sum"))
    return g.reset_index()[AMP_COLUMNS]


def _optimizer_table(ev: pd.DataFrame, steps) -> pd.DataFrame:
    """Optimizer.step / zero_grad annotations per step, with the CPU ops that ran inside them on their thread."""
    kind = ev["kind"].to_numpy()
    cats = [str(c) for c in ev["name"].cat.categories]
    codes = ev["name"].cat.codes.to_numpy()
    is_span = (kind == int(Kind.USER_ANNOTATION)) | (kind == int(Kind.CPU_OP))
    step_codes = [i for i, c in enumerate(cats) if c.startswith(OPT_STEP_PREFIX)]
    zero_codes = [i for i, c in enumerate(cats) if c.startswith(OPT_ZERO_PREFIX)]
    spans = np.flatnonzero(is_span & np.isin(codes, step_codes + zero_codes))
    if not len(spans):
        return pd.DataFrame({c: pd.Series(dtype=object) for c in OPT_COLUMNS})
    k = _step_of(steps, ev["ts"].to_numpy()[spans])
    spans, k = spans[k >= 0], k[k >= 0]
    if not len(spans):
        return pd.DataFrame({c: pd.Series(dtype=object) for c in OPT_COLUMNS})
    counts = _ops_inside(ev, spans, cats)
    cnt, gpu, multi = kernels_inside(ev, spans)
    names = [cats[c] for c in codes[spans]]
    # The last step of each window: a call that outlives it was cut by the end of the recording.
    st = steps.table
    last_end = st.groupby("window")["cpu_end"].max()
    span_end = ev["ts"].to_numpy()[spans] + ev["dur"].to_numpy()[spans]
    truncated = span_end > last_end.reindex(ev["window"].to_numpy()[spans]).to_numpy()
    df = pd.DataFrame({
        "step": steps.table["step"].to_numpy()[k].astype(np.int64),
        "kind": ["step" if n.startswith(OPT_STEP_PREFIX) else "zero_grad" for n in names],
        "optimizer": [n.split("#", 1)[1].rsplit(".", 1)[0] for n in names],
        "calls": 1, "cpu_us": ev["dur"].to_numpy()[spans], **counts, "kernel_count": cnt,
        "multi_tensor_kernels": multi, "gpu_us": gpu, "truncated": truncated.astype(np.int64),
    })
    g = df.groupby(["step", "kind", "optimizer"], sort=True).sum(numeric_only=True).reset_index()
    return g[OPT_COLUMNS]


def _ops_inside(ev: pd.DataFrame, spans: np.ndarray, cats: list[str]) -> dict:
    """Per span: CPU ops that ran inside it on its thread (``ops``), and how many of them were foreach, fused,
    per-parameter (``_single_tensor_``) and zeroing ops."""
    kind = ev["kind"].to_numpy()
    codes = ev["name"].cat.codes.to_numpy()
    ts, dur, tid, win = (ev[c].to_numpy() for c in ("ts", "dur", "tid", "window"))
    # Per op name, once: which kind of optimizer op it is.
    flags = {
        "ops": np.ones(len(cats) + 1, bool),
        "foreach_ops": np.array([c.startswith("aten::_foreach_") and c != "aten::_foreach_zero_" for c in cats] + [False]),
        "fused_ops": np.array([c.startswith("aten::_fused_") for c in cats] + [False]),
        "single_tensor_ops": np.array(["_single_tensor_" in c for c in cats] + [False]),
        # zero_grad(set_to_none=False) zeroes each grad with zero_ (fill_ runs inside it) or one _foreach_zero_.
        "zero_ops": np.array([c in ("aten::zero_", "aten::_foreach_zero_") for c in cats] + [False]),
        "fill_ops": np.array([c == "aten::fill_" for c in cats] + [False]),
    }
    cpu = np.flatnonzero(kind == int(Kind.CPU_OP))
    counts = {f: np.zeros(len(spans), np.int64) for f in flags}
    span_df = pd.DataFrame({"w": win[spans], "t": tid[spans], "j": np.arange(len(spans))})
    cpu_win, cpu_tid = win[cpu], tid[cpu]  # the ops of the spans' (window, thread)s only are read, in row order
    for (w, tt), g in span_df.groupby(["w", "t"], sort=False):
        rows = cpu[(cpu_win == w) & (cpu_tid == tt)]
        if not len(rows):
            continue
        rows = rows[np.argsort(ts[rows], kind="stable")]
        t = ts[rows]
        j = g["j"].to_numpy()
        a = np.searchsorted(t, ts[spans[j]], side="left")
        b = np.searchsorted(t, ts[spans[j]] + dur[spans[j]], side="right")
        c = codes[rows]
        for f, lut in flags.items():
            cum = np.concatenate([[0], np.cumsum(lut[c])])
            counts[f][j] = cum[b] - cum[a]
    # A span that is itself a CPU op counts itself among the ops inside; take it out.
    counts["ops"] -= (kind[spans] == int(Kind.CPU_OP)).astype(np.int64)
    counts["zero_ops"] = np.where(counts["zero_ops"] > 0, counts["zero_ops"], counts.pop("fill_ops"))
    return counts
