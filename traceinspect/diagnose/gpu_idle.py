"""gpu-idle: the GPU is idle for a large share of the step, with the cause split.

**Detects** the step's GPU idle time (``breakdown_us.idle``: no kernel, copy or memset on any stream of the rank's
device) and splits it by what the training thread was doing meanwhile:

- *waiting for data*: idle time during ``DataLoader.__next__``;
- *blocked syncs*: idle time while the CPU was blocked in a synchronizing call;
- *CPU not issuing work fast enough* (launch-bound or Python overhead): the rest of the idle time.

**Condition**: idle is at least ``gpu_idle_share_warning`` (15 %) of the step window. Why 15 %: a well-fed training
step keeps the GPU above 90 % busy; the 0-95 % GPU-Util flicker users see in ``nvidia-smi`` corresponds to idle
shares of 20 % and more.

**Evidence**: idle per step and its split, the number of kernels and the median kernel time (short kernels point
at launch overhead), GPU busy time.

**Fix**, by the largest cause:

- data: ``dataloader-stall``'s fix, from the rank's recorded settings and loader timing (twice its workers);
- syncs: see ``host-sync`` (no ``.item()`` / ``.cpu()`` inside the step);
- CPU: larger batches per step, ``torch.compile(model)`` or CUDA graphs, fused / foreach optimizers, fewer small
  kernels (see ``launch-bound``).
"""

from __future__ import annotations

from typing import Annotated, ClassVar

import msgspec

from ._memory import BatchFit, batch_fit
from ._rule import Claim, Needs, PerRank, RankHit, Rule
from ._util import loader_evidence, loader_fix, mean, step_ids
from .takes import Rest
from .units import US, Count, Share, Us

FIXES = {  # data: dataloader-stall's, from the rank's recorded settings (_util.loader_fix)
    "sync": "avoid .item() / .cpu() / torch.cuda.synchronize() inside the step; log every N steps",
    "cpu": "model = torch.compile(model)  # fewer, larger kernels; or CUDA graphs",
}
LABEL = {"dataloader": "waiting for data", "sync": "blocked in syncs", "cpu": "the CPU not issuing work fast enough"}


class RankEvidence(RankHit, kw_only=True):
    idle_us_per_step: Us
    share_of_step: Share
    idle_split_us_per_step: dict[str, Annotated[float, US]]  # dataloader, sync, cpu
    main_cause: str
    kernels_per_step: Count
    median_kernel_us: Us
    gpu_busy_us_per_step: Us


class Evidence(msgspec.Struct, kw_only=True):
    FIX_ONLY: ClassVar = ("loader",)
    per_rank: list[RankEvidence]
    threshold_share_warning: Share
    # the first rank's DataLoader (_util.loader_evidence): its fix where data is the main cause
    loader: dict = msgspec.field(default_factory=dict)
    # whether a larger batch fits (the titled rank's memory, _memory.batch_fit): the CPU cause's fix says so
    batch_fit: BatchFit | None = None


def fix(ev: Evidence, setup=None) -> str:
    main = ev.per_rank[0].main_cause
    from .fixes import launch_fix

    if main == "dataloader":
        return loader_fix(ev.loader, setup)
    return launch_fix(setup, FIXES[main], ev.batch_fit) if main == "cpu" else FIXES[main]


def _rank(ra, config, report):
    s = ra.steps
    if ra.basis != "gpu" or "bd_idle" not in s or not len(s):
        return None
    share = s["bd_idle"] / s["wall_us"].where(s["wall_us"] > 0)
    mask = (share >= config.gpu_idle_share_warning).fillna(False).to_numpy()
    if not mask.any():
        return None
    sel = s[mask]
    causes = {"dataloader": mean(sel["idle_dataloader_us"]), "sync": mean(sel["idle_sync_us"]),
              "cpu": mean(sel["idle_other_us"])}
    return RankEvidence(
        rank=ra.rank,
        steps=step_ids(s, mask),
        idle_us_per_step=mean(sel["bd_idle"]),
        share_of_step=mean(share[mask]),
        idle_split_us_per_step=causes,
        main_cause=max(causes, key=causes.get),
        kernels_per_step=mean(sel["kernel_count"]),
        median_kernel_us=mean(sel["median_kernel_us"]),
        gpu_busy_us_per_step=mean(sel["gpu_busy_us"]),
    )


def _summary(hits, w, report, config):
    e = w.ev
    title = (f"GPU idle {100 * e.share_of_step:.0f} % of the step ({e.idle_us_per_step / 1000:.1f} ms, rank "
             f"{e.rank}), mostly {LABEL[e.main_cause]}")
    ev = Evidence(per_rank=[h.ev for h in hits], threshold_share_warning=config.gpu_idle_share_warning,
                  loader=loader_evidence(w.ra), batch_fit=batch_fit(w.ra, config))
    return ev, title, e.idle_us_per_step


RULE = Rule(
    id="gpu-idle",
    title="GPU idle for a large share of the step",
    needs=Needs(steps=("step", "wall_us"), gpu_steps=("bd_idle",)),
    claim=Claim(order=1000, gpu=Rest(("data", "sync", "launch")), cpu=None, symptom=True),
    label="other GPU idle",
    thresholds=("gpu_idle_share_warning",),
    evidence=Evidence, fix=fix, check=PerRank(_rank, _summary, worst=lambda e: e.share_of_step),
)
