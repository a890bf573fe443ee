"""tp-exposed-comm: the step waits for the tensor-parallel collectives inside its layers.

**Detects**, per rank of a tensor-parallel run, the time the training thread spends in DTensor's functional
collectives and their waits (``tp_comm_exposed_us``: ``_c10d_functional::all_reduce`` / ``all_gather_into_tensor``
/ ``reduce_scatter_tensor`` and ``_c10d_functional::wait_tensor``, docs/communication.md, Tensor parallel): each
sits between two layers' matmuls, so what the thread spends there the step waits for.

**Condition**: the mean of that time over the rank's steps is at least ``tp_comm_share_warning`` (10 %) of the step.
Only where the trace shows the step waiting: a rank whose functional collectives return at once (their work hidden
behind compute) has a small ``tp_comm_exposed_us`` and no finding.

**Claim** (time at stake): the exposed time itself (what overlapping the collectives with the matmuls would give
back, at most). Not validated against a one-knob pair: see docs/communication.md for what was captured.

**Fix**, in DTensor / tensor-parallel API terms, from the evidence: with more than one collective per
layer pair (``collectives_per_step``), the plan redistributes between layers (a ``ColwiseParallel`` followed by
another ``ColwiseParallel``, an ``output_layouts=Replicate()``): pair ``ColwiseParallel`` with ``RowwiseParallel``
so a block needs one all-reduce in forward and one in backward; ``SequenceParallel`` on the norms and dropout keeps
the activations sharded between blocks (reduce-scatter + all-gather instead of all-reduce); on GPU with
``torch.compile``, async tensor parallel (``torch._inductor.config._micro_pipeline_tp = True`` and symmetric memory
for the TP group) overlaps the collectives with the matmuls.
"""

from __future__ import annotations

from typing import Annotated

import msgspec
import numpy as np

from ._rule import Claim, Needs, PerRank, RankHit, Rule
from ._util import real_steps
from .takes import Estimate
from .units import COUNT, Count, Share, Us


class RankEvidence(RankHit, kw_only=True):
    exposed_us_per_step: Us
    share_of_step: Share
    wall_us_per_step: Us
    collectives_per_step: Count  # functional collectives the step issued (forward and backward)
    comm_by_kind_per_step: dict[str, Annotated[float, COUNT]]  # functional collectives of each kind per step


class Evidence(msgspec.Struct, kw_only=True):
    per_rank: list[RankEvidence]
    threshold_share_warning: Share
    compiled: bool | None  # the setup's torch.compile, where known: async TP needs a compiled program
    cpu_only: bool


def _kinds(ra, steps) -> dict:
    c = ra.tables.get("collectives")
    if c is None or not len(c) or "source" not in c:
        return {}
    c = c[c["step"].isin(steps)]
    g = c.groupby("name").size() / max(len(steps), 1)
    return {str(k): float(v) for k, v in g.items()}


def _rank(ra, config, report):
    s = real_steps(ra.steps)
    if "tp_comm_exposed_us" not in s or not len(s) or s["tp_comm_exposed_us"].isna().all():
        return None
    wall = s["wall_us"].to_numpy(float)
    exposed = np.nan_to_num(s["tp_comm_exposed_us"].to_numpy(float))
    share = float(np.mean(np.where(wall > 0, exposed / np.where(wall > 0, wall, 1), 0.0)))
    warn = config.tp_comm_share_warning
    if share < warn:
        return None
    steps = [int(x) for x in s["step"]]
    return RankEvidence(rank=ra.rank, steps=[st for st, e, w in zip(steps, exposed, wall) if w > 0 and e / w >= warn],
                        exposed_us_per_step=float(exposed.mean()), share_of_step=share,
                        wall_us_per_step=float(wall.mean()),
                        collectives_per_step=float(s["tp_collective_count"].mean()),
                        comm_by_kind_per_step=_kinds(ra, set(steps)))


def _summary(hits, w, report, config):
    e = w.ev
    setup = getattr(w.ra, "setup", None)
    compiled = bool(setup.compile.compiled) if setup is not None and getattr(setup, "compile", None) else None
    ev = Evidence(per_rank=[h.ev for h in hits], threshold_share_warning=config.tp_comm_share_warning,
                  compiled=compiled, cpu_only=all(ra.basis == "cpu" for ra in report.ranks))
    title = (f"The step waits {e.exposed_us_per_step / 1000:.1f} ms ({100 * e.share_of_step:.0f} %) for "
             f"{e.collectives_per_step:.0f} tensor-parallel collective(s) inside its layers (rank {e.rank})")
    return ev, title, e.exposed_us_per_step


# Comment paragraphs in lines of at most 76 characters (diagnose/fixes.py).
FIX_PAIR = (
    "# {n:.0f} functional collectives per step ({kinds}): the plan\n"
    "# redistributes between layers. Pair each ColwiseParallel with a\n"
    "# RowwiseParallel: one all-reduce in forward, one in backward per block\n"
    "parallelize_module(model, tp_mesh, {{\"w1\": ColwiseParallel(), \"w2\": RowwiseParallel()}})\n")
FIX_SP = (
    "# keep activations sharded between blocks: SequenceParallel on the norms /\n"
    "# dropout, and ColwiseParallel(input_layouts=Shard(1)) /\n"
    "# RowwiseParallel(output_layouts=Shard(1)) around them (reduce-scatter +\n"
    "# all-gather instead of all-reduce; fewer bytes per rank in the norms)\n")
FIX_ASYNC = (
    "{where}"
    "torch._inductor.config._micro_pipeline_tp = True\n"
    "torch.distributed._symmetric_memory.enable_symm_mem_for_group(tp_mesh.get_group().group_name)\n"
    "{compile}")


def fix(ev: Evidence, setup=None) -> str:
    e = ev.per_rank[0]
    kinds = ", ".join(f"{v:.0f} {k}" for k, v in sorted(e.comm_by_kind_per_step.items())) or "kinds not recorded"
    out = FIX_PAIR.format(n=e.collectives_per_step, kinds=kinds) if e.collectives_per_step > 2 else ""
    out += FIX_SP
    where = ("# on GPU (NCCL, symmetric memory; not on CPU / gloo) with torch.compile,\n"
             "# async tensor parallel overlaps the collectives with the matmuls:\n") if ev.cpu_only else \
        "# with torch.compile, async tensor parallel overlaps the collectives with\n# the matmuls:\n"
    out += FIX_ASYNC.format(where=where, compile="" if ev.compiled else "model = torch.compile(model)\n")
    return out


RULE = Rule(
    id="tp-exposed-comm",
    title="The step waits for tensor-parallel collectives",
    # tp_comm_exposed_us exists on CPU-basis ranks that show functional collectives: checked in ``_rank``
    needs=Needs(),
    claim=Claim(order=66, gpu=None, cpu=Estimate(("comm", "forward", "backward")),
                estimate_key="exposed_us_per_step"),
    label="exposed TP comm",
    thresholds=("tp_comm_share_warning",),
    evidence=Evidence, fix=fix, check=PerRank(_rank, _summary, worst=lambda e: e.share_of_step),
    strategies=("tp",),
)
