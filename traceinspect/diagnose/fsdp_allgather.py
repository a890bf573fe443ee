"""fsdp-exposed-allgather: FSDP all-gathers the step waits for before a block's forward or backward.

**Detects**, on an FSDP run (``report.strategy``: ``fsdp2`` or ``fsdp1``), per rank and step, the exposed time of
the parameter all-gathers (``exposed_us`` of the collectives table, analyze/comm_exposure.py: the part of each
all-gather's wait window in which the rank does nothing else), split by phase: issued in forward, or in backward
(FSDP gathers the parameters again in backward when it resharded them after forward). Beside it, the exposed time
of the reduce-scatters, and of the one(s) issued after the last backward pass (nothing is left to hide them: the
optimizer step waits), shown as evidence, not claimed.

**Condition**: the all-gathers' exposed time is at least ``comm_exposed_share_warning`` (10 %) of the step (mean
over the steps), and a knob below would save something.

**The claim** (us per step, the sum of the knobs that apply; docs/communication.md, FSDP), each step's part
scaled by the share of its collectives' exposed time that is not waiting for another rank (the cross-rank
``wait_us``: a straggler's cost, claimed by ``straggler``):

* ``reshard_after_forward=False`` (the backward all-gathers are seen): the backward all-gathers' exposed time, each
  at most its execution (gloo work / NCCL kernel: on CPU the wait window also holds the issue op, which on a
  loaded host waits for a core, and that is not removed with the all-gather): the parameters stay gathered from
  forward to backward, so those all-gathers are not issued at all.
* forward prefetch (no ``FSDP::forward_prefetch`` annotation seen): for each forward all-gather after the step's
  first, the smaller of its exposed time (at most its execution) and the gap between the previous all-gather's end
  and its issue (the previous block's forward, which a prefetched all-gather runs beside);
* backward prefetch (no ``FSDP::backward_prefetch`` annotation seen; FSDP2 prefetches one block by default): the
  same for the backward all-gathers, where they are not already claimed by the reshard knob.

**Why it matters**: an all-gather the block waits for is time every rank computes nothing; prefetching issues it
one block early so it runs under the previous block's compute, and not resharding removes the backward ones at the
cost of keeping the gathered parameters in memory between forward and backward.

**Fix** (FSDP2; the lines that apply, from the evidence)::

    for prev, nxt in zip(blocks, blocks[1:]):
        prev.set_modules_to_forward_prefetch([nxt])        # gather the next block during this one's forward
    for prev, nxt in zip(blocks[1:], blocks):
        prev.set_modules_to_backward_prefetch([nxt])       # ... during this one's backward
    fully_shard(block, reshard_after_forward=False)        # where memory allows: no all-gather in backward
"""

from __future__ import annotations

import msgspec
import numpy as np

from ._rule import Claim, Needs, PerRank, RankHit, Rule
from .takes import Estimate
from .units import Count, Share, Us

FORWARD_PREFETCH_MARK = "FSDP::forward_prefetch"
BACKWARD_PREFETCH_MARK = "FSDP::backward_prefetch"
KNOB_LINES = {
    "set_modules_to_forward_prefetch": (
        "for prev, nxt in zip(blocks, blocks[1:]):   # gather the next block during this one's forward\n"
        "    prev.set_modules_to_forward_prefetch([nxt])"),
    "set_modules_to_backward_prefetch": (
        "for prev, nxt in zip(blocks[1:], blocks):   # gather the block before during this one's backward\n"
        "    prev.set_modules_to_backward_prefetch([nxt])"),
    "reshard_after_forward=False": (
        "fully_shard(block, reshard_after_forward=False)   # where memory allows: the gathered parameters stay\n"
        "                                                  # from forward to backward, no all-gather in backward"),
}
FSDP1_LINES = {
    "set_modules_to_forward_prefetch": "FSDP(model, ..., forward_prefetch=True)",
    "set_modules_to_backward_prefetch": "FSDP(model, ..., backward_prefetch=BackwardPrefetch.BACKWARD_PRE)",
    "reshard_after_forward=False": "FSDP(model, ..., sharding_strategy=ShardingStrategy.SHARD_GRAD_OP)  # memory allowing",
}


class RankEvidence(RankHit, kw_only=True):
    wall_us_per_step: Us
    allgathers_per_step: Count
    forward_allgather_exposed_us_per_step: Us
    backward_allgather_exposed_us_per_step: Us
    allgather_share_of_step: Share
    forward_prefetch_seen: bool
    backward_prefetch_seen: bool
    reshard_after_forward: bool | None
    reshard_saving_us_per_step: Us  # reshard_after_forward=False: the backward all-gathers' exposed time
    forward_prefetch_saving_us_per_step: Us
    backward_prefetch_saving_us_per_step: Us
    estimate_us_per_step: Us  # the knobs that apply, summed (the claim)
    knobs: list[str]  # the knobs that apply, largest saving first
    reduce_scatter_exposed_us_per_step: Us
    reduce_scatter_after_backward_exposed_us_per_step: Us


class Evidence(msgspec.Struct, kw_only=True):
    per_rank: list[RankEvidence]
    threshold_share_warning: Share


def _hideable(g) -> float:
    """For each all-gather after the first (issue order): min(its exposed time, the gap since the previous one's
    wait window ended), summed."""
    g = g.sort_values("cpu_ts_us")
    start = g["cpu_ts_us"].to_numpy(dtype=float)
    end = np.fmax(start + g["cpu_dur_us"].to_numpy(dtype=float),
                  g["ts_us"].to_numpy(dtype=float) + g["dur_us"].to_numpy(dtype=float))
    if len(start) < 2:
        return 0.0
    gaps = np.clip(start[1:] - end[:-1], 0.0, None)
    return float(np.nansum(np.minimum(gaps, _removable(g)[1:])))


def _removable(g) -> np.ndarray:
    """Per all-gather: its exposed time, at most its execution (gloo work / NCCL kernel). On CPU the wait window
    also holds the issue op, which on a loaded host waits for a core: not the collective's, and not removed with it."""
    e, d = g["exposed_us"].to_numpy(dtype=float), g["dur_us"].to_numpy(dtype=float)
    return np.where(np.isfinite(d), np.minimum(e, d), e)


def _per_step(c, steps, fn, scale=None) -> float:
    """Mean over ``steps`` of ``fn`` of each step's rows, times the step's ``scale`` (default 1)."""
    scale = scale or {}
    return float(sum(fn(c[c["step"] == s]) * scale.get(s, 1.0) for s in steps) / max(len(steps), 1))


def _not_waiting(c, steps, report, rank: int) -> dict:
    """Per step, the share of its collectives' exposed time that is not waiting for another rank (the
    cross-rank ``wait_us``, a straggler's cost: docs/communication.md), the same share for every collective."""
    waits = {(int(w["rank"]), int(w["step"])): float(w["wait_us"] or 0.0)
             for w in (getattr(report, "cross_rank", None) or {}).get("wait", []) or []}
    out = {}
    for s in steps:
        exposed = float(c.loc[c["step"] == s, "exposed_us"].sum())
        out[s] = max(0.0, 1.0 - waits.get((rank, s), 0.0) / exposed) if exposed > 0 else 1.0
    return out


def _names(ra) -> set:
    ops = ra.tables.get("cpu_ops")
    return {str(n) for n in ops["name"].unique()} if ops is not None and len(ops) else set()


def _rank(ra, config, report):
    c = ra.tables.get("collectives")
    if c is None or not len(c) or "exposed_us" not in c:
        return None
    c = c[c["step"] >= 0]
    steps = [int(s) for s in ra.steps["step"]]
    ag = c[c["name"] == "allgather"]
    if not len(ag) or not steps:
        return None
    wall = float(ra.steps["wall_us"].mean())
    fwd, bwd = ag[ag["phase"] != "backward"], ag[ag["phase"] == "backward"]
    fwd_exp = _per_step(fwd, steps, lambda g: g["exposed_us"].sum())
    bwd_exp = _per_step(bwd, steps, lambda g: g["exposed_us"].sum())
    share = (fwd_exp + bwd_exp) / wall if wall > 0 else 0.0
    if share < config.comm_exposed_share_warning:
        return None
    names = _names(ra)
    fp = any(n.startswith(FORWARD_PREFETCH_MARK) for n in names)
    bp = any(n.startswith(BACKWARD_PREFETCH_MARK) for n in names)
    raf = report.strategy.reshard_after_forward if getattr(report, "strategy", None) else None
    own = _not_waiting(c, steps, report, ra.rank)  # waiting for a late rank is the straggler's, not FSDP's
    reshard = _per_step(bwd, steps, lambda g: float(_removable(g).sum()), own) if len(bwd) else 0.0
    savings = {
        "reshard_after_forward=False": reshard,
        "set_modules_to_forward_prefetch": 0.0 if fp else _per_step(fwd, steps, _hideable, own),
        # not resharding removes the backward all-gathers: nothing left to prefetch there
        "set_modules_to_backward_prefetch": 0.0 if bp or reshard > 0 else _per_step(bwd, steps, _hideable, own),
    }
    knobs = [k for k, v in sorted(savings.items(), key=lambda kv: -kv[1]) if v > 0]
    if not knobs:
        return None
    rs = c[c["name"] == "reduce_scatter"]
    per_step_share = [(ag[ag["step"] == s]["exposed_us"].sum() / w) if w > 0 else 0.0
                      for s, w in zip(steps, ra.steps["wall_us"].to_numpy(dtype=float))]
    return RankEvidence(
        rank=ra.rank, steps=[s for s, sh in zip(steps, per_step_share) if sh >= config.comm_exposed_share_warning],
        wall_us_per_step=wall, allgathers_per_step=len(ag) / len(steps),
        forward_allgather_exposed_us_per_step=fwd_exp, backward_allgather_exposed_us_per_step=bwd_exp,
        allgather_share_of_step=share, forward_prefetch_seen=fp, backward_prefetch_seen=bp,
        reshard_after_forward=raf, reshard_saving_us_per_step=savings["reshard_after_forward=False"],
        forward_prefetch_saving_us_per_step=savings["set_modules_to_forward_prefetch"],
        backward_prefetch_saving_us_per_step=savings["set_modules_to_backward_prefetch"],
        estimate_us_per_step=float(sum(savings.values())), knobs=knobs,
        reduce_scatter_exposed_us_per_step=_per_step(rs, steps, lambda g: g["exposed_us"].sum()),
        reduce_scatter_after_backward_exposed_us_per_step=_per_step(
            rs[rs["phase"] == "other"], steps, lambda g: g["exposed_us"].sum()),
    )


def _summary(hits, w, report, config):
    e = w.ev
    title = (f"FSDP all-gathers expose {(e.forward_allgather_exposed_us_per_step + e.backward_allgather_exposed_us_per_step) / 1000:.1f} ms "
             f"per step ({100 * e.allgather_share_of_step:.0f} % of the step, rank {e.rank}): "
             f"{e.forward_allgather_exposed_us_per_step / 1000:.1f} ms before forward blocks, "
             f"{e.backward_allgather_exposed_us_per_step / 1000:.1f} ms before backward blocks")
    ev = Evidence(per_rank=[h.ev for h in hits], threshold_share_warning=config.comm_exposed_share_warning)
    return ev, title, e.estimate_us_per_step


def fix(ev: Evidence, setup=None) -> str:
    """The knobs that apply (largest saving first), each with what it saves, in the run's FSDP API."""
    e = ev.per_rank[0]
    fsdp1 = setup is not None and "fsdp1" in str(getattr(setup, "parallelism", "") or "").split("+")
    lines = FSDP1_LINES if fsdp1 else KNOB_LINES
    saved = {"reshard_after_forward=False": e.reshard_saving_us_per_step,
             "set_modules_to_forward_prefetch": e.forward_prefetch_saving_us_per_step,
             "set_modules_to_backward_prefetch": e.backward_prefetch_saving_us_per_step}
    out = [f"# {k}: about {saved[k] / 1000:.1f} ms per step\n{lines[k]}" for k in e.knobs]
    if e.reduce_scatter_after_backward_exposed_us_per_step >= 1000:
        out.append(f"# the last reduce-scatter waits {e.reduce_scatter_after_backward_exposed_us_per_step / 1000:.1f} ms after "
                   "backward (nothing left to hide it): a lower reduce_dtype halves its bytes\n"
                   "# fully_shard(..., mp_policy=MixedPrecisionPolicy(reduce_dtype=torch.bfloat16))")
    return "\n".join(out)


RULE = Rule(
    id="fsdp-exposed-allgather",
    title="FSDP all-gathers not prefetched: blocks wait for their parameters",
    needs=Needs(steps=("step", "wall_us"), tables=("collectives", "cpu_ops")),
    # The CPU breakdown charges FSDP's waits inside its annotations to forward and backward: the claim spills there.
    claim=Claim(order=55, gpu=Estimate(("comm",)), cpu=Estimate(("comm", "forward", "backward")),
                estimate_key="estimate_us_per_step"),
    label="FSDP all-gathers",
    thresholds=("comm_exposed_share_warning",),
    evidence=Evidence, fix=fix, check=PerRank(_rank, _summary, worst=lambda e: e.estimate_us_per_step),
    strategies=("fsdp2", "fsdp1"),
)
