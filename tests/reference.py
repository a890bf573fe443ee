"""Independent reference computations the tests hold the program's numbers against: plain Python over raw trace
events, sharing no code with traceinspect."""

from __future__ import annotations


def union_us(intervals, a: float = float("-inf"), b: float = float("inf")) -> float:
    """Length of the union of (start, end) intervals clipped to [a, b], by sorting and merging."""
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted((max(s, a), min(e, b)) for s, e in intervals if min(e, b) > max(s, a)):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total


# Runtime calls that block the CPU until the GPU is done (stream / event / device synchronize, synchronous copies).
SYNC_NAMES = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaMemcpy", "cudaMemcpy2D",
              "cuCtxSynchronize", "cuStreamSynchronize", "cuEventSynchronize", "hipDeviceSynchronize",
              "hipStreamSynchronize", "hipEventSynchronize", "hipMemcpy", "hipMemcpyWithStream")


def launch_wait_us(events: list, window: tuple[float, float], cpu: tuple[float, float],
                   issue_latency_us: float = 10.0) -> float:
    """Time of ``window`` in which the GPU waited for a launch: inside the step's CPU span ``cpu``, no GPU activity
    running, none issued and not started (its launch call returned more than ``issue_latency_us`` before), the CPU
    neither blocked in a sync (or a pageable copy's launch) nor waiting for the DataLoader. ``events``: a trace's
    complete events as parsed JSON."""
    a, b = max(window[0], cpu[0]), min(window[1], cpu[1])
    if b <= a:
        return 0.0
    gpu = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    calls = {e["args"]["correlation"]: e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")
             and "correlation" in e.get("args", {})}
    pageable = {e["args"].get("correlation") for e in gpu if e.get("cat") == "gpu_memcpy" and "Pageable" in e["name"]}
    other = [(e["ts"], e["ts"] + e["dur"]) for e in gpu]
    for e in gpu:
        c = calls.get(e["args"].get("correlation"))
        if c is not None and c["ts"] + c["dur"] + issue_latency_us < e["ts"]:
            other.append((c["ts"] + c["dur"] + issue_latency_us, e["ts"]))
    for e in events:
        cat, name = e.get("cat"), str(e.get("name", ""))
        if (cat in ("cuda_runtime", "cuda_driver") and (name.split("_v")[0] in SYNC_NAMES
                                                        or e.get("args", {}).get("correlation") in pageable)) \
                or (cat == "user_annotation" and name.startswith("enumerate(DataLoader)")):
            other.append((e["ts"], e["ts"] + e["dur"]))
    return (b - a) - union_us(other, a, b)


# What a CUDA graph of the model's forward and backward leaves on the CPU (docs/metrics.md, ``cpu_capturable_us``).
_KEPT_PREFIXES = ("Optimizer.step#", "Optimizer.zero_grad#", "enumerate(DataLoader)", "nccl:", "nccl_", "gloo:",
                  "gloo_", "c10d:", "c10d_")
_KEPT_NAMES = ("torch::autograd::AccumulateGrad", "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad",
               "aten::item", "aten::_local_scalar_dense", "record_param_comms")
_WRAPPER_NAMES = ("CompiledFunction", "CompiledFunctionBackward",
                  "autograd::engine::evaluate_function: CompiledFunctionBackward",
                  "autograd::engine::evaluate_function: CompiledFunction")
_GRAPH_LAUNCHES = ("cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch")


def issuing_tids(events: list) -> set:
    """The training thread (it holds the ProfilerStep annotations) and every thread whose runtime call launched a
    GPU activity (its correlation id is a kernel's, copy's or memset's)."""
    corr = {e["args"]["correlation"] for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
            and "correlation" in e.get("args", {})}
    tids = {e["tid"] for e in events if e.get("cat") == "user_annotation"
            and str(e.get("name", "")).startswith("ProfilerStep#")}
    tids |= {e["tid"] for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")
             and e.get("args", {}).get("correlation") in corr}
    return tids


def capturable_intervals(events: list, cpu: tuple[float, float], tids: set) -> list[tuple[float, float]]:
    """The intervals of the CPU window ``cpu`` that a CUDA graph of the model takes off the CPU: per elementary
    interval between the issuing threads' event boundaries, the most important event open decides (kept work, then
    compiled code launching its kernels one by one, then compiled wrappers, then any other event); an interval with
    no event open is capturable only between two capturable ones."""
    a, b = cpu
    mine = [e for e in events if e.get("tid") in tids and e.get("dur") is not None
            and e.get("cat") in ("cpu_op", "user_annotation", "cuda_runtime", "cuda_driver")
            and not str(e.get("name", "")).startswith("ProfilerStep#") and e["ts"] < b and e["ts"] + e["dur"] > a]
    pageable = {e["args"].get("correlation") for e in events if e.get("cat") == "gpu_memcpy"
                and "Pageable" in str(e.get("name", ""))}
    graph_starts = [(e["tid"], e["ts"]) for e in mine if e.get("cat") in ("cuda_runtime", "cuda_driver")
                    and str(e["name"]).split("_v")[0] in _GRAPH_LAUNCHES]

    def rank_of(e) -> int:  # 0 kept, 1 compiled code launching one by one, 2 wrapper, 3 other work
        name, cat = str(e["name"]), e.get("cat")
        if cat in ("cuda_runtime", "cuda_driver"):
            base = name.split("_v")[0]
            blocked = base in SYNC_NAMES or e.get("args", {}).get("correlation") in pageable
            return 0 if base in _GRAPH_LAUNCHES or blocked else 3
        if name.startswith(_KEPT_PREFIXES) or name in _KEPT_NAMES:
            return 0
        if name.startswith("## Call CompiledFxGraph"):
            replays = any(t == e["tid"] and e["ts"] <= ts <= e["ts"] + e["dur"] for t, ts in graph_starts)
            return 0 if replays else 1
        if name.startswith(("Torch-Compiled Region", "TorchDynamo Cache Lookup")) or name in _WRAPPER_NAMES:
            return 2
        return 3

    edges = sorted({a, b} | {min(max(e["ts"], a), b) for e in mine} | {min(max(e["ts"] + e["dur"], a), b)
                                                                      for e in mine})
    opens = sorted(((max(e["ts"], a), min(e["ts"] + e["dur"], b), rank_of(e)) for e in mine))
    labels, i, active = [], 0, []
    for lo, hi in zip(edges, edges[1:]):
        while i < len(opens) and opens[i][0] <= lo:
            active.append(opens[i])
            i += 1
        active = [o for o in active if o[1] > lo]
        best = min((o[2] for o in active), default=None)
        labels.append((lo, hi, None if best is None else best in (1, 3)))
    out = []
    for k, (lo, hi, cap) in enumerate(labels):
        if cap is None:  # nothing open: the model's Python only between two capturable intervals
            before = labels[k - 1][2] if k > 0 else False
            after = labels[k + 1][2] if k + 1 < len(labels) else False
            cap = before is True and after is True
        if cap and hi > lo:
            out.append((lo, hi))
    return out


def launch_wait_within_us(events: list, window: tuple[float, float], cpu: tuple[float, float],
                          within: list[tuple[float, float]], issue_latency_us: float = 10.0) -> float:
    """``launch_wait_us`` restricted to the intervals ``within``: |within| less the part of it the GPU was busy,
    had work queued, or the CPU was blocked or waiting for data (``launch_wait_us``'s ``other``)."""
    a, b = max(window[0], cpu[0]), min(window[1], cpu[1])
    if b <= a:
        return 0.0
    inside = union_us(within, a, b)
    total_wait = launch_wait_us(events, window, cpu, issue_latency_us)
    # wait = (b - a) - |other|; wait inside = |within| - |within and other| = |within| - (|within| + |other| -
    # |within or other|) = |within or other| - |other|, with |other| = (b - a) - wait.
    other = (b - a) - total_wait
    return max(_union_with_other(events, window, cpu, within, issue_latency_us) - other, 0.0) if inside else 0.0


def _union_with_other(events, window, cpu, within, issue_latency_us) -> float:
    """|within U other| in the step: ``launch_wait_us`` over the events plus ``within`` as one more busy set."""
    a, b = max(window[0], cpu[0]), min(window[1], cpu[1])
    extra = [{"cat": "kernel", "ts": s, "dur": e - s, "args": {}, "name": "within"} for s, e in within]
    return (b - a) - launch_wait_us(list(events) + extra, window, cpu, issue_latency_us)
