"""fsdp-exposed-reducescatter: with gradient accumulation, FSDP reduce-scatters the gradients after every
micro-batch's backward.

**Detects**, on an FSDP run (``report.strategy``: ``fsdp2`` or ``fsdp1``; a run that shows no strategy is not
checked: its reduce-scatters are not known to be FSDP's), optimizer steps (profiler steps) that
run several backward passes (gradient accumulation over k micro-batches) and in which the gradients are
reduce-scattered after more than one of them. Each reduce-scatter is placed in the backward pass it closes: the
step's last pass that started at or before its issue (analyze/fsdp_reduce.py; the one FSDP2 issues from the root's
final callback, after the backward nodes, belongs to that pass too). Only the last pass's reductions are needed:
the earlier micro-batches' gradients can accumulate unsharded and be reduced once.

**Condition** (per rank): in at least half of the steps, reductions in two or more backward passes. No threshold
on size: every extra reduction sends the gradients again for nothing.

**The claim** (us per step; docs/communication.md, FSDP), each step's part scaled by the share of its collectives'
exposed time that is not waiting for another rank (the cross-rank ``wait_us``: a straggler's cost, claimed by
``straggler``):

* CPU ranks where FSDP2's annotations are seen: the training thread's time in the reductions of every pass but
  the last, ``FSDP::post_backward_reduce`` and ``FSDP::post_backward_rs_wait`` (the copy into the reduce-scatter
  input, the collective, its wait: ``set_requires_gradient_sync(False)`` returns before both);
* otherwise (GPU ranks, FSDP1): the exposed time of those passes' reduce-scatters (analyze/comm_exposure.py), each
  at most its execution.

The last pass's reduce-scatters, the one after the last backward included (nothing is left to hide it: the
optimizer step waits), are the gradient sync the step needs: shown as evidence, not claimed (exposed-comm holds
their exposed time).

**Why it matters**: ``(k - 1) / k`` of the gradient traffic is redundant, and every micro-batch's backward ends
waiting for its last reduce-scatter. FSDP2's ``set_requires_gradient_sync(False)`` (FSDP1: ``no_sync()``) skips the
reduction; the gradients accumulate unsharded (more memory, as in DDP's ``no_sync``) until the last micro-batch.

**Fix** (FSDP2)::

    for i, (x, y) in enumerate(micro_batches):
        is_last = i == len(micro_batches) - 1
        model.set_requires_gradient_sync(is_last)   # reduce-scatter only after the last micro-batch
        loss = loss_fn(model(x), y) / len(micro_batches)
        loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
"""

from __future__ import annotations

from typing import Annotated

import msgspec
import numpy as np

from ._rule import Claim, Needs, PerRank, RankHit, Rule
from .fsdp_allgather import _not_waiting, _removable
from .takes import Estimate
from .units import COUNT, Count, Share, Us

FSDP2_FIX = (
    "for i, (x, y) in enumerate(micro_batches):\n"
    "    is_last = i == len(micro_batches) - 1\n"
    "    model.set_requires_gradient_sync(is_last)   # reduce-scatter only after the last micro-batch\n"
    "    # model.set_reshard_after_backward(is_last)  # memory allowing: no all-gather in the next forward either\n"
    "    loss = loss_fn(model(x), y) / len(micro_batches)\n"
    "    loss.backward()\n"
    "optimizer.step()\n"
    "optimizer.zero_grad(set_to_none=True)")
FSDP1_FIX = (
    "for i, (x, y) in enumerate(micro_batches):\n"
    "    is_last = i == len(micro_batches) - 1\n"
    "    with contextlib.nullcontext() if is_last else model.no_sync():   # reduce only after the last\n"
    "        loss = loss_fn(model(x), y) / len(micro_batches)\n"
    "        loss.backward()\n"
    "optimizer.step()\n"
    "optimizer.zero_grad(set_to_none=True)")


class RankEvidence(RankHit, kw_only=True):
    basis: str  # "annotations": FSDP2's reduction annotations on the training thread; "exposed": reduce-scatters
    wall_us_per_step: Us
    backward_passes_per_step: Annotated[int, COUNT]
    passes_with_reduce_scatter_per_step: Annotated[int, COUNT]
    reduce_scatters_per_step: Count
    redundant_reduce_scatters_per_step: Count  # issued in passes before the last
    reduction_us_per_step: Us | None  # training-thread time in FSDP2's reductions, every pass (None: not seen)
    redundant_reduction_us_per_step: Us | None  # ... of the passes before the last
    redundant_exposed_us_per_step: Us  # exposed time of those passes' reduce-scatters, each at most its execution
    last_pass_reduce_scatter_exposed_us_per_step: Us  # the sync the step needs
    after_backward_reduce_scatter_exposed_us_per_step: Us  # issued after the last backward (phase "other")
    estimate_us_per_step: Us  # the claim
    share_of_step: Share


class Evidence(msgspec.Struct, kw_only=True):
    per_rank: list[RankEvidence]
    threshold_passes: Annotated[int, COUNT]


def _mean(values: list) -> float:
    return float(np.mean(values)) if values else 0.0


def _rank(ra, config, report):
    kinds = tuple(getattr(getattr(report, "strategy", None), "kinds", ()) or ())
    if not any(k.startswith("fsdp") for k in kinds):  # reduce-scatters of another wrapper: not FSDP's switch
        return None
    t, c = ra.tables.get("fsdp_reductions"), ra.tables.get("collectives")
    s = ra.steps
    if t is None or not len(t) or c is None or not len(s):
        return None
    t = t[(t["step"] >= 0) & (t["pass_"] >= 0)]
    rs = t[t["kind"] == "reduce_scatter"]
    passes = {int(st): int(n) for st, n in zip(s["step"], s["backward_passes"])}
    multi = [int(st) for st, g in rs.groupby("step") if g["pass_"].nunique() >= 2 and passes.get(int(st), 0) >= 2]
    if not multi or 2 * len(multi) < len(s):
        return None
    t, rs = t[t["step"].isin(multi)], rs[rs["step"].isin(multi)]
    red = t[t["kind"] != "reduce_scatter"]
    annotated = ra.basis == "cpu" and bool(len(red)) and not red["last_pass"].all()
    own = _not_waiting(c[c["step"] >= 0], multi, report, ra.rank)  # waiting for a late rank: the straggler's
    early = rs[~rs["last_pass"].astype(bool)]
    per = {st: float(_removable(early[early["step"] == st]).sum()) for st in multi}
    red_total = red_early = None
    if annotated:
        red_total = _mean([float(red.loc[red["step"] == st, "dur_us"].sum()) for st in multi])
        early_red = {st: float(red.loc[(red["step"] == st) & ~red["last_pass"].astype(bool), "dur_us"].sum())
                     for st in multi}
        red_early = _mean(list(early_red.values()))
        claim = _mean([early_red[st] * own[st] for st in multi])
    else:
        claim = _mean([per[st] * own[st] for st in multi])
    wall = s.set_index("step")["wall_us"]
    wall_mean = _mean([float(wall[st]) for st in multi])
    last = rs[rs["last_pass"].astype(bool)]
    return RankEvidence(
        rank=ra.rank, steps=multi, basis="annotations" if annotated else "exposed", wall_us_per_step=wall_mean,
        backward_passes_per_step=int(np.median([passes[st] for st in multi])),
        passes_with_reduce_scatter_per_step=int(np.median(
            [rs.loc[rs["step"] == st, "pass_"].nunique() for st in multi])),
        reduce_scatters_per_step=len(rs) / len(multi),
        redundant_reduce_scatters_per_step=len(early) / len(multi),
        reduction_us_per_step=red_total, redundant_reduction_us_per_step=red_early,
        redundant_exposed_us_per_step=_mean(list(per.values())),
        last_pass_reduce_scatter_exposed_us_per_step=float(last["exposed_us"].sum()) / len(multi),
        after_backward_reduce_scatter_exposed_us_per_step=float(
            rs.loc[rs["phase"] == "other", "exposed_us"].sum()) / len(multi),
        estimate_us_per_step=claim, share_of_step=claim / wall_mean if wall_mean > 0 else 0.0,
    )


def _summary(hits, w, report, config):
    e = w.ev
    k, n = e.backward_passes_per_step, e.passes_with_reduce_scatter_per_step
    title = (f"FSDP reduce-scatters the gradients after {n} of {k} micro-batches' backward passes instead of the "
             f"last one only: {e.estimate_us_per_step / 1000:.1f} ms per step "
             f"({100 * e.share_of_step:.0f} % of the step, rank {e.rank})")
    return Evidence(per_rank=[h.ev for h in hits], threshold_passes=2), title, e.estimate_us_per_step


def fix(ev: Evidence, setup=None) -> str:
    """FSDP2's ``set_requires_gradient_sync``; FSDP1's ``no_sync()`` where the run is FSDP1."""
    fsdp1 = setup is not None and "fsdp1" in str(getattr(setup, "parallelism", "") or "").split("+")
    e = ev.per_rank[0]
    head = (f"# {e.redundant_reduce_scatters_per_step:.0f} of {e.reduce_scatters_per_step:.0f} reduce-scatters per "
            f"step reduce micro-batches whose gradients could accumulate: about "
            f"{e.estimate_us_per_step / 1000:.1f} ms per step\n")
    return head + (FSDP1_FIX if fsdp1 else FSDP2_FIX)


RULE = Rule(
    id="fsdp-exposed-reducescatter",
    title="FSDP reduce-scatters gradients on every micro-batch (set_requires_gradient_sync(False) missing)",
    needs=Needs(steps=("step", "wall_us", "backward_passes"), tables=("collectives", "fsdp_reductions")),
    # On CPU the reduction's time sits in the collective's wait and in the backward pass's hooks: the claim
    # spills from the exposed communication to the backward and the rest of the step.
    claim=Claim(order=52, gpu=Estimate(("comm",)), cpu=Estimate(("comm", "backward", "other")),
                estimate_key="estimate_us_per_step"),
    label="FSDP reduce-scatter every micro-batch",
    thresholds=(),
    evidence=Evidence, fix=fix, check=PerRank(_rank, _summary, worst=lambda e: e.estimate_us_per_step),
    strategies=("fsdp2", "fsdp1"),
)
