"""small-buckets: DDP all-reduces its gradients in many small buckets, so per-call latency dominates.

**Detects** the gradient all-reduces DDP issues during each backward pass (one per bucket; see
docs/communication.md for how buckets and rounds are found), per step: how many per round, and how big.

**Condition** (per rank, on the median step): at least ``small_bucket_min_count`` (8) buckets per round, and at
least ``small_bucket_share`` (50 %) of them smaller than ``small_bucket_bytes`` (4 MiB). When the trace carries no
sizes (a gloo run captured without ``record_shapes``), the bucket cap the capture metadata recorded stands in for
the sizes: it must be below ``small_bucket_bytes``.

Why these numbers: an NCCL all-reduce has a fixed cost of roughly 10-50 us per call (launch, protocol hand-shakes,
ring/tree set-up), and below a few MiB the nccl-tests bus-bandwidth curves are still climbing: below 4 MiB a call
runs at a fraction of the link's bandwidth, so its time is mostly latency. Eight calls is where that fixed cost
starts to add up to milliseconds per step, and where fewer, bigger buckets still leave DDP enough of them to
overlap with the backward pass (DDP overlaps bucket *k*'s all-reduce with the gradients of bucket *k+1*).
Where kernels (or gloo work) exist, the evidence adds the share of communication time spent in calls below
4 MiB (below the bandwidth knee).

**Why it matters**: DDP's default ``bucket_cap_mb=25`` exists for this reason: each bucket is one collective call.
A tiny cap (or a model of many tiny parameters with a small cap) turns one round of gradient sync into dozens of
latency-bound calls; the last of them cannot overlap with anything and delays the optimizer step.

**Evidence**: buckets per round, rounds per step, bucket sizes (min / median / max), gradient bytes per round,
how many are small, the thresholds, the ``bucket_cap_mb`` the capture recorded, the share of communication time
below the knee, and a recommended ``bucket_cap_mb``: total gradient bytes / 6 (aim for 4-8 buckets per round),
rounded up to 25, 32, 50, 64, 100, 128, 256, 512 or 1024 MiB and never below DDP's default 25; the expected calls per round
with it (DDP's greedy assignment replayed on the observed buckets: a bucket closes once it reaches the cap, the
first one at 1 MiB).

**Fix**::

    model = DistributedDataParallel(model, device_ids=[local_rank],
                                    bucket_cap_mb=50)   # the recommended value in the evidence
"""

from __future__ import annotations

import math
from typing import Annotated

import msgspec
import numpy as np

from ._rule import Claim, Needs, PerRank, RankHit, Rule
from .takes import Estimate
from .units import BYTES, COUNT, Bytes, MiB, Share, Us
from .units import MIB as MIB_UNIT  # this module's MIB is the bytes in one

U = msgspec.UNSET
Unset = msgspec.UnsetType


class RankEvidence(RankHit, kw_only=True):
    buckets_per_round: Annotated[int, COUNT]
    rounds_per_step: Annotated[int, COUNT]
    bucket_cap_mb_recorded: MiB | None  # what the capture recorded of DDP's settings
    first_bucket_cap_mb_recorded: MiB | None
    # from the trace's sizes (medians over the steps), or from the recorded cap where the trace has none
    bucket_min_bytes: Bytes | Unset = U
    bucket_median_bytes: Bytes | Unset = U
    bucket_max_bytes: Bytes | Unset = U
    grad_bytes_per_round: Bytes | Unset = U
    small_buckets_per_round: Annotated[int, COUNT] | Unset = U
    small_share: Share | Unset = U  # of the buckets per round
    sizes_from: str | Unset = U
    comm_time_share_below_knee: Share | None | Unset = U  # of the communication time
    # the recommendation, where the gradient's size is known
    recommended_bucket_cap_mb: Annotated[int, MIB_UNIT] | Unset = U
    calls_per_round_before: Annotated[int, COUNT] | Unset = U
    calls_per_round_after: Annotated[int, COUNT] | Unset = U
    calls_per_step_before: Annotated[int, COUNT] | Unset = U
    calls_per_step_after: Annotated[int, COUNT] | Unset = U
    per_call_floor_us: Us | None | Unset = U  # the shortest gradient all-reduce
    time_at_stake_us: Us | Unset = U  # the calls saved x the per-call floor


class Evidence(msgspec.Struct, kw_only=True):
    per_rank: list[RankEvidence]
    threshold_min_buckets_per_round: Annotated[int, COUNT]
    threshold_small_bucket_bytes: Annotated[int, BYTES]
    threshold_small_share: Share


def fix(ev: Evidence, setup=None) -> str:
    from .fixes import comm_fix

    return comm_fix(setup, _ddp_fix(ev))


def _ddp_fix(ev: Evidence) -> str:
    w = ev.per_rank[0]
    rec = w.recommended_bucket_cap_mb or None
    out = ("model = DistributedDataParallel(model, device_ids=[local_rank],\n"
           f"                                bucket_cap_mb={rec or 25})")
    if rec:
        after = w.calls_per_round_after
        out += (f"\n# {w.calls_per_round_before} -> about {after} all-reduce call{'' if after == 1 else 's'} "
                f"per backward pass")
    return out


MIB = 1024 * 1024
NICE_CAPS_MB = (25, 32, 50, 64, 100, 128, 256, 512, 1024)
# The recommended cap aims at this many buckets per round: 4-8 keep the first all-reduces overlapping the rest of
# backward while each is large enough to run near bus bandwidth.
TARGET_BUCKETS = 6
FIRST_BUCKET_BYTES = 1 * MIB  # DDP's first bucket cap after the rebuild (torch.distributed._DEFAULT_FIRST_BUCKET_BYTES)


def recommend_cap_mb(grad_bytes: float, target_buckets: int = TARGET_BUCKETS) -> int:
    """bucket_cap_mb giving about ``target_buckets`` buckets per round, rounded up to a sensible value, >= 25."""
    want = grad_bytes / max(1, target_buckets) / MIB
    for cap in NICE_CAPS_MB:
        if cap >= want:
            return cap
    return int(math.ceil(want / 256.0) * 256)


def simulate_buckets(sizes: list[float], cap_bytes: float, first_cap_bytes: float = FIRST_BUCKET_BYTES) -> int:
    """Buckets DDP would build from these (indivisible) pieces with this cap: a bucket closes once it reaches its
    limit, the first limit being ``first_cap_bytes`` (capped by the cap itself)."""
    limits = [min(first_cap_bytes, cap_bytes), cap_bytes]
    n, cur, li = 0, 0.0, 0
    for s in sizes:
        cur += s
        if cur >= limits[li]:
            n += 1
            cur = 0.0
            li = 1
    return n + (1 if cur > 0 else 0)


def _rank_evidence(ra, config, report=None) -> RankEvidence | None:
    s = ra.steps
    need = ("bucket_count", "allreduce_rounds", "grad_bytes", "small_bucket_count")
    if not all(c in s for c in need) or not len(s):
        return None
    rows = s[s["bucket_count"] > 0]
    if not len(rows):
        return None
    min_count = config.small_bucket_min_count
    small_bytes = config.small_bucket_bytes
    share_min = config.small_bucket_share
    ddp = (ra.metadata or {}).get("ddp") or {}
    cap_mb = ddp.get("bucket_cap_mb")
    count = int(np.median(rows["bucket_count"]))
    rounds = int(np.median(rows["allreduce_rounds"]))
    known = rows["grad_bytes"].notna().all()
    coll = ra.tables.get("collectives")
    grads_known = coll is not None and len(coll) and "grad" in coll  # the table marks the gradient all-reduces
    # the bucket sizes of the last round of the last step with the median count (after DDP's bucket rebuild)
    ref_step = int(rows[rows["bucket_count"] == count]["step"].iloc[-1])
    sizes = []
    if grads_known:
        g = coll[(coll["step"] == ref_step) & coll["grad"]]
        if len(g):
            g = g[g["round"] == g["round"].max()].sort_values("bucket")
            sizes = [float(b) for b in g["bytes"]]
    ev = {
        "rank": ra.rank, "steps": [int(x) for x in rows["step"]], "buckets_per_round": count,
        "rounds_per_step": rounds, "bucket_cap_mb_recorded": cap_mb,
        "first_bucket_cap_mb_recorded": ddp.get("first_bucket_cap_mb"),
    }
    if known:
        # small buckets per round, counted here with this config's threshold (the table holds every bucket)
        small_counts, small_time = [], []
        if grads_known:
            # One grouped pass over the table (a per-step loop is quadratic on long traces).
            in_rows = coll[coll["step"].isin(rows["step"])]
            grad = in_rows[in_rows["grad"].astype(bool)]
            if len(grad):
                last = grad[grad["round"] == grad.groupby("step")["round"].transform("max")]
                small_counts = (last["bytes"] < small_bytes).groupby(last["step"]).sum().astype(int).tolist()
                c = in_rows[in_rows["step"].isin(grad["step"].unique())]
                tot = c.groupby("step")["dur_us"].sum(min_count=1)
                known_all = (c["bytes"] >= 0).groupby(c["step"]).all()
                small_t = c["dur_us"].where(c["bytes"] < small_bytes, 0.0).groupby(c["step"]).sum()
                ok = tot.notna() & (tot > 0) & known_all
                small_time = (small_t[ok] / tot[ok]).astype(float).tolist()
        small = int(np.median(small_counts)) if small_counts else 0
        ev.update(
            bucket_min_bytes=float(np.median(rows["bucket_min_bytes"])),
            bucket_median_bytes=float(np.median(rows["bucket_median_bytes"])),
            bucket_max_bytes=float(np.median(rows["bucket_max_bytes"])),
            grad_bytes_per_round=float(np.median(rows["grad_bytes"])),
            small_buckets_per_round=small,
            small_share=small / count if count else 0.0,
            sizes_from="trace",
            comm_time_share_below_knee=float(np.median(small_time)) if small_time else None,
        )
        fires = count >= min_count and ev["small_share"] >= share_min
    elif cap_mb is not None and cap_mb * MIB < small_bytes:
        ev.update(sizes_from="capture metadata (bucket_cap_mb); the trace has no sizes",
                  bucket_median_bytes=cap_mb * MIB, small_share=1.0)
        fires = count >= min_count
    else:
        return None
    if not fires:
        return None
    # Recommendation
    grad = ev.get("grad_bytes_per_round") or (cap_mb * MIB * count if cap_mb else None)
    if grad:
        rec = recommend_cap_mb(grad)
        pieces = sizes if sizes and all(x > 0 for x in sizes) else [grad / count] * count
        after = simulate_buckets(pieces, rec * MIB)
        ev.update(recommended_bucket_cap_mb=rec, calls_per_round_before=count, calls_per_round_after=after,
                  calls_per_step_before=count * max(rounds, 1), calls_per_step_after=after * max(rounds, 1))
    # Time at stake: the calls saved times the per-call floor (the shortest gradient all-reduce).
    lat = None
    if grads_known:
        d = coll.loc[coll["grad"], "dur_us"].dropna()
        if len(d):
            lat = float(d.min())
    ev["per_call_floor_us"] = lat
    if lat is not None and "calls_per_step_after" in ev:
        ev["time_at_stake_us"] = max(0.0, (ev["calls_per_step_before"] - ev["calls_per_step_after"]) * lat)
    return RankEvidence(**ev)


def _summary(hits, w, report, config):
    e = w.ev
    med = e.bucket_median_bytes or None
    title = (f"{e.buckets_per_round} gradient buckets per round" + (f", median {med / 1024:.0f} KiB" if med else "")
             + f" (rank {e.rank})")
    ev = Evidence(per_rank=[h.ev for h in hits], threshold_min_buckets_per_round=config.small_bucket_min_count,
                  threshold_small_bucket_bytes=config.small_bucket_bytes,
                  threshold_small_share=config.small_bucket_share)
    return ev, title, None if e.time_at_stake_us is U else e.time_at_stake_us


RULE = Rule(
    id="small-buckets",
    title="Gradients all-reduced in many small DDP buckets",
    needs=Needs(
        steps=("step", "allreduce_rounds", "bucket_count", "bucket_min_bytes", "bucket_median_bytes",
               "bucket_max_bytes", "grad_bytes"),
        tables=("collectives",),
    ),
    claim=Claim(order=60, gpu=Estimate(("comm",)), cpu=Estimate(("comm",))),
    label="small buckets",
    thresholds=("small_bucket_min_count", "small_bucket_bytes", "small_bucket_share"),
    evidence=Evidence, fix=fix, check=PerRank(_rank_evidence, _summary, worst=lambda e: e.buckets_per_round),
    strategies=("ddp",),  # DDP's buckets and no_sync: nothing to say about another strategy
)
