"""pipeline-bubble: pipeline stages waiting on their neighbours instead of computing.

**Detects**, per stage (rank) of a pipeline-parallel run, the bubble: the training thread's time in the step
blocked in sends and receives to or from its neighbour stages (``pp_bubble_us``, docs/communication.md, Pipeline
parallel), and splits it, from the evidence, into

* the schedule's **fill and drain**: with ``p`` stages and ``m`` micro-batches, GPipe and 1F1B leave every stage
  idle ``(p-1)/(m+p-1)`` of the pipelined time, i.e. ``(p-1)/m`` of its own compute per step (``compute``: the
  step less the bubble and the optimizer step), at most the bubble;
* **imbalance**: the slowest stage's compute less this stage's (a faster stage waits for the slowest every step);
* the **rest**: the transfers themselves and the waits the other two do not explain (latency per send or receive,
  a peer's Python between micro-batches), ``rest / transfers`` per transfer.

**Condition**: a stage's bubble is at least ``pp_bubble_share_warning`` (10 %) of its step, on the mean over its
steps, and the run shows at least 2 stages and its micro-batch count.

**Claim** (time at stake): what the recommended micro-batch count saves of the bubble per step, at the same batch:
the mean of the stages' predictions (the step is common to them), claimed on each. Changing ``m`` to ``m'`` scales the fill and drain by ``m/m'`` and the transfers by ``m'/m`` (each
micro-batch sends its own tensors; the cost per transfer is the one measured)::

    saving(m') = fill_drain x (1 - m/m') - rest x (m'/m - 1)

for ``m' = 2m`` (``saving_if_doubled``) and ``m' = m/2`` (``saving_if_halved``); the recommendation is the larger
where it is positive, and nothing is claimed where neither is. The stage's compute is taken to stay the same: where
each micro-batch carries a fixed cost (dispatch, a weight-gradient matmul whose inner dimension is the micro-batch's
rows, gradient accumulation, CPU cores shared by the stages) the step changes by more than the bubble does;
docs/communication.md has the pairs that show it. The evidence also gives the saving of GPipe -> 1F1B (0: the two
schedules have the same bubble; 1F1B holds at most ``p`` micro-batches' activations instead of ``m``, a memory
gain, not a time one) and the schedule's estimate ``(p-1)/(m+p-1)`` next to the measured bubble share.

**Fix**, in torch.distributed.pipelining's terms: ``n_microbatches`` as recommended (more where the fill and drain
outweigh the transfers they add, fewer and larger where the transfers cost more); balance the stages' split where
imbalance is the largest part; with two or more stages per rank, ``ScheduleInterleaved1F1B`` (bubble
``(p-1)/(v m + p-1)`` with ``v`` stages per rank) or ``ScheduleZBVZeroBubble`` (a V-shaped placement of 2 stages per
rank whose weight-gradient work fills the bubble).
"""

from __future__ import annotations

from typing import Annotated

import msgspec
import numpy as np

from ._rule import Claim, Needs, RankHit, Rule, finding
from ._util import real_steps
from .takes import Estimate
from .units import COUNT, Bytes, Count, Share, Us


class StageEvidence(RankHit, kw_only=True):
    stage: int  # the stage's position among the ranks showing pipeline work (rank order)
    bubble_us_per_step: Us
    bubble_share: Share  # of the step
    wall_us_per_step: Us
    compute_us_per_step: Us  # the step less the bubble and the optimizer step: the stage's pipelined work
    transfers_per_step: Count
    fill_drain_us_per_step: Us  # (p-1)/m x compute, at most the bubble: the schedule's own
    imbalance_us_per_step: Us  # the slowest stage's compute less this one's, at most what is left of the bubble
    rest_us_per_step: Us  # bubble less the two: the transfers themselves and unexplained waits
    bytes_per_transfer: Bytes | None  # median size of the stage's sends and receives (one micro-batch's tensor)
    saving_if_doubled_us_per_step: Us  # m -> 2m, of the bubble
    saving_if_halved_us_per_step: Us | None  # m -> m/2 (None with m < 2)
    claim_us_per_step: Us  # the recommended change's saving, the mean over stages, at least 0 (the claim)


class Evidence(msgspec.Struct, kw_only=True):
    per_rank: list[StageEvidence]
    stages: Annotated[int, COUNT]
    microbatches: Annotated[int, COUNT]
    schedule: str | None
    schedule_bubble_share: Share  # (p-1)/(m+p-1)
    measured_bubble_share: Share  # mean over stages of bubble / (bubble + compute)
    suggested_microbatches: Annotated[int, COUNT] | None  # 2m or m/2, whichever saves more; None: neither saves
    suggested_bubble_share: Share | None  # (p-1)/(m'+p-1)
    saving_if_doubled_us_per_step: Us  # mean over stages
    saving_if_halved_us_per_step: Us | None
    saving_if_1f1b_us_per_step: Us  # GPipe -> 1F1B: the same bubble
    threshold_share_warning: Share


def bubble_share(p: int, m: int) -> float:
    """The fill and drain of GPipe / 1F1B as a share of the pipelined time."""
    return (p - 1) / (m + p - 1)


def _stage(ra) -> dict | None:
    s = real_steps(ra.steps)
    if "pp_bubble_us" not in s or not len(s) or s["pp_bubble_us"].isna().all():
        return None
    wall = s["wall_us"].to_numpy(float)
    bubble = np.nan_to_num(s["pp_bubble_us"].to_numpy(float))
    opt = np.nan_to_num(s["cpu_optimizer"].to_numpy(float)) if "cpu_optimizer" in s else np.zeros(len(s))
    return {"ra": ra, "steps": [int(x) for x in s["step"]], "wall": float(wall.mean()), "bubble": float(bubble.mean()),
            "compute": float(np.clip(wall - bubble - opt, 0.0, None).mean()),
            "transfers": float(s["pp_transfer_count"].mean()) if "pp_transfer_count" in s else 0.0}


def _transfer_bytes(ra) -> float | None:
    c = ra.tables.get("collectives")
    if c is None or not len(c):
        return None
    b = c[c["name"].isin(("send", "recv")) & (c["bytes"] >= 0)]["bytes"]
    return float(b.median()) if len(b) else None


def saving(fill_drain: float, rest: float, m: int, m2: int) -> float:
    """What changing the micro-batches from ``m`` to ``m2`` saves of a stage's bubble: the fill and drain scale by
    m/m2, the transfers (and the waits counted with them) by m2/m."""
    return fill_drain * (1 - m / m2) - rest * (m2 / m - 1)


def _evidence(st: dict, stage: int, p: int, m: int, slowest: float) -> StageEvidence:
    b = st["bubble"]
    fd = min(b, (p - 1) / m * st["compute"])
    imb = min(b - fd, max(0.0, slowest - st["compute"]))
    rest = max(0.0, b - fd - imb)
    ra = st["ra"]
    return StageEvidence(rank=ra.rank, steps=st["steps"], stage=stage, bubble_us_per_step=b,
                         bubble_share=b / st["wall"] if st["wall"] > 0 else 0.0, wall_us_per_step=st["wall"],
                         compute_us_per_step=st["compute"], transfers_per_step=st["transfers"],
                         fill_drain_us_per_step=fd, imbalance_us_per_step=imb, rest_us_per_step=rest,
                         bytes_per_transfer=_transfer_bytes(ra),
                         saving_if_doubled_us_per_step=saving(fd, rest, m, 2 * m),
                         saving_if_halved_us_per_step=saving(fd, rest, m, m // 2) if m >= 2 else None,
                         claim_us_per_step=0.0)


def check(report, config) -> list:
    strat = report.strategy
    p, m = strat.pp_stages, strat.pp_microbatches
    if not p or p < 2 or not m:
        return []
    stages = [st for ra in sorted(report.ranks, key=lambda r: r.rank) if (st := _stage(ra)) is not None]
    if len(stages) < 2:
        return []
    slowest = max(st["compute"] for st in stages)
    ev_all = [_evidence(st, i, p, m, slowest) for i, st in enumerate(stages)]
    warn = config.pp_bubble_share_warning
    hits = [e for e in ev_all if e.bubble_share >= warn]
    if not hits:
        return []
    w = max(hits, key=lambda e: e.bubble_share)
    hits.sort(key=lambda e: e is not w)
    measured = float(np.mean([e.bubble_us_per_step / max(e.bubble_us_per_step + e.compute_us_per_step, 1e-9)
                              for e in ev_all]))
    doubled = float(np.mean([e.saving_if_doubled_us_per_step for e in ev_all]))
    halved = float(np.mean([e.saving_if_halved_us_per_step for e in ev_all])) if m >= 2 else None
    m2 = 2 * m if doubled > 0 and (halved is None or doubled >= halved) else (
        m // 2 if halved is not None and halved > 0 else None)
    stake = max(0.0, doubled if m2 == 2 * m else halved or 0.0) if m2 else 0.0
    # the step is common to the stages: each stage's prediction estimates the same saving, so each claims their mean
    hits = [msgspec.structs.replace(e, claim_us_per_step=stake) for e in hits]
    ev = Evidence(per_rank=hits,
                  stages=p, microbatches=m, schedule=strat.pp_schedule, schedule_bubble_share=bubble_share(p, m),
                  measured_bubble_share=measured, suggested_microbatches=m2,
                  suggested_bubble_share=bubble_share(p, m2) if m2 else None, saving_if_doubled_us_per_step=doubled,
                  saving_if_halved_us_per_step=halved, saving_if_1f1b_us_per_step=0.0, threshold_share_warning=warn)
    title = (f"Pipeline bubble: stage {w.stage} (rank {w.rank}) waits on its neighbours "
             f"{w.bubble_us_per_step / 1000:.1f} ms per step ({100 * w.bubble_share:.0f} %); {p} stages x {m} "
             f"micro-batches leave {100 * bubble_share(p, m):.0f} % by the schedule, "
             f"{100 * measured:.0f} % measured")
    return [finding(RULE, ev, title=title, ranks=[e.rank for e in hits], steps={s for e in hits for s in e.steps},
                    stake=stake, setup=getattr(report.ranks[0], "setup", None))]


# Comment paragraphs in lines of at most 76 characters (diagnose/fixes.py).
FIX_HEAD = (
    "# {p} stages x {m} micro-batches: fill and drain alone leave\n"
    "# (p-1)/(m+p-1) = {now:.0f} % of each stage idle; measured {measured:.0f} %: {fd:.1f} ms per step\n"
    "# fill and drain, {rest:.1f} ms transfers and other waits ({per:.1f} ms per transfer),\n"
    "# {imb:.1f} ms stage imbalance\n")
FIX_MORE = (
    "# twice the micro-batches at the same batch halve the fill and drain and\n"
    "# double the transfers:\n"
    "schedule = Schedule1F1B(stage, n_microbatches={m2}, loss_fn=loss_fn)  # {then:.0f} %, about {save:.1f} ms less "
    "bubble per step\n"
    "# ({size} per transfer now) only while a micro-batch's work shrinks with its\n"
    "# size: tiny micro-batches cost their dispatch and gradient accumulation each\n")
FIX_FEWER = (
    "# the transfers cost more than the fill and drain they shorten: fewer,\n"
    "# larger micro-batches\n"
    "schedule = Schedule1F1B(stage, n_microbatches={m2}, loss_fn=loss_fn)  # about {save:.1f} ms less bubble per step\n"
    "# (or a faster link / fewer stages: {size} per transfer now)\n")
FIX_NONE = ("# neither twice nor half the micro-batches shortens the bubble by the\n"
            "# evidence (about {dbl:.1f} / {hlf} ms)\n")
FIX_TAIL = (
    "# the batch must divide into n_microbatches; GPipe and 1F1B have the same\n"
    "# bubble (1F1B holds at most p micro-batches' activations instead of m:\n"
    "# memory, not time)\n"
    "# with 2+ stages per rank: ScheduleInterleaved1F1B(stages, n_microbatches=...)\n"
    "# cuts the bubble by the stages per rank; ScheduleZBVZeroBubble (2 stages per\n"
    "# rank, V-shaped) fills it with weight-gradient work\n")
FIX_BALANCE = ("# the slowest stage paces every step: move layers off it (split the model\n"
               "# so that each stage's forward + backward takes the same time)\n")


def _size(nbytes: float | None) -> str:
    if nbytes is None:
        return "size not recorded"
    return f"{nbytes / 1e6:.2f} MB" if nbytes >= 1e5 else f"{nbytes / 1e3:.1f} kB"


def fix(ev: Evidence, setup=None) -> str:
    e = ev.per_rank[0]
    p, m, m2 = ev.stages, ev.microbatches, ev.suggested_microbatches
    halved = ev.saving_if_halved_us_per_step
    args = dict(p=p, m=m, m2=m2, now=100 * ev.schedule_bubble_share, then=100 * (ev.suggested_bubble_share or 0.0),
                measured=100 * ev.measured_bubble_share, fd=e.fill_drain_us_per_step / 1000,
                rest=e.rest_us_per_step / 1000, imb=e.imbalance_us_per_step / 1000,
                per=e.rest_us_per_step / max(e.transfers_per_step, 1.0) / 1000,
                save=(ev.saving_if_doubled_us_per_step if m2 == 2 * m else halved or 0.0) / 1000,
                dbl=ev.saving_if_doubled_us_per_step / 1000, hlf="-" if halved is None else f"{halved / 1000:.1f}",
                size=_size(e.bytes_per_transfer))
    balance = FIX_BALANCE if e.imbalance_us_per_step > max(e.fill_drain_us_per_step, e.rest_us_per_step) else ""
    body = FIX_NONE if m2 is None else (FIX_MORE if m2 > m else FIX_FEWER)
    return (FIX_HEAD + balance + body).format(**args) + FIX_TAIL


RULE = Rule(
    id="pipeline-bubble",
    title="Pipeline stages wait on their neighbours",
    # pp_bubble_us exists on CPU-basis ranks that show sends and receives: checked in ``check``, so that a run
    # without them is not an error
    needs=Needs(),
    claim=Claim(order=65, gpu=None, cpu=Estimate(("comm",)), estimate_key="claim_us_per_step"),
    label="pipeline bubble",
    thresholds=("pp_bubble_share_warning",),
    evidence=Evidence, fix=fix, check=check,
    strategies=("pp",),
)
