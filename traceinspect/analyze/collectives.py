"""The collectives of one rank: what was communicated, when it was issued, how long it ran, at what bandwidth.

``rank_part`` (run by ``analyze_rank``) makes the tables ``collectives`` (one row per collective) and
``backward_passes``, and the per-step communication columns of the rank's step table. This module builds the
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

Names, dtypes and bus-bandwidth factors are comm_names.py's, the per-step columns comm_steps.py's (both
re-exported here). Nothing here imports torch.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .attribution import CategoryView, is_comm_kernel, name_mask
from .buckets import assign_phase, assign_rounds, backward_passes
from .comm_names import (BUSBW_FACTOR, DTYPE_BYTES, GLOO_EXECUTES, NOT_COLLECTIVES, _dims_nelems,  # noqa: F401
                         _first_type, busbw_factor, dtype_bytes, input_argument, is_collective_op, kernel_collective,
                         normalize_collective)
from .comm_exposure import exposed_per_collective, with_exposure
from .comm_steps import _total_columns, kind_table, step_columns  # noqa: F401
from .events import step_at
from .fsdp_reduce import reduction_table
from .links import launch_calls, launch_rows
from .nesting import _enclosing, _frame, _nested
from ..thresholds import DEFAULT, Thresholds
from ..load.trace import Kind, RankTrace
from .results import RankPart

COLUMNS = [
    "step", "name", "pg", "bytes", "nelems", "dtype", "group_size", "seq", "cpu_ts_us", "cpu_dur_us", "tid",
    "kernel", "kernel_ts_us", "kernel_dur_us", "ts_us", "dur_us", "algbw_gbps", "busbw_gbps", "phase", "backend",
    "source", "grad", "pass_", "round", "bucket",
]


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
        ev, lambda s: s.startswith(("c10d::", "_c10d_functional::")) and is_collective_op(s)))
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
        return _recorded(name, nelems, dtype, self.pg[r], int(self.gsize[r]), int(self.seq[r]))


def _recorded(name: str, nelems: int, dtype, pg, group_size: int, seq: int) -> dict:
    """A collective row's fields from its record's arguments (a dtype or group that is no string is not known)."""
    return dict(name=name, pg=pg if isinstance(pg, str) else None, nelems=nelems,
                dtype=dtype if isinstance(dtype, str) else None, group_size=group_size, seq=seq)


def _issue_rows(ev: pd.DataFrame, issues: pd.DataFrame) -> list[dict]:
    """One row per issue record (same order), sized from the record's own arguments (each argument read for all
    the records at once, then walked as Python values)."""
    a = _ArgColumns(ev)
    rows = issues["row"].to_numpy()
    coll, names, dtypes, pgs = (v[rows].tolist() for v in (a.coll, a.names, a.dtype, a.pg))
    in_nel, out_nel, gsize, seq = (v[rows].tolist() for v in (a.in_nel, a.out_nel, a.gsize, a.seq))
    dur = ev["dur"].to_numpy()[rows].tolist()
    its, iwin, itid = (issues[c].to_numpy().tolist() for c in ("ts", "window", "tid"))
    recs = []
    for i, (r, src) in enumerate(zip(rows.tolist(), issues["source"].to_numpy().tolist())):
        if src == "record_param_comms":
            nm = normalize_collective(coll[i])
            nel = out_nel[i] if nm == "allgather" else in_nel[i]
            dt = dtypes[i]
        else:
            nm = normalize_collective(names[i])
            nel = _dims_nelems(a.in_dims[r], input_argument(names[i], nm))
            dt = _first_type(a.in_types[r])
        recs.append(_row(
            **_recorded(nm, int(nel) if nel is not None and nel >= 0 else -1, dt, pgs[i], gsize[i], seq[i]),
            cpu_ts_us=float(its[i]), cpu_dur=float(dur[i]), window=int(iwin[i]), tid=int(itid[i]), source=src,
        ))
    return recs


def _launch_kernel_map(ev: pd.DataFrame):
    """Runtime/driver launch calls whose correlation names an NCCL/RCCL kernel: (launch rows, kernel rows, all
    NCCL/RCCL kernel rows)."""
    kind = ev["kind"].to_numpy()
    k = np.flatnonzero((kind == int(Kind.KERNEL)) & name_mask(ev, is_comm_kernel))
    if not len(k):
        return np.empty(0, np.int64), np.empty(0, np.int64), k
    kd = pd.DataFrame({"window": ev["window"].to_numpy()[k], "corr": ev["corr"].to_numpy()[k], "krow": k})
    kd = kd[kd["corr"] >= 0].drop_duplicates(["window", "corr"])
    lrow = launch_rows(launch_calls(ev), kd["window"].to_numpy(), kd["corr"].to_numpy())
    found = lrow >= 0
    lrow, krow = lrow[found], kd["krow"].to_numpy()[found]
    order = np.argsort(lrow, kind="stable")  # in the calls' order, as joining the calls to the kernels gives them
    return lrow[order], krow[order], k


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
    # Each pending row, in issue order, takes the first unused annotation of a name that can execute it (its own
    # kind first), that starts after it was issued, in the same window; earlier annotations are orphans.
    ann = {nm: (gg["ts"].to_numpy(), gg["row"].to_numpy(), gg["window"].to_numpy(), [0])
           for nm, gg in g.groupby("name", sort=False)}
    for i in sorted(pending, key=lambda i: recs[i]["cpu_ts_us"]):
        rec = recs[i]
        for ann_name in [rec["name"], *(a for a, ks in GLOO_EXECUTES.items() if rec["name"] in ks and a != rec["name"])]:
            j = _next_annotation(ann.get(ann_name), rec)
            if j is None:
                continue
            gts, grow, _, ptr = ann[ann_name]
            ptr[0] = j + 1
            rec["backend"] = "gloo"
            rec["exec_ts"] = float(gts[j])
            rec["exec_dur"] = float(gdur_all[grow[j]])
            if rec["nelems"] < 0:
                rec["nelems"] = _dims_nelems(in_dims[grow[j]])
            if rec["dtype"] is None:
                rec["dtype"] = _first_type(in_types[grow[j]])
            break


def _next_annotation(ann, rec: dict):
    """Index of the first unused gloo annotation of ``ann`` (ts, row, window, [next unused]) that starts after
    ``rec`` was issued, in its window; None if there is none (the pointer skips the orphans before it)."""
    if ann is None:
        return None
    gts, _, gwin, ptr = ann
    j = ptr[0]
    while j < len(gts) and (gwin[j] < rec["window"] or (gwin[j] == rec["window"] and gts[j] < rec["cpu_ts_us"] - 1.0)):
        j += 1
    ptr[0] = j
    if j >= len(gts) or gwin[j] != rec["window"]:
        return None
    return j


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
    missing = np.flatnonzero(gs < 0)
    if len(missing):
        pgs, fallback = df["pg"].to_numpy(), pg_sizes.get(None, -1)
        gs[missing] = [pg_sizes.get(pgs[i], fallback) for i in missing]
    df["group_size"] = gs
    size = np.array(_per_distinct(dtype_bytes, df["dtype"].tolist()), np.int64)
    nel = df["nelems"].to_numpy().astype(np.int64)
    df["bytes"] = np.where((nel >= 0) & (size > 0), nel * size, -1)
    df["cpu_dur_us"] = df["cpu_dur"].astype(float)
    df["ts_us"] = df["exec_ts"].astype(float)
    df["dur_us"] = df["exec_dur"].astype(float)  # the event's own duration (ts are large: end - start rounds)
    with np.errstate(divide="ignore", invalid="ignore"):
        algbw = np.where((df["bytes"] > 0) & (df["dur_us"] > 0), df["bytes"] / (df["dur_us"] * 1e-6) / 1e9, np.nan)
    df["algbw_gbps"] = algbw
    df["busbw_gbps"] = algbw * np.array(_per_distinct(lambda k: busbw_factor(*k), zip(df["name"], gs.tolist())))
    return df


def _per_distinct(fn, keys) -> list:
    """``[fn(k) for k in keys]``, calling ``fn`` once per distinct key: a rank's collectives repeat a few kinds,
    dtypes and group sizes over thousands of rows."""
    seen: dict = {}
    return [seen[k] if k in seen else seen.setdefault(k, fn(k)) for k in keys]


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
    step_idx = step_at(cs, ce, t, df["window"].to_numpy(), sw)
    if len(steps.gpu_index) and kernels_only:
        gpos = {int(r): i for i, r in enumerate(steps.gpu_index)}
        krow = df["krow"].to_numpy()
        for i in np.flatnonzero((step_idx < 0) & (krow >= 0)):
            p = gpos.get(int(krow[i]))
            if p is not None and steps.gpu_step[p] >= 0:
                step_idx[i] = steps.gpu_step[p]
    df["step_index"] = step_idx
    df["step"] = np.where(step_idx >= 0, step_ids[np.clip(step_idx, 0, None)] if len(step_ids) else -1, -1)


# --------------------------------------------------------------------------------------------------------------


def rank_part(rank: RankTrace, steps, step_table: pd.DataFrame, thresholds: Thresholds = DEFAULT) -> RankPart:
    """The tables ``collectives``, ``backward_passes`` and ``fsdp_reductions`` (fsdp_reduce.py), and the per-step
    communication columns."""
    passes = backward_passes(rank, steps)
    coll = collectives_table(rank, steps, passes)
    table = coll.reindex(columns=COLUMNS) if len(coll) else _empty_table()
    if len(coll):
        for c in ("bytes", "nelems", "group_size", "seq", "step"):
            table[c] = table[c].astype(np.int64)
        table["grad"] = table["grad"].astype(bool)
    basis = "gpu" if len(steps.gpu_index) else "cpu"
    table["exposed_us"] = exposed_per_collective(table, rank, steps, basis)  # comm_exposure.py
    tables = {"collectives": table, "comm_by_kind": with_exposure(kind_table(table), table), "backward_passes": passes.assign(
        step=steps.table["step"].to_numpy()[passes["step_index"].to_numpy().astype(int)] if len(passes) else []),
        "fsdp_reductions": reduction_table(rank, steps, passes, coll.assign(exposed_us=table["exposed_us"].to_numpy())
                                           if len(coll) else None)}
    cols = step_columns(coll, step_table, rank, steps, passes, thresholds)
    return RankPart(tables=tables, columns={c: cols[c].to_numpy() for c in cols.columns})
