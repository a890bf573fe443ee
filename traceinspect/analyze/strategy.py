"""The parallel strategy of a run, recognised from what its trace shows: DDP, FSDP (FSDP1, FSDP2 and whether it
reshards after forward), tensor parallel, pipeline parallel (stages, micro-batches), a combination, or none.

``rank_strategy(ra)`` reads one ``RankAnalysis`` (its CPU op / annotation summary ``tables["cpu_ops"]`` and its
collectives table) and returns a frozen ``Strategy``; ``run_strategy(ranks)`` combines the ranks (pipeline stages
are the ranks that show pipeline work). ``recognise(names, collectives)`` is the core both use, on plain inputs
(name -> count, and the collectives table), so a caller that holds only events' names can use it too. The capture
metadata is never read: what is named is what the events show. Definitions: docs/communication.md (Strategies).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Iterable, Mapping

import pandas as pd

from .comm_names import POINT_TO_POINT, is_collective_op

# What each strategy leaves in a trace (record_function annotations of torch.distributed).
DDP_MARKS = ("DistributedDataParallel.forward",)
# DDP's reducer (its C++ ops on the backward's gradients): DDP's own, where its forward annotation is not recorded.
DDP_REDUCER = ("torch::distributed::reducer::", "torch.distributed.ddp.reducer::")
FSDP1_MARK = "FullyShardedDataParallel."
FSDP2_MARK = "FSDP::"
# torch.distributed.pipelining's schedules annotate each micro-batch: "Forward 0", "Backward 1", "PP:..." names.
_PP_MICROBATCH = re.compile(r"^(?:PP:)?\s*(?:forward|fwd|F)\s*(\d+)$", re.IGNORECASE)
PP_MARKS = ("PipelineStage", "PipelineSchedule", "PP:", "_PipelineStage")
# DTensor's redistributions run functional collectives; FSDP2 issues c10d ops directly.
TP_COLLECTIVE_SOURCE = "_c10d_functional::"

# Every kind, outermost first: the order a run's kinds are listed in.
KINDS = ("ddp", "fsdp1", "fsdp2", "tp", "pp", "dp")
SCHEDULE_LABELS = {"all-forward-then-backward": "GPipe-like", "interleaved": "1F1B-like"}
LABELS = {"ddp": "DDP", "fsdp1": "FSDP1", "fsdp2": "FSDP2", "tp": "tensor parallel", "pp": "pipeline parallel",
          "dp": "data parallel, its own all-reduces (not DDP)"}


@dataclass(frozen=True)
class Strategy:
    """What parallelism the trace shows. ``kinds``: the strategies seen, outermost first (``ddp``, ``fsdp1``,
    ``fsdp2``, ``tp``, ``pp``, ``dp``: gradient all-reduces of the program's own); empty: none seen. ``None`` fields
    are not shown by the trace."""

    kinds: tuple[str, ...] = ()
    reshard_after_forward: bool | None = None  # FSDP: parameters all-gathered again for backward
    pp_stages: int | None = None  # ranks showing pipeline work (run level; 1 on a rank)
    pp_microbatches: int | None = None  # micro-batches per step (forward annotations, or sends per step)
    # "all-forward-then-backward" (GPipe) or "interleaved" (1F1B): the order of a stage's sends and receives
    pp_schedule: str | None = None
    evidence: tuple[str, ...] = ()  # the names that showed each strategy

    @property
    def parallelism(self) -> str:
        """One phrase for the verdict line and the setup record: "FSDP2 (reshard after forward)", "DDP",
        "pipeline parallel (2 stages, 4 micro-batches)", "FSDP2 + tensor parallel", "no data or model parallelism"."""
        if not self.kinds:
            return "no data or model parallelism"
        parts = []
        for k in self.kinds:
            label = LABELS[k]
            if k.startswith("fsdp") and self.reshard_after_forward is not None:
                label += " (reshard after forward)" if self.reshard_after_forward else " (no reshard after forward)"
            if k == "pp":
                bits = [f"{self.pp_stages} stages" if self.pp_stages else None,
                        f"{self.pp_microbatches} micro-batches" if self.pp_microbatches else None,
                        SCHEDULE_LABELS.get(self.pp_schedule)]
                bits = [b for b in bits if b]
                label += f" ({', '.join(bits)})" if bits else ""
            parts.append(label)
        return " + ".join(parts)

    def is_(self, kind: str) -> bool:
        return kind in self.kinds

    def to_dict(self) -> dict:
        d = asdict(self)
        d["kinds"], d["evidence"] = list(self.kinds), list(self.evidence)
        d["parallelism"] = self.parallelism
        return d


def recognise(names: Mapping[str, int], collectives: pd.DataFrame | None, steps: int = 0) -> Strategy:
    """The strategy one rank shows. ``names``: CPU op / annotation name -> count; ``collectives``: the rank's
    collectives table (columns ``name``, ``phase``, ``step``; may be None); ``steps``: the rank's step count."""
    kinds, evidence = [], []
    coll = collectives if collectives is not None and len(collectives) else None
    fsdp2 = [n for n in names if n.startswith(FSDP2_MARK)]
    fsdp1 = [n for n in names if n.startswith(FSDP1_MARK)]
    ddp = [n for n in names if n in DDP_MARKS] or sorted(n for n in names if n.startswith(DDP_REDUCER))[:1]
    if ddp:
        kinds.append("ddp")
        evidence.append(ddp[0])
    if fsdp1:
        kinds.append("fsdp1")
        evidence.append(sorted(fsdp1)[0])
    elif fsdp2:
        kinds.append("fsdp2")
        evidence.append("FSDP::all_gather" if any(n.startswith("FSDP::all_gather") for n in fsdp2) else fsdp2[0])
    functional = [n for n in names if n.startswith(TP_COLLECTIVE_SOURCE) and is_collective_op(n)]
    if functional:
        kinds.append("tp")
        evidence.append(sorted(functional)[0])
    pp_names = [n for n in names if n.startswith(PP_MARKS)]
    p2p = coll[coll["name"].isin(POINT_TO_POINT)] if coll is not None else None
    pp_microbatches = schedule = None
    if pp_names or (p2p is not None and len(p2p) and not kinds):
        kinds.append("pp")
        evidence.append(sorted(pp_names)[0] if pp_names else "send/recv between ranks")
        pp_microbatches = _microbatches(names, p2p, steps)
        schedule = _schedule(p2p)
    # Gradient all-reduces alone name DDP only in a trace without CPU ops (kernels only), where DDP's own marks
    # could not show. Where the ops are recorded and none is DDP's, all-reduces issued during a backward pass are
    # the program's own gradient all-reduces (hooks, a hand-written data parallel loop): data parallel all the same
    # ("dp"), but DDP's advice (no_sync, bucket_cap_mb) would not apply. All-reduces with no backward pass around
    # them (a collectives benchmark, a loop of tensors) name no strategy.
    grad = coll["grad"].astype(bool).to_numpy() if coll is not None and "grad" in coll else None
    if not kinds and grad is not None and grad.any():
        if not names:
            kinds.append("ddp")
            evidence.append("all-reduces of gradients during backward (no CPU ops recorded)")
        elif "phase" in coll and (grad & (coll["phase"] == "backward").to_numpy()).any():
            kinds.append("dp")
            evidence.append("all-reduces of gradients during backward, none of them DDP's")
    raf = _reshards(coll) if {"fsdp1", "fsdp2"} & set(kinds) else None
    return Strategy(kinds=tuple(kinds), reshard_after_forward=raf, pp_stages=1 if "pp" in kinds else None,
                    pp_microbatches=pp_microbatches, pp_schedule=schedule, evidence=tuple(evidence))


def _reshards(coll: pd.DataFrame | None) -> bool | None:
    """FSDP reshards after forward when it all-gathers parameters again during backward."""
    if coll is None:
        return None
    ag = coll[coll["name"] == "allgather"]
    if not len(ag) or "phase" not in ag:
        return None
    return bool((ag["phase"] == "backward").any())


def _microbatches(names: Mapping[str, int], p2p: pd.DataFrame | None, steps: int) -> int | None:
    """Micro-batches per step: the schedule's numbered forward annotations, else the sends (or receives) per
    step of one direction (a stage sends one activation per micro-batch)."""
    numbered = {int(m.group(1)) for n in names if (m := _PP_MICROBATCH.match(n.strip()))}
    if numbered:
        return max(numbered) + 1
    if p2p is None or not len(p2p) or not steps:
        return None
    per_step = p2p[p2p["step"] >= 0].groupby(["step", "name"]).size()
    return int(per_step.groupby(level="name").median().min()) if len(per_step) else None


def _schedule(p2p: pd.DataFrame | None) -> str | None:
    """A stage's transfers in a step: all of one direction before all of the other (every forward before any
    backward: GPipe) or alternating (1F1B). None with fewer than 2 of each per step."""
    if p2p is None or not len(p2p):
        return None
    verdicts = set()
    order = "cpu_ts_us" if "cpu_ts_us" in p2p else None
    for _, g in p2p[p2p["step"] >= 0].groupby("step"):
        seq = (g.sort_values(order) if order else g)["name"].tolist()
        if seq.count("send") < 2 or seq.count("recv") < 2:
            continue
        changes = sum(1 for a, b in zip(seq, seq[1:]) if a != b)
        verdicts.add("all-forward-then-backward" if changes == 1 else "interleaved")
    return verdicts.pop() if len(verdicts) == 1 else None


def rank_strategy(ra) -> Strategy:
    """The strategy one ``RankAnalysis`` shows."""
    return tables_strategy(ra.tables, len(ra.steps))


def tables_strategy(tables: Mapping[str, pd.DataFrame], steps: int) -> Strategy:
    """The strategy a rank's tables show (``cpu_ops``, ``collectives``): what ``rank_strategy`` reads, and what
    the setup record's ``parallelism`` is made from (analyze/setup.py), so the two never disagree."""
    ops = tables.get("cpu_ops")
    names: dict[str, int] = {}
    if ops is not None and len(ops):
        for n, c in ops.groupby("name", observed=True)["count"].sum().items():
            names[str(n)] = int(c)
    return recognise(names, tables.get("collectives"), steps)


def run_strategy(ranks: Iterable) -> Strategy:
    """The run's strategy: every kind any rank shows; pipeline stages = ranks showing pipeline work; the
    micro-batch count and reshard flag where the ranks agree (the most common value)."""
    per = [rank_strategy(ra) for ra in ranks]
    if not per:
        return Strategy()
    kinds = tuple(k for k in KINDS if any(s.is_(k) for s in per))
    evidence = tuple(dict.fromkeys(e for s in per for e in s.evidence))
    raf = _mode([s.reshard_after_forward for s in per])
    # a middle stage sends and receives in both directions (2 per micro-batch each way): the fewest is the count
    mb = min((s.pp_microbatches for s in per if s.pp_microbatches is not None), default=None)
    stages = sum(1 for s in per if s.is_("pp")) or None
    # the schedule as the middle stages show it is ambiguous, and the first stage's 1F1B warm-up runs p-1
    # forwards before its first backward (with m <= p-1 it looks like GPipe); the last stage's order is the
    # schedule's: 1F1B answers each forward with its backward at once, GPipe runs every forward first
    last = next((s.pp_schedule for s in reversed(per) if s.is_("pp")), None)
    return Strategy(kinds=kinds, reshard_after_forward=raf, pp_stages=stages, pp_microbatches=mb, pp_schedule=last,
                    evidence=evidence)


def _mode(values):
    vals = [v for v in values if v is not None]
    return max(set(vals), key=vals.count) if vals else None
