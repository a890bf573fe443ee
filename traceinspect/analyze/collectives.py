"""The collectives of one rank: what was communicated, when it was issued, how long it ran, at what bandwidth.

``extend_rank`` (called by ``analyze_rank``) adds ``ra.tables["collectives"]`` (one row per collective),
``ra.tables["backward_passes"]`` and the per-step communication columns of ``ra.steps``. This module builds the
table (sources, joins to kernels, sizes, bandwidth) and the per-step totals; DDP's structure in it (backward
passes, gradient buckets, rounds, tails) is buckets.py's. Definitions of every number: docs/communication.md.

Where a collective comes from, by torch version and backend:

* NCCL, torch >= 1.13 with metadata: a ``record_param_comms`` CPU op carries ``Collective name``, ``In/Out msg
  nelems``, ``dtype``, ``Group size``, ``Process Group Name`` (and ``Seq`` in newer torch). The runtime call that
  launches the NCCL kernel runs inside it (same thread), and its ``correlation`` names the kernel.
* NCCL, older torch: ``record_param_comms`` has no arguments; the ``nccl:<collective>`` user annotation inside it
  is the record (sizes from ``Input Dims`` x ``Input type`` when shapes were recorded), and NCCL 2.17-era kernels
  carry ``Collective name`` / ``In msg nelems`` / ``dtype`` themselves.
* Gloo (CPU): the issuing ``c10d::<collective>_`` op on the training (or autograd) thread enqueues the work; a
  gloo worker thread runs it inside a ``gloo:<collective>`` annotation (with ``Input Dims`` / ``Input type`` when
  shapes were recorded). Issue ops and gloo annotations are paired in order, per collective name.
* NCCL kernels no CPU record claims (CPU events missing) become rows of their own, sized from the kernel's args.

Nothing here imports torch.
"""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pandas as pd

from .attribution import CategoryView, is_comm_kernel, name_mask
from .buckets import (BUCKET_COUNTS, BUCKET_SIZES, assign_phase, assign_rounds, backward_passes, bucket_columns,
                      per_step, tail_columns)
from ..config import DEFAULT, Config
from ..load.trace import Kind, RankTrace

# --------------------------------------------------------------------------------------------------------------
# Names, dtypes, bus-bandwidth factors

DTYPE_BYTES = {
    # record_param_comms / kernel "dtype" (c10::ScalarType names)
    "float": 4, "float32": 4, "half": 2, "float16": 2, "bfloat16": 2, "double": 8, "float64": 8,
    "int": 4, "int32": 4, "long": 8, "int64": 8, "short": 2, "int16": 2, "byte": 1, "uint8": 1, "char": 1,
    "int8": 1, "bool": 1, "uint16": 2, "uint32": 4, "uint64": 8, "complexfloat": 8, "complexdouble": 16,
    "complexhalf": 4, "float8_e4m3fn": 1, "float8_e5m2": 1, "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1,
    # "Input type" spellings (C++ type names)
    "c10::half": 2, "c10::bfloat16": 2, "long int": 8, "long long": 8, "int64_t": 8, "short int": 2,
    "unsigned char": 1, "signed char": 1, "int8_t": 1, "uint8_t": 1, "int32_t": 4, "c10::complex<float>": 8,
    "c10::complex<double>": 16, "c10::float8_e4m3fn": 1, "c10::float8_e5m2": 1,
    # NCCL kernel-name dtype tokens
    "f32": 4, "f16": 2, "bf16": 2, "f64": 8, "i32": 4, "u32": 4, "i64": 8, "u64": 8, "i8": 1, "u8": 1,
    "__nv_bfloat16": 2, "uint64_t": 8, "uint32_t": 4,
}

#: busbw = algbw x factor(n), as nccl-tests defines it (doc/PERFORMANCE.md there).
BUSBW_FACTOR = {
    "allreduce": lambda n: 2.0 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "allgather": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "send": lambda n: 1.0,
    "recv": lambda n: 1.0,
}

NOT_COLLECTIVES = frozenset({"wait", "", "unknown"})

COLUMNS = [
    "step", "name", "pg", "bytes", "nelems", "dtype", "group_size", "seq", "cpu_ts_us", "cpu_dur_us", "tid",
    "kernel", "kernel_ts_us", "kernel_dur_us", "ts_us", "dur_us", "algbw_gbps", "busbw_gbps", "phase", "backend",
    "source", "grad", "pass_", "round", "bucket",
]


def normalize_collective(name) -> str:
    """'c10d::allreduce_', 'nccl:all_reduce', '_allgather_base', 'AllReduce' ... -> 'allreduce', 'allgather'..."""
    if name is None or (isinstance(name, float) and math.isnan(name)):
        return "unknown"
    n = str(name).lower()
    for prefix in ("_c10d_functional::", "c10d_functional::", "c10d::", "nccl:", "gloo:", "rccl:", "ucc:", "mpi:"):
        if n.startswith(prefix):
            n = n[len(prefix):]
    n = n.strip("_").replace("_", "")
    if "reducescatter" in n:
        return "reduce_scatter"
    if "allreduce" in n:
        return "allreduce"
    if "allgather" in n:
        return "allgather"
    if "alltoall" in n or "sendrecv" in n:
        return "all_to_all"
    if "broadcast" in n:
        return "broadcast"
    if "barrier" in n:
        return "barrier"
    if n.startswith("reduce"):
        return "reduce"
    if n.startswith("gather"):
        return "gather"
    if n.startswith("scatter"):
        return "scatter"
    if n.startswith("send"):
        return "send"
    if n.startswith("recv"):
        return "recv"
    if n.startswith("wait"):
        return "wait"
    return n or "unknown"


_KERNEL_RE = re.compile(r"^(?:nccl|rccl)(?:Dev)?Kernel_([A-Za-z]+)")


def kernel_collective(kernel_name: str) -> str:
    """'ncclDevKernel_AllReduce_Sum_f32_RING_LL(...)' / 'ncclKernel_AllReduce_RING_LL_Sum_float(...)' -> 'allreduce'."""
    m = _KERNEL_RE.match(kernel_name or "")
    return normalize_collective(m.group(1)) if m else "unknown"


def dtype_bytes(dtype) -> int:
    if dtype is None or (isinstance(dtype, float) and math.isnan(dtype)):
        return -1
    return DTYPE_BYTES.get(str(dtype).strip().lower(), -1)


def busbw_factor(name: str, n) -> float:
    f = BUSBW_FACTOR.get(name)
    if f is None or n is None or not n or n < 1 or (isinstance(n, float) and math.isnan(n)):
        return float("nan")
    return float(f(int(n)))


def _dims_nelems(text) -> int:
    """Elements of the first argument of an ``Input Dims`` JSON text ([[8, 1024]] or a TensorList [[[16770]]])."""
    if not isinstance(text, (str, bytes)) or not text:
        return -1
    try:
        dims = json.loads(text)
    except ValueError:
        return -1
    if not isinstance(dims, list) or not dims:
        return -1
    first = dims[0]
    if not isinstance(first, list) or not first:
        return -1
    if all(isinstance(d, int) for d in first):
        return int(np.prod(first, dtype=np.int64))
    if all(isinstance(t, list) and all(isinstance(d, int) for d in t) for t in first):  # TensorList
        return int(sum(int(np.prod(t, dtype=np.int64)) for t in first if t))
    return -1


def _first_type(text):
    if not isinstance(text, (str, bytes)) or not text:
        return None
    try:
        types = json.loads(text)
    except ValueError:
        return None
    if isinstance(types, list) and types and isinstance(types[0], str) and types[0] and types[0] != "TensorList":
        return types[0]
    return None


# --------------------------------------------------------------------------------------------------------------
# Nesting of CPU records


def _enclosing(outer: pd.DataFrame, inner: pd.DataFrame) -> np.ndarray:
    """For each inner row, the position (in ``outer``) of the latest-starting outer row on the same (window, tid)
    that encloses it (outer.ts <= inner.ts and inner.end <= outer.end), or -1. Frames need ts, end, window, tid."""
    out = np.full(len(inner), -1, np.int64)
    if not len(outer) or not len(inner):
        return out
    o = outer.reset_index(drop=True)
    inner = inner.reset_index(drop=True)
    for (w, t), ig in inner.groupby(["window", "tid"], sort=False):
        og = o[(o["window"] == w) & (o["tid"] == t)]
        if not len(og):
            continue
        og = og.sort_values("ts", kind="stable")
        ots = og["ts"].to_numpy()
        oend = og["end"].to_numpy()
        opos = og.index.to_numpy()
        its = ig["ts"].to_numpy()
        iend = ig["end"].to_numpy()
        k = np.searchsorted(ots, its, side="right") - 1
        ok = k >= 0
        kk = np.clip(k, 0, None)
        # The latest start may be a sibling that already ended; walk back a few candidates (nesting is shallow).
        res = np.full(len(ig), -1, np.int64)
        for step_back in range(4):
            idx = kk - step_back
            valid = ok & (idx >= 0) & (res < 0)
            if not valid.any():
                break
            idx_c = np.clip(idx, 0, None)
            hit = valid & (oend[idx_c] >= iend - 1e-6)
            res[hit] = opos[idx_c[hit]]
        out[ig.index.to_numpy()] = res
    return out


def _nested(df: pd.DataFrame) -> np.ndarray:
    """For each row, whether it lies inside an earlier-starting row of the same frame on the same (window, tid)."""
    out = np.zeros(len(df), bool)
    if len(df) < 2:
        return out
    d = df.reset_index(drop=True)
    for _, g in d.groupby(["window", "tid"], sort=False):
        g = g.sort_values(["ts", "end"], ascending=[True, False], kind="stable")
        ends = g["end"].to_numpy()
        prev = np.concatenate([[-np.inf], np.maximum.accumulate(ends)[:-1]])
        out[g.index.to_numpy()] = g["end"].to_numpy() <= prev
    return out


def _frame(ev: pd.DataFrame, rows: np.ndarray) -> pd.DataFrame:
    """The given event rows as the (row, ts, end, window, tid) frame the nesting helpers take."""
    ts = ev["ts"].to_numpy()[rows]
    return pd.DataFrame(
        {"row": rows, "ts": ts, "end": ts + ev["dur"].to_numpy()[rows], "window": ev["window"].to_numpy()[rows],
         "tid": ev["tid"].to_numpy()[rows]}
    )


# --------------------------------------------------------------------------------------------------------------
# The collectives table


def collectives_table(rank: RankTrace, steps, passes: pd.DataFrame) -> pd.DataFrame:
    """One row per collective of the rank (see the module docstring for the sources; columns in COLUMNS, plus
    working columns), in issue order; ``passes`` (from ``backward_passes``) place the rows in DDP's rounds."""
    ev = rank.events
    issues = _issues(ev)
    recs = _issue_rows(ev, issues)
    lrows, krows, all_k = _launch_kernel_map(ev)
    claimed = _claim_kernels(ev, issues, recs, lrows, krows)
    _pair_gloo(ev, recs)
    recs += _unclaimed_kernel_rows(ev, [int(kr) for kr in all_k if int(kr) not in claimed], lrows, krows)
    if not recs:
        return _empty_table()
    df = _sizes_and_bandwidth(pd.DataFrame(recs), rank)
    _assign_steps(df, steps, kernels_only=not len(issues))
    assign_phase(df, passes)
    df = df.sort_values(["cpu_ts_us", "ts_us"], kind="stable", na_position="last").reset_index(drop=True)
    assign_rounds(df)
    return df


def _empty_table() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=object) for c in COLUMNS})


def _row(**fields) -> dict:
    """One collective of the table under construction; what ``fields`` leave out is not known (yet): no size,
    no kernel, no execution."""
    return {"pg": None, "nelems": -1, "dtype": None, "group_size": -1, "seq": -1, "cpu_ts_us": np.nan,
            "cpu_dur": np.nan, "tid": -1, "kernel": None, "kernel_ts_us": np.nan, "kernel_end": np.nan,
            "kernel_dur_us": np.nan, "krow": -1, "backend": None, "exec_ts": np.nan, "exec_dur": np.nan,
            "nkernels": 0, **fields}


def _issues(ev: pd.DataFrame) -> pd.DataFrame:
    """The CPU records that issue collectives, in time order: ``record_param_comms`` ops that name a collective,
    ``nccl:`` annotations outside them, and the outermost ``c10d::`` ops that enclose neither. Columns: row, ts,
    end, window, tid, source."""
    kind = ev["kind"].to_numpy()
    names = CategoryView(ev["name"])
    coll_col = CategoryView(ev["coll"])
    is_rpc = (kind == int(Kind.CPU_OP)) & name_mask(ev, lambda s: s == "record_param_comms")
    rpc_rows = np.flatnonzero(is_rpc)
    has_coll = pd.notna(coll_col[rpc_rows]) if len(rpc_rows) else np.zeros(0, bool)
    R = rpc_rows[has_coll]
    R = R[[normalize_collective(coll_col[r]) not in NOT_COLLECTIVES for r in R]] if len(R) else R
    nccl_ann = np.flatnonzero((kind == int(Kind.USER_ANNOTATION))
                              & name_mask(ev, lambda s: s.startswith(("nccl:", "rccl:"))))
    c10d = np.flatnonzero((kind == int(Kind.CPU_OP)) & name_mask(
        ev, lambda s: s.startswith(("c10d::", "_c10d_functional::")) and normalize_collective(s) not in NOT_COLLECTIVES
        and "wait" not in s))
    fR, fA, fC = _frame(ev, R), _frame(ev, nccl_ann), _frame(ev, c10d)
    if len(fA):
        inside_r = _enclosing(fR, fA) >= 0
        fA = fA[~inside_r]
        fA = fA[[normalize_collective(names[r]) not in NOT_COLLECTIVES for r in fA["row"]]] if len(fA) else fA
    if len(fC):
        inner = pd.concat([fR, fA], ignore_index=True)
        enc = _enclosing(fC, inner)
        fC = fC[~np.isin(np.arange(len(fC)), enc[enc >= 0])]
        fC = fC[~_nested(fC)]  # e.g. _c10d_functional::all_reduce around c10d::allreduce_: keep the outer one
    issues = pd.concat([fR.assign(source="record_param_comms"), fA.assign(source="nccl annotation"),
                        fC.assign(source="c10d op")], ignore_index=True)
    return issues.sort_values("ts", kind="stable").reset_index(drop=True)


class _ArgColumns:
    """Row access to the events' collective arguments (categoricals read by row, never materialized whole)."""

    def __init__(self, ev: pd.DataFrame):
        self.names, self.coll = CategoryView(ev["name"]), CategoryView(ev["coll"])
        self.dtype, self.pg = CategoryView(ev["dtype"]), CategoryView(ev["pg"])
        self.in_nel, self.out_nel = ev["in_nelems"].to_numpy(), ev["out_nelems"].to_numpy()
        self.gsize, self.seq = ev["group_size"].to_numpy(), ev["seq"].to_numpy()
        self.in_dims, self.in_types = ev["in_dims"].to_numpy(), ev["in_types"].to_numpy()

    def recorded(self, r: int, name: str, nelems: int, dtype) -> dict:
        """The fields of a collective row that come from event ``r``'s own arguments."""
        pg = self.pg[r]
        return dict(name=name, pg=pg if isinstance(pg, str) else None, nelems=nelems,
                    dtype=dtype if isinstance(dtype, str) else None, group_size=int(self.gsize[r]),
                    seq=int(self.seq[r]))


def _issue_rows(ev: pd.DataFrame, issues: pd.DataFrame) -> list[dict]:
    """One row per issue record (same order), sized from the record's own arguments."""
    a = _ArgColumns(ev)
    dur = ev["dur"].to_numpy()
    its, iwin, itid = issues["ts"].to_numpy(), issues["window"].to_numpy(), issues["tid"].to_numpy()
    recs = []
    for i, (r, src) in enumerate(zip(issues["row"].to_numpy(), issues["source"].to_numpy())):
        if src == "record_param_comms":
            nm = normalize_collective(a.coll[r])
            nel = a.out_nel[r] if nm == "allgather" else a.in_nel[r]
            dt = a.dtype[r]
        else:
            nm = normalize_collective(a.names[r])
            nel = _dims_nelems(a.in_dims[r])
            dt = _first_type(a.in_types[r])
        recs.append(_row(
            **a.recorded(r, nm, int(nel) if nel is not None and nel >= 0 else -1, dt),
            cpu_ts_us=float(its[i]), cpu_dur=float(dur[r]), window=int(iwin[i]), tid=int(itid[i]), source=src,
        ))
    return recs


def _launch_kernel_map(ev: pd.DataFrame):
    """Runtime/driver launch calls whose correlation names an NCCL/RCCL kernel: (launch rows, kernel rows, all
    NCCL/RCCL kernel rows)."""
    kind = ev["kind"].to_numpy()
    k = np.flatnonzero((kind == int(Kind.KERNEL)) & name_mask(ev, is_comm_kernel))
    if not len(k):
        return np.empty(0, np.int64), np.empty(0, np.int64), k
    corr = ev["corr"].to_numpy()
    win = ev["window"].to_numpy()
    rt = np.flatnonzero(((kind == int(Kind.RUNTIME)) | (kind == int(Kind.DRIVER))) & (corr >= 0))
    kd = pd.DataFrame({"window": win[k], "corr": corr[k], "krow": k})
    kd = kd[kd["corr"] >= 0].drop_duplicates(["window", "corr"])
    rd = pd.DataFrame({"window": win[rt], "corr": corr[rt], "lrow": rt}).drop_duplicates(["window", "corr"])
    m = rd.merge(kd, on=["window", "corr"], how="inner")
    return m["lrow"].to_numpy(), m["krow"].to_numpy(), k


def _claim_kernels(ev: pd.DataFrame, issues: pd.DataFrame, recs: list[dict], lrows: np.ndarray,
                   krows: np.ndarray) -> set:
    """Give each issue row the NCCL kernels launched inside its record (same thread); return the kernels claimed.
    The kernel's execution becomes the row's, and its args fill in sizes the record lacks."""
    claimed = set()
    names = CategoryView(ev["name"])
    kts = ev["ts"].to_numpy()
    kdur = ev["dur"].to_numpy()
    if len(lrows) and len(issues):
        enc = _enclosing(issues[["ts", "end", "window", "tid"]], _frame(ev, lrows))
        for li, i in enumerate(enc):
            if i < 0:
                continue
            kr = int(krows[li])
            rec = recs[i]
            s, e = kts[kr], kts[kr] + kdur[kr]
            if rec["krow"] < 0:
                rec.update(kernel=str(names[kr]), krow=kr, kernel_ts_us=s, kernel_end=e, kernel_dur_us=float(kdur[kr]),
                           nkernels=1)
            else:
                rec["nkernels"] += 1
                rec["kernel_ts_us"] = min(rec["kernel_ts_us"], s)
                rec["kernel_end"] = max(rec["kernel_end"], e)
            claimed.add(kr)
    in_nel = ev["in_nelems"].to_numpy()
    out_nel = ev["out_nelems"].to_numpy()
    gsize = ev["group_size"].to_numpy()
    dtype_col = CategoryView(ev["dtype"])
    pg_col = CategoryView(ev["pg"])
    for rec in recs:
        if rec["krow"] < 0:
            continue
        kr = rec["krow"]
        if rec["nkernels"] > 1:  # several kernels (coalesced): first start to last end
            rec["kernel_dur_us"] = rec["kernel_end"] - rec["kernel_ts_us"]
        rec["backend"] = "nccl"
        rec["exec_ts"], rec["exec_dur"] = rec["kernel_ts_us"], rec["kernel_dur_us"]
        # Older records lack sizes; NCCL 2.17-era kernels carry them.
        if rec["nelems"] < 0 and in_nel[kr] >= 0:
            rec["nelems"] = int(out_nel[kr] if rec["name"] == "allgather" and out_nel[kr] >= 0 else in_nel[kr])
        if rec["dtype"] is None and isinstance(dtype_col[kr], str):
            rec["dtype"] = dtype_col[kr]
        if rec["group_size"] < 0 and gsize[kr] >= 0:
            rec["group_size"] = int(gsize[kr])
        if rec["pg"] is None and isinstance(pg_col[kr], str):
            rec["pg"] = pg_col[kr]
    return claimed


def _pair_gloo(ev: pd.DataFrame, recs: list[dict]) -> None:
    """Gloo: pair the rows without a kernel with the gloo annotations, in order, per collective; the annotation's
    execution becomes the row's. With no issue rows at all, the annotations are the rows (appended)."""
    kind = ev["kind"].to_numpy()
    gloo_ann = np.flatnonzero((kind <= int(Kind.USER_ANNOTATION)) & name_mask(ev, lambda s: s.startswith("gloo:")))
    if not len(gloo_ann):
        return
    names = CategoryView(ev["name"])
    in_dims = ev["in_dims"].to_numpy()
    in_types = ev["in_types"].to_numpy()
    gdur_all = ev["dur"].to_numpy()
    g = _frame(ev, gloo_ann)
    g["name"] = [normalize_collective(names[r]) for r in g["row"]]
    g = g.sort_values("ts", kind="stable")
    pending = [i for i, rec in enumerate(recs) if rec["krow"] < 0]
    if not pending:  # no issue ops recorded: the gloo annotations are the records
        for _, x in g.iterrows():
            recs.append(_row(
                name=x["name"], nelems=_dims_nelems(in_dims[x["row"]]), dtype=_first_type(in_types[x["row"]]),
                cpu_ts_us=float(x["ts"]), window=int(x["window"]), cpu_dur=float(gdur_all[x["row"]]),
                tid=int(x["tid"]), source="gloo annotation", backend="gloo", exec_ts=float(x["ts"]),
                exec_dur=float(gdur_all[x["row"]]),
            ))
        return
    for nm, gg in g.groupby("name", sort=False):
        mine = [i for i in pending if recs[i]["name"] == nm]
        gts, grow, gwin = gg["ts"].to_numpy(), gg["row"].to_numpy(), gg["window"].to_numpy()
        j = 0
        for i in mine:
            rec = recs[i]
            # the work runs after it is issued, in the same window; earlier annotations are orphans
            while j < len(gts) and (gwin[j] != rec["window"] or gts[j] < rec["cpu_ts_us"] - 1.0):
                if gwin[j] > rec["window"]:
                    break
                j += 1
            if j >= len(gts) or gwin[j] != rec["window"]:
                continue
            rec["backend"] = "gloo"
            rec["exec_ts"] = float(gts[j])
            rec["exec_dur"] = float(gdur_all[grow[j]])
            if rec["nelems"] < 0:
                rec["nelems"] = _dims_nelems(in_dims[grow[j]])
            if rec["dtype"] is None:
                rec["dtype"] = _first_type(in_types[grow[j]])
            j += 1


def _unclaimed_kernel_rows(ev: pd.DataFrame, kernels: list[int], lrows: np.ndarray, krows: np.ndarray) -> list[dict]:
    """Rows for NCCL kernels no record claimed (CPU side missing), from the kernel's own args; the launch call,
    when the trace has it, gives the CPU time and thread."""
    a = _ArgColumns(ev)
    kts = ev["ts"].to_numpy()
    kdur = ev["dur"].to_numpy()
    win = ev["window"].to_numpy()
    tid = ev["tid"].to_numpy()
    l_of_k = dict(zip(krows.tolist(), lrows.tolist())) if len(lrows) else {}
    rows = []
    for kr in kernels:
        coll = a.coll[kr]
        nm = normalize_collective(coll) if isinstance(coll, str) else kernel_collective(str(a.names[kr]))
        lr = l_of_k.get(kr)
        rows.append(_row(
            **a.recorded(kr, nm, int(a.out_nel[kr] if nm == "allgather" and a.out_nel[kr] >= 0 else a.in_nel[kr]),
                         a.dtype[kr]),
            cpu_ts_us=float(kts[lr]) if lr is not None else np.nan,
            cpu_dur=float(kdur[lr]) if lr is not None else np.nan,
            window=int(win[kr]), tid=int(tid[lr]) if lr is not None else -1,
            source="kernel", kernel=str(a.names[kr]), kernel_ts_us=float(kts[kr]), kernel_end=float(kts[kr] + kdur[kr]),
            kernel_dur_us=float(kdur[kr]), krow=kr, backend="nccl", exec_ts=float(kts[kr]), exec_dur=float(kdur[kr]),
            nkernels=1,
        ))
    return rows


def _sizes_and_bandwidth(df: pd.DataFrame, rank: RankTrace) -> pd.DataFrame:
    """Fill in backend and group size where the rows lack them; add bytes, execution time (ts_us, dur_us) and
    algorithm and bus bandwidth."""
    df["backend"] = df["backend"].fillna(_default_backend(rank))
    # group size: from the record, else the process group's size in distributedInfo, else the world size
    pg_sizes = _pg_sizes(rank)
    gs = df["group_size"].to_numpy().astype(np.int64)
    for i in np.flatnonzero(gs < 0):
        gs[i] = pg_sizes.get(df["pg"].iat[i], pg_sizes.get(None, -1))
    df["group_size"] = gs
    size = np.array([dtype_bytes(d) for d in df["dtype"]], np.int64)
    nel = df["nelems"].to_numpy().astype(np.int64)
    df["bytes"] = np.where((nel >= 0) & (size > 0), nel * size, -1)
    df["cpu_dur_us"] = df["cpu_dur"].astype(float)
    df["ts_us"] = df["exec_ts"].astype(float)
    df["dur_us"] = df["exec_dur"].astype(float)  # the event's own duration (ts are large: end - start rounds)
    with np.errstate(divide="ignore", invalid="ignore"):
        algbw = np.where((df["bytes"] > 0) & (df["dur_us"] > 0), df["bytes"] / (df["dur_us"] * 1e-6) / 1e9, np.nan)
    df["algbw_gbps"] = algbw
    df["busbw_gbps"] = algbw * np.array([busbw_factor(n, g) for n, g in zip(df["name"], df["group_size"])])
    return df


def _default_backend(rank: RankTrace) -> str:
    b = str((rank.distributed or {}).get("backend") or "").lower()
    if "gloo" in b:
        return "gloo"
    if "nccl" in b or rank.has_gpu:
        return "nccl"
    return b or "unknown"


def _pg_sizes(rank: RankTrace) -> dict:
    out: dict = {}
    dist = rank.distributed or {}
    for pg in dist.get("pg_config") or []:
        if isinstance(pg, dict) and pg.get("pg_name") is not None and isinstance(pg.get("pg_size"), int):
            out[str(pg["pg_name"])] = pg["pg_size"]
    ws = rank.world_size or dist.get("world_size")
    if isinstance(ws, int):
        out[None] = ws
        out.setdefault("0", ws)
    return out


def _assign_steps(df: pd.DataFrame, steps, kernels_only: bool) -> None:
    """step_index / step of each row: the step whose CPU window holds its issue. Kernels whose launch is not in
    the trace were issued before it began; only a trace with no CPU-side records at all (``kernels_only``) gets
    them placed by their GPU time."""
    st = steps.table
    step_ids = st["step"].to_numpy()
    cs, ce, sw = st["cpu_start"].to_numpy(), st["cpu_end"].to_numpy(), st["window"].to_numpy()
    t = df["cpu_ts_us"].to_numpy()
    k = np.searchsorted(cs, t, side="right") - 1 if len(cs) else np.full(len(t), -1)
    kk = np.clip(k, 0, None)
    ok = (k >= 0) & (len(cs) > 0) & ~np.isnan(t)
    if len(cs):
        ok &= (t < ce[kk]) & (df["window"].to_numpy() == sw[kk])
    step_idx = np.where(ok, k, -1)
    if len(steps.gpu_index) and kernels_only:
        gpos = {int(r): i for i, r in enumerate(steps.gpu_index)}
        for i in np.flatnonzero((step_idx < 0) & (df["krow"].to_numpy() >= 0)):
            p = gpos.get(int(df["krow"].iat[i]))
            if p is not None and steps.gpu_step[p] >= 0:
                step_idx[i] = steps.gpu_step[p]
    df["step_index"] = step_idx
    df["step"] = np.where(step_idx >= 0, step_ids[np.clip(step_idx, 0, None)] if len(step_ids) else -1, -1)


# --------------------------------------------------------------------------------------------------------------
# Per-step columns

# A rank without collectives in any step: these counts are 0 and these sizes, shares and bandwidths NaN.
_NO_COMM_COUNTS = ("comm_calls", "comm_unknown_size_count", "comm_bytes", "comm_time_us", "allreduce_count", "allreduce_bytes",
                   "allreduce_time_us", *BUCKET_COUNTS)
_NO_COMM_NANS = ("comm_small_time_share", "allreduce_busbw_gbps", *BUCKET_SIZES)
_INT_COLUMNS = ("comm_calls", "comm_unknown_size_count", "allreduce_count", "backward_passes", "allreduce_rounds", "bucket_count",
                "grad_allreduce_count")


def step_columns(coll: pd.DataFrame, steps_df: pd.DataFrame, rank: RankTrace, steps, passes: pd.DataFrame,
                 config: Config = DEFAULT) -> pd.DataFrame:
    """Per-step communication numbers, one row per ra.steps row (same order): the totals here, gradient buckets,
    rounds, backward passes and tails from buckets.py. Vectorized per step (groupby)."""
    small = config.small_bucket_bytes
    out = pd.DataFrame(index=pd.Index(steps_df["step"].to_numpy()))
    c = coll[coll["step"] >= 0] if len(coll) else coll
    if len(c):
        c = c.assign(_b=c["bytes"].astype(float), _d=c["dur_us"].astype(float),
                     _known=(c["bytes"] >= 0).astype(float), _small=(c["bytes"] < small) & (c["bytes"] >= 0))
        c = c.assign(_sd=np.where(c["_small"], c["_d"], 0.0))
        _total_columns(out, c)
        bucket_columns(out, c)
    else:
        for k in _NO_COMM_COUNTS:
            out[k] = per_step(None, out.index, 0)
        for k in _NO_COMM_NANS:
            out[k] = per_step(None, out.index)
    tail_columns(out, coll, rank, steps, passes)
    out["comm_exposed_us"] = _exposed(steps_df)
    for k in _INT_COLUMNS:
        out[k] = out[k].astype(np.int64)
    return out.reset_index(drop=True)


def _sums(g: pd.DataFrame) -> pd.DataFrame:
    """Per step: calls, bytes (NaN when a size is unknown), time, time in small messages, smallest size and
    duration, group size."""
    agg = g.groupby("step").agg(n=("_b", "size"), b=("_b", "sum"), known=("_known", "min"),
                                unknown=("_known", lambda x: float((x < 1).sum())),
                                d=("_d", lambda x: x.sum(min_count=1)), sd=("_sd", "sum"),
                                bmin=("_b", "min"), dmin=("_d", "min"), g=("group_size", "first"))
    agg.loc[agg["known"] < 1, "b"] = np.nan
    return agg


def _total_columns(out: pd.DataFrame, c: pd.DataFrame) -> None:
    """Calls, bytes and time of all collectives and of the all-reduces, the share of the time spent in small
    messages, and the all-reduces' bus bandwidth, per step into ``out`` (indexed by step id)."""
    idx = out.index
    allc = _sums(c)
    out["comm_calls"] = per_step(allc["n"], idx, 0)
    out["comm_unknown_size_count"] = per_step(allc["unknown"], idx, 0)
    out["comm_bytes"] = per_step(allc["b"], idx, 0)
    out["comm_time_us"] = per_step(allc["d"].fillna(0.0), idx, 0)
    share = (allc["sd"] / allc["d"]).where((allc["known"] >= 1) & (allc["d"] > 0))
    out["comm_small_time_share"] = per_step(share, idx)
    ar = c[c["name"] == "allreduce"]
    if not len(ar):
        for k in ("allreduce_count", "allreduce_bytes", "allreduce_time_us"):
            out[k] = per_step(None, idx, 0)
        out["allreduce_busbw_gbps"] = per_step(None, idx)
        return
    a = _sums(ar)
    out["allreduce_count"] = per_step(a["n"], idx, 0)
    out["allreduce_bytes"] = per_step(a["b"], idx, 0)
    out["allreduce_time_us"] = per_step(a["d"].fillna(0.0), idx, 0)
    factor = pd.Series([busbw_factor("allreduce", g) for g in a["g"]], index=a.index)
    bw = (a["b"] / (a["d"] * 1e-6) / 1e9 * factor).where((a["bmin"] > 0) & (a["dmin"] > 0))
    out["allreduce_busbw_gbps"] = per_step(bw, idx)


def _exposed(steps_df: pd.DataFrame):
    """Communication the step waits for: GPU traces, the timeline's exposed communication (bd_comm_exposed); CPU
    traces, ``cpu_comm``: the training thread in collective calls or waiting, with nothing else to run, while a
    collective runs on gloo's threads. The tails after each backward are that same wait (the thread sits idle
    until the last all-reduce ends), so they are part of ``cpu_comm``, never added to it."""
    if "bd_comm_exposed" in steps_df:
        return steps_df["bd_comm_exposed"].to_numpy(dtype=float)
    if "cpu_comm" in steps_df:
        return np.minimum(steps_df["cpu_comm"].to_numpy(dtype=float), steps_df["cpu_step_us"].to_numpy(dtype=float))
    return np.nan


# --------------------------------------------------------------------------------------------------------------


def extend_rank(rank: RankTrace, steps, ra, config: Config = DEFAULT) -> None:
    """Add ``ra.tables["collectives"]``, ``ra.tables["backward_passes"]`` and the per-step communication columns
    to ``ra.steps``."""
    passes = backward_passes(rank, steps)
    coll = collectives_table(rank, steps, passes)
    table = coll.reindex(columns=COLUMNS) if len(coll) else _empty_table()
    if len(coll):
        for c in ("bytes", "nelems", "group_size", "seq", "step"):
            table[c] = table[c].astype(np.int64)
        table["grad"] = table["grad"].astype(bool)
    ra.tables["collectives"] = table
    ra.tables["backward_passes"] = passes.assign(
        step=steps.table["step"].to_numpy()[passes["step_index"].to_numpy().astype(int)] if len(passes) else [])
    cols = step_columns(coll, ra.steps, rank, steps, passes, config)
    for c in cols.columns:
        ra.steps[c] = cols[c].to_numpy()
