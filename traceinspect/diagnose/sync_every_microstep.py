"""sync-every-microstep: with gradient accumulation, DDP all-reduces the gradients after every micro-batch.

**Detects** optimizer steps (profiler steps) that run several backward passes (gradient accumulation over k
micro-batches) and in which DDP's gradient all-reduces are issued in more than one of those passes: k rounds of
gradient sync per optimizer step instead of one. A round is the set of gradient all-reduces issued during one
backward pass; see docs/communication.md.

**Condition** (per rank): in at least half of the steps, ``allreduce_rounds >= 2`` (with ``backward_passes >= 2``
when the trace shows the backward passes). No threshold on size: every extra round sends the whole gradient
again, for nothing; only the last micro-batch's all-reduce is needed, since the gradients of the earlier ones
accumulate locally in ``.grad`` and are averaged by the last all-reduce. Its claim is the extra rounds' exposed
time (their tails, which block the next micro-batch).

**Why it matters**: ``(k - 1) / k`` of the gradient traffic is redundant, and on every micro-batch the backward
pass ends waiting for its last bucket. ``model.no_sync()`` exists for exactly this: it tells DDP not to reduce,
and the gradients accumulate locally until the one synchronized backward.

At world size 1 nothing is sent (NCCL launches no kernel): the title says so and counts only DDP's bucket work.

**Evidence**: world size, backward passes and rounds per step, buckets per round, gradient bytes per round, bytes per step
that need not be sent (``(rounds - 1) x gradient bytes``), communication time of the redundant rounds, their
exposed tails, and what the capture recorded (``accumulation_steps``, ``no_sync``).

**Fix**::

    for i, (x, y) in enumerate(micro_batches):
        last = i == len(micro_batches) - 1
        with contextlib.nullcontext() if last else model.no_sync():
            loss = loss_fn(model(x), y) / len(micro_batches)
            loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
"""

from __future__ import annotations

from typing import Annotated

import msgspec
import numpy as np

from ._rule import Claim, Fixed, Needs, PerRank, RankHit, Rule
from ._util import median
from .takes import Estimate
from .units import COUNT, Bytes, Share, Us

FIX = (
    "for i, (x, y) in enumerate(micro_batches):\n"
    "    last = i == len(micro_batches) - 1\n"
    "    with contextlib.nullcontext() if last else model.no_sync():\n"
    "        loss = loss_fn(model(x), y) / len(micro_batches)\n"
    "        loss.backward()\n"
    "optimizer.step()\n"
    "optimizer.zero_grad(set_to_none=True)"
)


class RankEvidence(RankHit, kw_only=True):
    world_size: Annotated[int, COUNT] | None
    backward_passes_per_step: Annotated[int, COUNT] | None
    allreduce_rounds_per_step: Annotated[int, COUNT]
    buckets_per_round: Annotated[int, COUNT]
    grad_bytes_per_round: Bytes | None
    redundant_bytes_per_step: Bytes | None  # (rounds - 1) x the gradient bytes
    redundant_comm_time_us_per_step: Us | None
    redundant_exposed_us_per_step: Us | None  # the extra rounds' tails
    redundant_exposed_share: Share | None  # of the step
    accumulation_steps_recorded: Annotated[int, COUNT] | None  # what the capture recorded
    no_sync_recorded: bool | None


class Evidence(msgspec.Struct, kw_only=True):
    per_rank: list[RankEvidence]
    threshold_rounds: Annotated[int, COUNT]


def _rank(ra, config, report):
    s = ra.steps
    if "allreduce_rounds" not in s or not len(s):
        return None
    has_passes = (s["backward_passes"] > 0).any()
    multi = (s["allreduce_rounds"] >= 2) & ((s["backward_passes"] >= 2) if has_passes else True)
    if multi.sum() * 2 < len(s) or not multi.any():
        return None
    sel = s[multi]
    tails_extra = (sel["comm_tail_total_us"] - sel["comm_tail_us"]).to_numpy(dtype=float)
    coll = ra.tables.get("collectives")
    redundant_time = None
    if coll is not None and len(coll) and "grad" in coll:
        g = coll[coll["grad"] & coll["step"].isin(sel["step"])]
        if len(g) and g["dur_us"].notna().any():
            last_round = g.groupby("step")["round"].transform("max")
            redundant_time = float(g.loc[g["round"] != last_round, "dur_us"].sum()) / len(sel)
    extra_exposed = median(tails_extra)
    meta = ra.metadata or {}
    return RankEvidence(
        rank=ra.rank,
        world_size=ra.world_size or report.world_size,
        steps=[int(x) for x in sel["step"]],
        backward_passes_per_step=int(np.median(sel["backward_passes"])) if has_passes else None,
        allreduce_rounds_per_step=int(np.median(sel["allreduce_rounds"])),
        buckets_per_round=int(np.median(sel["bucket_count"])),
        grad_bytes_per_round=median(sel["grad_bytes"]),
        redundant_bytes_per_step=median(sel["redundant_grad_bytes"]),
        redundant_comm_time_us_per_step=redundant_time,
        redundant_exposed_us_per_step=extra_exposed,
        redundant_exposed_share=(extra_exposed / float(np.median(sel["wall_us"])))
        if extra_exposed is not None else None,
        accumulation_steps_recorded=meta.get("accumulation_steps"),
        no_sync_recorded=meta.get("no_sync"),
    )


def _summary(hits, w, report, config):
    e = w.ev
    k, b = e.allreduce_rounds_per_step, e.redundant_bytes_per_step
    if e.world_size == 1:
        # One process: the all-reduces send nothing (NCCL launches no kernel); DDP's bucket work remains.
        what = (f" (world size 1: nothing is sent, but DDP still runs {k - 1} extra bucket rounds"
                + (f" over {b / 1e6:.1f} MB of gradients" if b else "") + " per step)")
    else:
        what = f" ({b / 1e6:.1f} MB per step sent for nothing)" if b else ""
    title = f"Gradients are all-reduced {k} times per optimizer step instead of once{what} (rank {e.rank})"
    return Evidence(per_rank=[h.ev for h in hits], threshold_rounds=2), title, e.redundant_exposed_us_per_step


def _costliest(e: RankEvidence) -> tuple:
    return e.redundant_exposed_us_per_step or 0.0, e.allreduce_rounds_per_step


def _fix(setup) -> str:
    """DDP's no_sync under DDP; the wrapper's own switch otherwise (diagnose/fixes.py)."""
    from .fixes import accumulation_fix

    return accumulation_fix(setup, FIX)


RULE = Rule(
    id="sync-every-microstep",
    title="Gradients all-reduced on every micro-batch (model.no_sync() missing)",
    needs=Needs(steps=("step", "allreduce_rounds", "backward_passes"), tables=("collectives",)),
    claim=Claim(order=50, gpu=Estimate(("comm",)), cpu=Estimate(("comm",)),
                estimate_key="redundant_exposed_us_per_step"),
    label="all-reduce every micro-batch",
    thresholds=(),
    evidence=Evidence, fix=lambda ev, setup=None: _fix(setup), check=PerRank(_rank, _summary, worst=_costliest),
    strategies=("ddp",),  # DDP's buckets and no_sync: nothing to say about another strategy
)
