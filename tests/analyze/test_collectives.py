"""The collectives table and the per-step communication columns.

Every number is checked against an independent computation on the raw JSON (stdlib ``json``, plain Python), on
real traces: the public NCCL traces in ../shared (skipped when absent) and CPU gloo captures made by the real
workload under torchrun (conftest's ``comm_capture``, settings in comm_captures.SPECS). Tests marked CONSTRUCTED build tiny event tables by
hand to pin exact semantics; they are not traces of anything.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict

import numpy as np
import pandas as pd
import pytest

from traceinspect.analyze.rank import analyze_rank
from traceinspect.run.stages import analyze
from traceinspect.analyze.buckets import _period
from traceinspect.analyze.collectives import busbw_factor, dtype_bytes, kernel_collective, normalize_collective
from traceinspect.config import Config
from traceinspect.load.reader import load
from traceinspect.load.trace import Kind, RankTrace

from public_traces import DDP_2RANK, DIFF_CONTROL, DIFF_TEST, need, only_file, raw_events

NOCACHE = Config(use_cache=False, workers=1)


# --------------------------------------------------------------------------------------------------------------
# Independent reference helpers (raw JSON only)


def _x(raw):
    return [e for e in raw["traceEvents"] if e.get("ph") == "X"]


def _steps(ev):
    return sorted((e for e in ev if e.get("cat") == "user_annotation" and re.fullmatch(r"ProfilerStep#\d+", e["name"])),
                  key=lambda e: e["ts"])


def _step_of(steps, ts):
    for s in steps:
        if s["ts"] <= ts < s["ts"] + s["dur"]:
            return int(s["name"].split("#")[1])
    return None


def _ref_busbw(nbytes, dur_us, n, name):
    algbw = nbytes / (dur_us * 1e-6) / 1e9  # GB/s = 1e9 B/s
    factor = {"allreduce": 2 * (n - 1) / n, "all_to_all": (n - 1) / n, "broadcast": 1.0}[name]
    return algbw * factor


def _table(path):
    rep = analyze(load(path, NOCACHE), NOCACHE)
    assert len(rep.ranks) == 1
    return rep.ranks[0]


# --------------------------------------------------------------------------------------------------------------
# Public NCCL 2.17 DDP trace (rank 0 of 2): 5 gradient buckets a step, plus DDP's buffer broadcasts


@pytest.fixture(scope="module")
def ddp():
    f = only_file(need(DDP_2RANK))
    return raw_events(f), _table(f)


def _ddp_reference(raw):
    """Per step: the all-reduce records (bytes, kernel) joined the way Kineto links them: the launch call's
    External id is the record_param_comms op's, its correlation names the kernel."""
    ev = _x(raw)
    steps = _steps(ev)
    launches = {}
    for e in ev:
        if e["cat"] == "cuda_runtime" and "LaunchKernel" in e["name"]:
            launches.setdefault(e["args"]["External id"], []).append(e["args"]["correlation"])
    kernels = {e["args"]["correlation"]: e for e in ev if e["cat"] == "kernel"}
    out = defaultdict(list)
    for e in sorted(ev, key=lambda e: e["ts"]):
        if e["name"] != "record_param_comms" or e["args"].get("Collective name") in (None, "wait"):
            continue
        a = e["args"]
        size = {"Float": 4, "Long": 8}[a["dtype"]]
        ks = [kernels[c] for c in launches.get(a["External id"], []) if c in kernels and "nccl" in kernels[c]["name"]]
        assert len(ks) == 1
        out[_step_of(steps, e["ts"])].append({
            "name": a["Collective name"], "bytes": a["In msg nelems"] * size, "group": a["Group size"],
            "kernel": ks[0], "tid": e["tid"],
        })
    return out


def test_ddp_public_allreduce_count_sizes_and_busbw(ddp):
    raw, ra = ddp
    ref = _ddp_reference(raw)
    coll = ra.tables["collectives"]
    assert sorted(ref) == [4, 5, 6]
    for step, recs in ref.items():
        mine = coll[coll["step"] == step].sort_values("cpu_ts_us")
        ar_ref = [r for r in recs if r["name"] == "allreduce"]
        ar = mine[mine["name"] == "allreduce"]
        assert len(ar_ref) == 5 and len(ar) == 5
        assert ar["bytes"].tolist() == [r["bytes"] for r in ar_ref]
        # In msg nelems x 4, summed independently: one round of gradients
        assert ar["bytes"].sum() == sum(r["bytes"] for r in ar_ref)
        for (_, row), r in zip(ar.iterrows(), ar_ref):
            k = r["kernel"]
            assert row["kernel"] == k["name"]
            assert row["kernel_dur_us"] == pytest.approx(k["dur"], abs=1e-3)
            assert row["busbw_gbps"] == pytest.approx(_ref_busbw(r["bytes"], k["dur"], r["group"], "allreduce"), rel=1e-6)
            assert row["algbw_gbps"] == pytest.approx(r["bytes"] / k["dur"] / 1e3, rel=1e-6)
            assert row["group_size"] == 2 and row["backend"] == "nccl" and row["dtype"] == "Float"
        bc_ref = [r for r in recs if r["name"] == "broadcast"]
        bc = mine[mine["name"] == "broadcast"]
        assert bc["bytes"].tolist() == [r["bytes"] for r in bc_ref] == [53120 * 4, 53 * 8]
        assert bc["busbw_gbps"].tolist() == pytest.approx(
            [_ref_busbw(r["bytes"], r["kernel"]["dur"], 2, "broadcast") for r in bc_ref], rel=1e-6)


def test_ddp_public_phase_and_bucket_columns(ddp):
    raw, ra = ddp
    ev = _x(raw)
    ref = _ddp_reference(raw)
    coll = ra.tables["collectives"]
    # Independent phase: the all-reduces run inside an autograd engine node; the broadcasts inside DDP.forward.
    bwd = [e for e in ev if e["name"].startswith("autograd::engine::evaluate_function")]
    for step, recs in ref.items():
        mine = coll[coll["step"] == step]
        assert set(mine.loc[mine["name"] == "allreduce", "phase"]) == {"backward"}
        assert set(mine.loc[mine["name"] == "broadcast", "phase"]) == {"forward"}
        assert mine.loc[mine["name"] == "allreduce", "grad"].all()
        srow = ra.steps[ra.steps["step"] == step].iloc[0]
        sizes = [r["bytes"] for r in recs if r["name"] == "allreduce"]
        assert srow["allreduce_count"] == 5 and srow["bucket_count"] == 5
        assert srow["allreduce_rounds"] == 1 and srow["backward_passes"] == 1
        assert srow["grad_bytes"] == sum(sizes)
        assert srow["bucket_min_bytes"] == min(sizes) and srow["bucket_max_bytes"] == max(sizes)
        assert srow["bucket_median_bytes"] == sorted(sizes)[2]
        assert srow["allreduce_bytes"] == sum(sizes)
        # comm tail: last all-reduce kernel end - end of the last compute kernel the backward launched
        s = next(x for x in _steps(ev) if x["name"] == f"ProfilerStep#{step}")
        in_step = [b for b in bwd if s["ts"] <= b["ts"] < s["ts"] + s["dur"]]
        tid = in_step[0]["tid"]
        first, last_end = min(b["ts"] for b in in_step), max(b["ts"] + b["dur"] for b in in_step)
        launch_ts = {e["args"]["correlation"]: e for e in ev if e["cat"] == "cuda_runtime" and "correlation" in e["args"]}
        kends = [k["ts"] + k["dur"] for k in ev if k["cat"] == "kernel" and "nccl" not in k["name"]
                 and (l := launch_ts.get(k["args"].get("correlation"))) is not None
                 and l["tid"] == tid and first <= l["ts"] <= last_end]
        ar_end = max(r["kernel"]["ts"] + r["kernel"]["dur"] for r in recs if r["name"] == "allreduce")
        assert srow["comm_tail_us"] == pytest.approx(max(0.0, ar_end - max(kends)), abs=1e-3)
        assert srow["comm_tail_us"] > 0


# --------------------------------------------------------------------------------------------------------------
# Public 8-rank trace (older torch: record_param_comms without args, sizes from nccl:* Input Dims)

TYPE_BYTES = {"float": 4, "int": 4, "long int": 8, "c10::Half": 2, "c10::BFloat16": 2}


def _annotation_reference(raw):
    """nccl:* annotations per step; bytes = prod(Input Dims[0]) x size(Input type[0]); the kernel is the one
    launched (cudaLaunchKernel on the same thread) inside the annotation."""
    ev = _x(raw)
    steps = _steps(ev)
    kernels = {e["args"]["correlation"]: e for e in ev if e["cat"] == "kernel" and "nccl" in e["name"].lower()}
    launches = [e for e in ev if e["cat"] == "cuda_runtime" and e["args"].get("correlation") in kernels]
    out = defaultdict(list)
    for a in sorted(ev, key=lambda e: e["ts"]):
        if a["cat"] != "user_annotation" or not a["name"].startswith("nccl:"):
            continue
        dims = a["args"]["Input Dims"][0]
        ks = [kernels[l["args"]["correlation"]] for l in launches
              if l["tid"] == a["tid"] and a["ts"] <= l["ts"] <= a["ts"] + a["dur"]]
        out[_step_of(steps, a["ts"])].append({
            "name": {"nccl:all_reduce": "allreduce", "nccl:all_to_all": "all_to_all"}[a["name"]],
            "bytes": math.prod(dims) * TYPE_BYTES[a["args"]["Input type"][0]],
            "kernel": ks[0] if ks else None,
        })
    return out


@pytest.mark.parametrize("folder", [DIFF_CONTROL, DIFF_TEST], ids=["control-8rank", "test-2rank"])
def test_annotation_sourced_collectives(folder):
    f = only_file(need(folder))
    raw = raw_events(f)
    n = raw["distributedInfo"]["world_size"]
    ref = _annotation_reference(raw)
    ra = _table(f)
    coll = ra.tables["collectives"]
    assert set(coll.loc[coll["step"] >= 0, "step"]) == set(ref)
    for step, recs in ref.items():
        mine = coll[coll["step"] == step].sort_values("cpu_ts_us")
        assert mine["name"].tolist() == [r["name"] for r in recs]
        assert mine["bytes"].tolist() == [r["bytes"] for r in recs]
        assert (mine["name"] == "all_to_all").sum() >= 6 and (mine["name"] == "allreduce").sum() == 3
        for (_, row), r in zip(mine.iterrows(), recs):
            assert row["kernel_dur_us"] == pytest.approx(r["kernel"]["dur"])
            assert row["busbw_gbps"] == pytest.approx(_ref_busbw(r["bytes"], r["kernel"]["dur"], n, r["name"]), rel=1e-6)
            assert row["group_size"] == n
        srow = ra.steps[ra.steps["step"] == step].iloc[0]
        assert srow["allreduce_count"] == 3
        assert srow["grad_bytes"] == sum(r["bytes"] for r in recs if r["name"] == "allreduce")


def test_kernels_launched_before_the_trace_are_rows_without_a_step():
    """diff_test holds 4 NCCL kernels (3 AllReduce, 1 SendRecv) whose launch calls are not in the trace (issued before it began)."""
    f = only_file(need(DIFF_TEST))
    raw = raw_events(f)
    ev = _x(raw)
    launched = {e["args"]["correlation"] for e in ev if e["cat"] == "cuda_runtime" and "correlation" in e["args"]}
    orphans = [k for k in ev if k["cat"] == "kernel" and "nccl" in k["name"] and k["args"]["correlation"] not in launched]
    assert len(orphans) == 4
    coll = _table(f).tables["collectives"]
    rows = coll[coll["source"] == "kernel"].sort_values("kernel_ts_us")
    orphans.sort(key=lambda k: k["ts"])
    assert rows["kernel_ts_us"].tolist() == pytest.approx([k["ts"] for k in orphans])
    kind = {"AllReduce": "allreduce", "SendRecv": "all_to_all"}
    assert rows["name"].tolist() == [kind[k["name"].split("_")[1]] for k in orphans]
    assert rows["kernel_dur_us"].tolist() == [k["dur"] for k in orphans]
    assert (rows["step"] == -1).all() and rows["cpu_ts_us"].isna().all()


# --------------------------------------------------------------------------------------------------------------
# Real CPU gloo captures (torchrun, 2 ranks): deep model, 0.05 MB buckets, 4 micro-batches without no_sync


def _gloo_reference(raw):
    """Per step: micro-batches (DDP.forward annotations), gloo:all_reduce work (Input Dims x 4 bytes, duration),
    and per micro-batch the end of the last backward op on the training thread and of the last gloo work."""
    ev = _x(raw)
    steps = _steps(ev)
    out = {}
    for s in steps:
        a, b = s["ts"], s["ts"] + s["dur"]
        inside = [e for e in ev if a <= e["ts"] < b]
        fwd = sorted(e["ts"] for e in inside if e["name"] == "DistributedDataParallel.forward")
        gloo = sorted((e for e in inside if e["name"] == "gloo:all_reduce"), key=lambda e: e["ts"])
        bwd = [e for e in inside if e["name"].startswith("autograd::engine::evaluate_function") and e["tid"] == s["tid"]]
        last_bwd_end = max(e["ts"] + e["dur"] for e in bwd if e["ts"] >= fwd[-1])
        last_gloo_end = max(e["ts"] + e["dur"] for e in gloo)
        out[int(s["name"].split("#")[1])] = {
            "micro": len(fwd),
            "bytes": [math.prod(e["args"]["Input Dims"][0]) * 4 for e in gloo],
            "types": {e["args"]["Input type"][0] for e in gloo},
            "durs": [e["dur"] for e in gloo],
            "tail": max(0.0, last_gloo_end - last_bwd_end),
        }
    return out


def test_gloo_capture_buckets_rounds_and_durations(comm_capture):
    folder = comm_capture("tiny_buckets")
    rep = analyze(load(folder, NOCACHE), NOCACHE)
    assert len(rep.ranks) == 2
    # deep model: 48 x Linear(64, 64) + Linear(64, 2), fp32
    params = 48 * (64 * 64 + 64) + 64 * 2 + 2
    for ra in rep.ranks:
        raw = raw_events(next(p for p in folder.iterdir() if p.name.startswith(f"rank{ra.rank}.")))
        ref = _gloo_reference(raw)
        coll = ra.tables["collectives"]
        assert (ra.metadata["ddp"]["bucket_cap_mb"]) == pytest.approx(0.05, rel=1e-3)
        for step, r in ref.items():
            assert r["types"] == {"float"}
            mine = coll[coll["step"] == step]
            srow = ra.steps[ra.steps["step"] == step].iloc[0]
            per_round = len(r["bytes"]) // r["micro"]
            assert r["micro"] == 4 and len(r["bytes"]) == 4 * per_round
            assert len(mine) == len(r["bytes"]) and set(mine["backend"]) == {"gloo"}
            assert sorted(mine["bytes"]) == sorted(r["bytes"])
            assert sorted(mine["dur_us"]) == pytest.approx(sorted(r["durs"]))
            assert srow["backward_passes"] == r["micro"] == srow["allreduce_rounds"]
            assert srow["bucket_count"] == per_round
            assert srow["grad_allreduce_count"] == len(r["bytes"])
            assert srow["grad_bytes"] == params * 4 == sum(r["bytes"]) / r["micro"]
            assert srow["redundant_grad_bytes"] == 3 * params * 4
            assert srow["bucket_max_bytes"] == max(r["bytes"]) and srow["bucket_min_bytes"] == min(r["bytes"])
            assert srow["comm_tail_us"] == pytest.approx(r["tail"], abs=1e-3)
            # each round: one bucket per DDP bucket, the same sizes in the same order every micro-batch
            rounds = [g["bytes"].tolist() for _, g in mine.sort_values("cpu_ts_us").groupby("round")]
            assert len(rounds) == 4 and all(x == rounds[0] for x in rounds)
            assert (mine["phase"] == "backward").all() and mine["grad"].all()
            assert mine["algbw_gbps"].tolist() == pytest.approx(
                (mine["bytes"] / (mine["dur_us"] * 1e-6) / 1e9).tolist())


# --------------------------------------------------------------------------------------------------------------
# CONSTRUCTED: names, sizes, factors (pure functions, no trace)


def test_collective_names():
    assert normalize_collective("c10d::allreduce_") == "allreduce"
    assert normalize_collective("nccl:all_reduce") == "allreduce"
    assert normalize_collective("gloo:all_reduce") == "allreduce"
    assert normalize_collective("_allgather_base") == "allgather"
    assert normalize_collective("allgather_into_tensor_coalesced") == "allgather"
    assert normalize_collective("_reduce_scatter_base") == "reduce_scatter"
    assert normalize_collective("reduce_scatter_tensor") == "reduce_scatter"
    assert normalize_collective("all_to_all") == "all_to_all" == normalize_collective("alltoall_base")
    assert normalize_collective("broadcast") == "broadcast"
    assert normalize_collective("reduce") == "reduce"
    assert normalize_collective("wait") == "wait"
    assert kernel_collective("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)") == "allreduce"
    assert kernel_collective("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)") == "allreduce"
    assert kernel_collective("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(x)") == "reduce_scatter"
    assert kernel_collective("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)") == "all_to_all"
    assert kernel_collective("ncclDevKernel_AllGather_RING_LL(x)") == "allgather"
    assert kernel_collective("void at::native::vectorized_elementwise_kernel") == "unknown"


def test_dtype_sizes_and_busbw_factors():
    for name, size in [("Float", 4), ("float32", 4), ("Half", 2), ("BFloat16", 2), ("Double", 8), ("Int", 4),
                       ("Long", 8), ("Byte", 1), ("Char", 1), ("Bool", 1), ("int8", 1), ("uint8", 1),
                       ("c10::BFloat16", 2), ("long int", 8)]:
        assert dtype_bytes(name) == size, name
    assert dtype_bytes(None) == -1 and dtype_bytes("mystery") == -1
    # nccl-tests: allreduce 2(n-1)/n; reduce_scatter, allgather, alltoall (n-1)/n; broadcast, reduce 1
    for n in (2, 4, 8):
        assert busbw_factor("allreduce", n) == pytest.approx(2 * (n - 1) / n)
        for nm in ("reduce_scatter", "allgather", "all_to_all"):
            assert busbw_factor(nm, n) == pytest.approx((n - 1) / n)
        assert busbw_factor("broadcast", n) == busbw_factor("reduce", n) == 1.0
    assert math.isnan(busbw_factor("barrier", 8)) and math.isnan(busbw_factor("allreduce", -1))


def test_round_period():
    assert _period([5, 3, 5, 3, 5, 3]) == 2
    assert _period([5, 3, 2]) == 3
    assert _period([5, 3, 2, 5, 3]) == 5
    assert _period([7, 7, 7, 7]) == 1


# --------------------------------------------------------------------------------------------------------------
# CONSTRUCTED event tables: the joins and the round logic on a few hand-written events


def events(rows: list[dict]) -> pd.DataFrame:
    """CONSTRUCTED: a RankTrace.events table from dicts (defaults: -1 / None)."""
    cols = {c: [] for c in ("kind", "name", "pid", "tid", "ts", "dur", "corr", "ext", "stream", "bytes",
                            "in_nelems", "out_nelems", "group_size", "seq", "dtype", "coll", "pg",
                            "in_dims", "in_types", "window")}
    for r in rows:
        for c in cols:
            default = None if c in ("dtype", "coll", "pg", "in_dims", "in_types") else (0 if c == "window" else -1)
            cols[c].append(r.get(c, default))
    df = pd.DataFrame(cols)
    df["kind"] = df["kind"].astype(np.uint8)
    for c in ("ts", "dur"):
        df[c] = df[c].astype(float)
    for c in ("name", "dtype", "coll", "pg"):
        df[c] = df[c].astype("category")
    df["window"] = df["window"].astype(np.int16)
    return df


MAIN, AUTOGRAD = 1, 2


def _nccl_collective(ts, nelems, corr, tid=AUTOGRAD, seq=-1, kernel_ts=None, kernel_dur=100.0, launch=True):
    rows = [dict(kind=Kind.CPU_OP, name="record_param_comms", tid=tid, ts=ts, dur=20, coll="allreduce",
                 in_nelems=nelems, out_nelems=nelems, dtype="Float", group_size=2, pg="0", seq=seq, ext=corr)]
    if launch:
        rows.append(dict(kind=Kind.RUNTIME, name="cuLaunchKernelEx", tid=tid, ts=ts + 5, dur=5, corr=corr, ext=corr))
    if kernel_ts is not None:
        rows.append(dict(kind=Kind.KERNEL, name="ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)", pid=0, tid=7,
                         ts=kernel_ts, dur=kernel_dur, corr=corr, stream=7))
    return rows


def _micro_batch(t0, sizes, corr0, kernels=True):
    """CONSTRUCTED: one forward (a main-thread op) then a backward pass on the autograd thread issuing one
    all-reduce per size, each inside an AccumulateGrad node, plus one compute kernel per node."""
    rows = [dict(kind=Kind.USER_ANNOTATION, name="DistributedDataParallel.forward", tid=MAIN, ts=t0, dur=50)]
    t = t0 + 100
    for i, n in enumerate(sizes):
        rows.append(dict(kind=Kind.CPU_OP, name="autograd::engine::evaluate_function: AddmmBackward0", tid=AUTOGRAD,
                         ts=t, dur=40))
        rows.append(dict(kind=Kind.RUNTIME, name="cudaLaunchKernel", tid=AUTOGRAD, ts=t + 10, dur=5, corr=corr0 + 500 + i))
        if kernels:
            rows.append(dict(kind=Kind.KERNEL, name="gemm", pid=0, tid=8, ts=t + 20, dur=30, corr=corr0 + 500 + i))
        rows.append(dict(kind=Kind.CPU_OP, name="autograd::engine::evaluate_function: torch::autograd::AccumulateGrad",
                         tid=AUTOGRAD, ts=t + 50, dur=40))
        rows += _nccl_collective(t + 55, n, corr0 + i, kernel_ts=(t + 70) if kernels else None)
        t += 100
    return rows, t


def _rank(rows, steps, rank=0, world=2) -> RankTrace:
    ann = [dict(kind=Kind.USER_ANNOTATION, name=f"ProfilerStep#{s}", tid=MAIN, ts=a, dur=b - a) for s, a, b in steps]
    return RankTrace(rank=rank, world_size=world, files=["constructed"], events=events(ann + rows),
                     distributed={"backend": "nccl", "rank": rank, "world_size": world})


def test_constructed_two_micro_batches_make_two_rounds():
    rows, t = _micro_batch(0, [1000, 2000, 3000], 100)
    more, t2 = _micro_batch(t + 100, [1000, 2000, 3000], 200)
    ra = analyze_rank(_rank(rows + more, [(0, -10, t2 + 1000)]), NOCACHE)
    s = ra.steps.iloc[0]
    assert s["backward_passes"] == 2 and s["allreduce_rounds"] == 2 and s["bucket_count"] == 3
    assert s["grad_bytes"] == 6000 * 4 and s["redundant_grad_bytes"] == 6000 * 4
    c = ra.tables["collectives"]
    assert c["round"].tolist() == [0, 0, 0, 1, 1, 1] and c["bucket"].tolist() == [0, 1, 2, 0, 1, 2]
    assert (c["phase"] == "backward").all() and c["kernel"].notna().all()
    # tail of the last pass: last all-reduce kernel end (t2-100+70+100) - last backward gemm end (t2-100+20+30)
    assert s["comm_tail_us"] == pytest.approx((t2 - 100 + 170) - (t2 - 100 + 50))


def test_constructed_one_gpu_records_without_kernels_still_give_buckets():
    """A 1-GPU DDP run writes record_param_comms but may launch no NCCL kernel: counts and sizes remain."""
    rows, t = _micro_batch(0, [4096] * 10, 100, kernels=False)
    ra = analyze_rank(_rank(rows, [(0, -10, t + 100)], world=1), NOCACHE)
    s = ra.steps.iloc[0]
    assert s["bucket_count"] == 10 and s["grad_bytes"] == 10 * 4096 * 4
    c = ra.tables["collectives"]
    assert c["kernel"].isna().all() and c["dur_us"].isna().all() and c["busbw_gbps"].isna().all()
    assert math.isnan(s["comm_tail_us"])


def test_constructed_gloo_pairing_in_order_and_outermost_issue_op():
    """CONSTRUCTED: gloo issue ops on the training thread, work on a gloo thread. A work item that starts before
    any issue op (left over from before the step) is not paired; a functional collective wrapping c10d's op is
    one collective."""
    G = 9
    rows = [
        dict(kind=Kind.USER_ANNOTATION, name="DistributedDataParallel.forward", tid=MAIN, ts=0, dur=50),
        dict(kind=Kind.USER_ANNOTATION, name="gloo:all_reduce", tid=G, ts=60, dur=5,
             in_dims="[[7]]", in_types='["float"]'),  # orphan
        dict(kind=Kind.CPU_OP, name="autograd::engine::evaluate_function: torch::autograd::AccumulateGrad",
             tid=MAIN, ts=100, dur=50),
        dict(kind=Kind.CPU_OP, name="c10d::allreduce_", tid=MAIN, ts=110, dur=10),
        dict(kind=Kind.USER_ANNOTATION, name="gloo:all_reduce", tid=G, ts=115, dur=30,
             in_dims="[[100]]", in_types='["float"]'),
        dict(kind=Kind.CPU_OP, name="aten::detach", tid=MAIN, ts=250, dur=5),  # the backward pass is over
        dict(kind=Kind.CPU_OP, name="_c10d_functional::all_reduce", tid=MAIN, ts=300, dur=20),
        dict(kind=Kind.CPU_OP, name="c10d::allreduce_", tid=MAIN, ts=305, dur=10),
        dict(kind=Kind.USER_ANNOTATION, name="gloo:all_reduce", tid=G, ts=310, dur=40,
             in_dims="[[25]]", in_types='["c10::BFloat16"]'),
    ]
    rt = _rank(rows, [(0, -10, 1000)])
    rt.distributed = {"backend": "gloo", "rank": 0, "world_size": 2}
    ra = analyze_rank(rt, NOCACHE)
    c = ra.tables["collectives"]
    assert c["ts_us"].tolist() == [115.0, 310.0] and c["dur_us"].tolist() == [30.0, 40.0]
    assert c["bytes"].tolist() == [400, 50] and c["cpu_ts_us"].tolist() == [110.0, 300.0]
    assert c["phase"].tolist() == ["backward", "other"] and c["grad"].tolist() == [True, False]
    assert set(c["backend"]) == {"gloo"}
    assert c["algbw_gbps"].tolist() == pytest.approx([400 / 30e-6 / 1e9, 50 / 40e-6 / 1e9])
    assert c["busbw_gbps"].tolist() == pytest.approx([400 / 30e-6 / 1e9, 50 / 40e-6 / 1e9])  # n=2: 2(n-1)/n = 1
