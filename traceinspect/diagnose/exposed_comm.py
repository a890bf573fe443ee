"""exposed-comm: communication the step waits for, not hidden behind compute.

**Detects**, per step, the communication time nothing else overlaps (``comm_exposed_us``; GPU runs: the timeline's
exposed communication ``bd_comm_exposed``, when an NCCL kernel runs and no compute kernel does; CPU/gloo runs: the
training thread's time in collective calls or idle while one runs, which includes each backward pass's tail), minus
the time this rank spent *waiting for other ranks* inside collectives (``wait_us`` of the cross-rank analysis: a
straggler's cost, reported by the ``straggler`` rule, not a communication cost). See docs/communication.md.

**Condition**: the mean of that communication cost over the steps is at least ``comm_exposed_share_warning``
(10 %) of the step's wall time. Why 10 %: DDP overlaps
gradient all-reduces with the backward pass; a well-overlapped step exposes only the last bucket's all-reduce,
a few percent of the step. Above 10 % the interconnect or the bucket layout is a first-order cost.

The evidence separates two parts:

* the **tail** (``comm_tail_us``): from the end of the last backward compute to the end of the last gradient
  all-reduce. It blocks the optimizer step directly; fewer, bigger buckets and a faster interconnect shrink it,
  and ``gradient_as_bucket_view=True`` removes the copy-back after it;
* the **rest**: exposed communication elsewhere (forward-side collectives such as DDP's buffer broadcasts,
  all-reduces running while the GPU waits for the CPU to launch work). Not all of it is the interconnect's fault:
  if the GPU is idle for CPU reasons, the fix is on the CPU side (see ``gpu-idle``, ``host-sync``).

**Why it matters**: every exposed microsecond is a microsecond the accelerators compute nothing.

**Fix**, from the evidence: the buckets seen per round decide the bucket advice. With few buckets (fewer than 8;
one means the whole gradient is reduced after the backward pass, with nothing to overlap) the tail is the last
bucket's all-reduce: *smaller* buckets start the reduction during the backward pass and shorten it. With many
(8 or more, where each call's fixed cost dominates): fewer, bigger ones. When the exposed time is not the
gradient tail (other collectives), the advice names those collectives instead (a name that is not one of the
collective kinds, e.g. ``allreduce``, quoted: a name from a trace is never code)::

    model = DistributedDataParallel(model, device_ids=[local_rank],
                                    bucket_cap_mb=...,             # from the bucket count seen (see above)
                                    gradient_as_bucket_view=True,  # no copy between grads and buckets
                                    static_graph=True)             # if the graph does not change between steps
    # and never block the overlap: no loss.item() / .cpu() / print(tensor) inside the backward or accumulation
    # loop (log every N steps); with accumulation, use model.no_sync() on all micro-batches but the last.
"""

from __future__ import annotations

import re
from typing import Annotated

import msgspec
import numpy as np

from ._rule import Claim, Needs, PerRank, RankHit, Rule
from ._util import median, quoted
from .takes import Estimate
from .units import US, Bytes, Count, GBps, Share, Us

COMMON = (
    "                                gradient_as_bucket_view=True,  # no copy between grads and buckets\n"
    "                                static_graph=True)             # if the graph is the same every step\n"
    "# no loss.item() / .cpu() / print(tensor) inside backward or the\n"
    "# accumulation loop; log every N steps\n"
    "# accumulating gradients: model.no_sync() on all micro-batches but the last"
)
DDP = {"gpu": "model = DistributedDataParallel(model, device_ids=[local_rank],\n",
       "cpu": "model = DistributedDataParallel(model,                 # CPU / gloo: no device_ids\n"}
# Comment paragraphs in lines of at most 76 characters (diagnose/fixes.py).
FIX_FEW_BUCKETS = (
    "# {b:.0f} bucket(s) per round: the step waits for the last bucket's\n"
    "# all-reduce after backward (with one, the whole gradient's).\n"
    "# Smaller buckets start reducing during backward and shorten that tail\n"
    "# (default 25 MB):\n"
    "{ddp}                                bucket_cap_mb={cap},  # {why}\n" + COMMON)
FIX_MANY_BUCKETS = (
    "# {b:.0f} buckets per round and the step waits for the last one:\n"
    "# fewer, bigger buckets\n"
    "{ddp}                                bucket_cap_mb=50,\n" + COMMON)
FIX_NOT_TAIL = (
    "# the exposed time is not the gradient all-reduce tail ({tail});\n"
    "# most is in {names}:\n"
    "# overlap those collectives with compute (issue them asynchronously,\n"
    "# async_op=True, and wait later), make them smaller, or check the\n"
    "# interconnect (allreduce_busbw_gbps); bucket settings will not help\n")
MANY_BUCKETS = 8  # from this many buckets per round the per-call cost dominates (small-buckets' threshold)


KIND = re.compile(r"[a-z][a-z_]{0,31}")  # a collective kind (analyze/comm_names.py): shown as it is


class RankEvidence(RankHit, kw_only=True):
    basis: str
    exposed_comm_us_per_step: Us
    waiting_for_other_ranks_us_per_step: Us  # a straggler's cost, not communication's
    comm_cost_us_per_step: Us  # exposed less waiting
    share_of_step: Share
    tail_us_per_step: Us | None
    tails_all_rounds_us_per_step: Us | None
    rest_us_per_step: Us
    wall_us_per_step: Us
    allreduce_busbw_gbps: GBps | None
    comm_calls_per_step: Count | None
    # DDP's gradient buckets: only on a DDP rank (other strategies have no buckets to count)
    buckets_per_round: Count | None | msgspec.UnsetType = msgspec.UNSET
    grad_bytes_per_round: Bytes | None | msgspec.UnsetType = msgspec.UNSET
    comm_time_by_collective_us_per_step: dict[str, Annotated[float, US]]


class Evidence(msgspec.Struct, kw_only=True):
    per_rank: list[RankEvidence]
    threshold_share_warning: Share
    note: str | msgspec.UnsetType = msgspec.UNSET


def _cap_below(grad_bytes) -> tuple[str, str]:
    """A bucket cap that splits the observed gradient into about four buckets (MB, at least 1), and why."""
    if not grad_bytes or not np.isfinite(grad_bytes):
        return "...", "a quarter of the gradient size or less (its size is not in the trace)"
    return str(max(1, int(grad_bytes / 4 / 1e6))), f"about a quarter of the {grad_bytes / 1e6:.1f} MB gradient"


def _by_collective(ra, steps) -> dict:
    """Execution time per step of each collective kind (gradient all-reduces apart from the others)."""
    c = ra.tables.get("collectives")
    if c is None or not len(c) or "dur_us" not in c:
        return {}
    c = c[c["step"].isin(steps)]
    if not len(c):
        return {}
    kind = np.where(c["grad"].astype(bool), "gradient allreduce", c["name"].astype(str))
    g = c.assign(_k=kind).groupby("_k")["dur_us"].sum() / max(len(steps), 1)
    return {str(k): float(v) for k, v in g.sort_values(ascending=False).items()}


def fix(ev: Evidence, setup=None) -> str:
    """DDP's advice only under DDP (diagnose/fixes.py)."""
    from .fixes import comm_fix

    return comm_fix(setup, _ddp_fix(ev))


def _ddp_fix(ev: Evidence) -> str:
    """From the first rank's evidence (the rank the title names): the tail or the other collectives, and the
    buckets seen per round."""
    e = ev.per_rank[0]
    cost, tail = e.comm_cost_us_per_step, e.tails_all_rounds_us_per_step
    b = e.buckets_per_round if e.buckets_per_round is not msgspec.UNSET else None
    if tail is not None and cost > 0 and tail < 0.5 * cost:
        other = [k for k in (e.comm_time_by_collective_us_per_step or {}) if k != "gradient allreduce"]
        names = ", ".join(k if KIND.fullmatch(k) else quoted(k) for k in other[:3]) \
            or "collectives outside the backward pass"
        return FIX_NOT_TAIL.format(tail=f"{tail / 1000:.1f} ms of {cost / 1000:.1f} ms", names=names) + COMMON.split(
            "\n", 2)[2]
    ddp = DDP["cpu" if e.basis == "cpu" else "gpu"]
    if b is not None and b < MANY_BUCKETS:
        cap, why = _cap_below(e.grad_bytes_per_round or None)
        return FIX_FEW_BUCKETS.format(b=b, cap=cap, why=why, ddp=ddp)
    if b is None:  # no gradient all-reduce seen in the rounds: no bucket count to go by
        return ("# no gradient buckets seen in the trace: compare bucket_cap_mb around DDP's default\n" + ddp
                + "                                bucket_cap_mb=25,\n" + COMMON)
    return FIX_MANY_BUCKETS.format(b=b, ddp=ddp)


def _waits(report) -> dict:
    out = {}
    for w in (report.cross_rank or {}).get("wait", []) or []:
        out[(int(w["rank"]), int(w["step"]))] = float(w["wait_us"] or 0.0)
    return out


def _rank(ra, config, report):
    s = ra.steps
    if "comm_exposed_us" not in s or not len(s) or s["comm_exposed_us"].isna().all():
        return None
    if "comm_calls" in s and (s["comm_calls"] == 0).all():
        return None
    warn = config.comm_exposed_share_warning
    exposed = s["comm_exposed_us"].to_numpy(dtype=float)
    waits = _waits(report)
    wait = np.array([waits.get((ra.rank, int(st)), 0.0) for st in s["step"]])
    cost = np.maximum(0.0, np.nan_to_num(exposed) - wait)
    wall = s["wall_us"].to_numpy(dtype=float)
    share = np.where(wall > 0, cost / np.where(wall > 0, wall, 1), np.nan)
    mean_share = float(np.nanmean(share)) if np.isfinite(share).any() else 0.0
    if mean_share < warn:
        return None
    tail = s["comm_tail_us"].to_numpy(dtype=float) if "comm_tail_us" in s else np.full(len(s), np.nan)
    tail_total = s["comm_tail_total_us"].to_numpy(dtype=float) if "comm_tail_total_us" in s else tail
    tails = np.nan_to_num(tail_total)
    from .fixes import is_ddp

    ddp = {}
    if is_ddp(getattr(ra, "setup", None)):
        ddp = {"buckets_per_round": float(np.median(s["bucket_count"])) if "bucket_count" in s and len(s) else None,
               "grad_bytes_per_round": median(s["grad_bytes"]) if "grad_bytes" in s else None}
    return RankEvidence(
        rank=ra.rank,
        basis=ra.basis,
        steps=[int(x) for x, sh in zip(s["step"], share) if np.isfinite(sh) and sh >= warn],
        exposed_comm_us_per_step=float(np.nanmean(exposed)),
        waiting_for_other_ranks_us_per_step=float(np.mean(wait)),
        comm_cost_us_per_step=float(np.mean(cost)),
        share_of_step=mean_share,
        tail_us_per_step=float(np.nanmean(tail)) if np.isfinite(tail).any() else None,
        tails_all_rounds_us_per_step=float(np.nanmean(tail_total)) if np.isfinite(tail_total).any() else None,
        rest_us_per_step=float(np.mean(np.maximum(0.0, cost - np.minimum(tails, cost)))),
        wall_us_per_step=float(np.nanmean(wall)),
        allreduce_busbw_gbps=median(s["allreduce_busbw_gbps"]) if "allreduce_busbw_gbps" in s else None,
        comm_calls_per_step=float(np.mean(s["comm_calls"])) if "comm_calls" in s else None,
        comm_time_by_collective_us_per_step=_by_collective(ra, set(int(x) for x in s["step"])),
        **ddp,
    )


def _summary(hits, w, report, config):
    e = w.ev
    extra = {}
    world = report.world_size or max((ra.world_size or 1) for ra in report.ranks)
    if not (report.cross_rank or {}).get("wait") and world and world > 1:
        extra["note"] = ("the other ranks' traces are not here, so waiting for them could not be told apart from "
                         "communication: part of this time may be a straggler's")
    title = (f"{e.comm_cost_us_per_step / 1000:.1f} ms of communication per step is not overlapped "
             f"({100 * e.share_of_step:.0f} % of the step, rank {e.rank})")
    ev = Evidence(per_rank=[h.ev for h in hits], threshold_share_warning=config.comm_exposed_share_warning, **extra)
    return ev, title, e.comm_cost_us_per_step


RULE = Rule(
    id="exposed-comm",
    title="Communication not hidden behind compute",
    needs=Needs(
        steps=("step", "wall_us", "comm_exposed_us", "comm_calls", "comm_tail_us", "comm_tail_total_us",
               "allreduce_busbw_gbps"),
    ),
    claim=Claim(order=70, gpu=Estimate(("comm",)), cpu=Estimate(("comm",)), estimate_key="comm_cost_us_per_step"),
    label="exposed comm",
    thresholds=("comm_exposed_share_warning",),
    evidence=Evidence, fix=fix, check=PerRank(_rank, _summary, worst=lambda e: e.share_of_step),
    # data parallel's collectives (DDP's, FSDP's or the program's own); a pipeline's sends and receives are its
    # bubble (pipeline-bubble), tensor parallel's collectives inside the layers tp-exposed-comm's: one time, one
    # finding, one fix
    strategies=("ddp", "fsdp2", "fsdp1", "dp"),
)
