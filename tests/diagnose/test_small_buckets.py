"""small-buckets on real traces: a CPU gloo DDP capture with a 0.05 MB bucket cap fires, its twin with DDP's default
cap stays quiet (comm_captures.SPECS, made once per session), and the public NCCL trace is quiet by default and gets a
recommendation when the thresholds are lowered. Numbers are checked against the raw JSON."""

from __future__ import annotations

import math

import numpy as np
import pytest

from traceinspect.config import Config
from traceinspect.diagnose import small_buckets
from traceinspect.load.reader import load
from traceinspect.run.stages import analyze

from comm_captures import GRAD_BYTES, MIB, findings_of, profiler_steps, raw_of, x_events
from public_traces import DDP_2RANK, need, only_file, raw_events

NOCACHE = Config(use_cache=False, workers=1)


@pytest.mark.timing
def test_small_buckets_fires_on_tiny_cap_only(comm_capture, comm_report):
    rep = comm_report("tiny_buckets")
    (f,) = findings_of(rep, "small-buckets")
    assert not findings_of(comm_report("default_sync"), "small-buckets")  # the twin: same run, bucket_cap_mb=25
    raw = raw_of(comm_capture("tiny_buckets"), 0)
    # independent: the last micro-batch's gloo work in the last step, sizes from Input Dims x 4 bytes
    s = profiler_steps(raw)[-1]
    ev = [e for e in x_events(raw) if s["ts"] <= e["ts"] < s["ts"] + s["dur"]]
    last_fwd = max(e["ts"] for e in ev if e["name"] == "DistributedDataParallel.forward")
    sizes = [math.prod(e["args"]["Input Dims"][0]) * 4 for e in sorted(ev, key=lambda e: e["ts"])
             if e["name"] == "gloo:all_reduce" and e["ts"] >= last_fwd]
    grad = GRAD_BYTES
    assert sum(sizes) == grad
    e0 = next(e for e in f.evidence["per_rank"] if e["rank"] == 0)
    assert e0["buckets_per_round"] == len(sizes) >= 8
    assert e0["small_buckets_per_round"] == len(sizes)  # every one < 4 MiB
    assert e0["bucket_min_bytes"] == min(sizes) and e0["bucket_max_bytes"] == max(sizes)
    assert e0["bucket_median_bytes"] == float(np.median(sizes))
    assert e0["grad_bytes_per_round"] == grad
    assert e0["bucket_cap_mb_recorded"] == pytest.approx(0.05, rel=1e-3)
    assert e0["rounds_per_step"] == 4
    # recommendation: 0.8 MB of gradients / 6 is far below 25 MiB -> DDP's default 25, one bucket a round
    # (the whole gradient fits DDP's 1 MiB first bucket)
    assert grad < MIB
    assert e0["recommended_bucket_cap_mb"] == 25
    assert e0["calls_per_round_before"] == len(sizes) and e0["calls_per_round_after"] == 1
    assert e0["comm_time_share_below_knee"] == 1.0
    assert "bucket_cap_mb=25" in f.fix
    assert f.evidence["threshold_min_buckets_per_round"] == 8
    assert f.ranks == [0, 1]
    # Severity follows the claim (docs/findings.md): sync-every-microstep claims the redundant rounds first, so
    # small-buckets claims at most what is left of the communication time, never more than its own estimate.
    assert f.extra["estimate_us"] > 0 and 0 <= (f.time_at_stake_us or 0) <= f.extra["estimate_us"]
    assert findings_of(rep, "sync-every-microstep")


def _greedy(sizes, cap, first=MIB):
    """Independent replay of DDP's bucket assignment on indivisible pieces."""
    n, cur, limit = 0, 0, min(first, cap)
    for s in sizes:
        cur += s
        if cur >= limit:
            n, cur, limit = n + 1, 0, cap
    return n + (cur > 0)


def test_small_buckets_public_trace_quiet_by_default_and_recommends_when_thresholds_met():
    f = only_file(need(DDP_2RANK))
    raw = raw_events(f)
    sizes = [e["args"]["In msg nelems"] * 4 for e in sorted(x_events(raw), key=lambda e: e["ts"])
             if e["name"] == "record_param_comms" and e["args"].get("Collective name") == "allreduce"][-5:]
    rep = analyze(load(f, NOCACHE), NOCACHE)
    assert not findings_of(rep, "small-buckets")  # 5 buckets of 8-31 MB: not small
    cfg = NOCACHE.with_overrides(small_bucket_min_count=4, small_bucket_bytes=64 * MIB)
    (fd,) = small_buckets.RULE.check(rep, cfg)
    e = fd.evidence["per_rank"][0]
    grad = sum(sizes)
    assert e["grad_bytes_per_round"] == grad == 102228128
    want = grad / 6 / MIB  # ~16 MiB -> the floor, 25
    rec = next(c for c in (25, 32, 50, 64, 100, 128, 256, 512, 1024) if c >= want)
    assert e["recommended_bucket_cap_mb"] == rec == 25
    assert e["calls_per_round_after"] == _greedy(sizes, rec * MIB)
    assert e["bucket_cap_mb_recorded"] is None


def test_recommendation_grows_with_gradients():
    assert small_buckets.recommend_cap_mb(10 * MIB) == 25
    assert small_buckets.recommend_cap_mb(6 * 200 * MIB) == 256
    assert small_buckets.recommend_cap_mb(6 * 40 * MIB) == 50
    sizes = [3 * MIB] * 40
    assert small_buckets.simulate_buckets(sizes, 25 * MIB) == _greedy(sizes, 25 * MIB)
