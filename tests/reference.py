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
