"""gpu-idle: the GPU is idle for a large share of the step, with the cause split.

**Detects** the step's GPU idle time (``breakdown_us.idle``: no kernel, copy or memset on any stream of the rank's
device) and splits it by what the training thread was doing meanwhile:

- *waiting for data*: idle time during ``DataLoader.__next__``;
- *blocked syncs*: idle time while the CPU was blocked in a synchronizing call;
- *CPU not issuing work fast enough* (launch-bound or Python overhead): the rest of the idle time.

**Condition**: idle is at least ``gpu_idle_share_warning`` (15 %) of the step window (*critical* at
``gpu_idle_share_critical``, 40 %). Why 15 %: a well-fed training step keeps the GPU above 90 % busy; the 0-95 %
GPU-Util flicker users see in ``nvidia-smi`` corresponds to idle shares of 20 % and more.

**Evidence**: idle per step and its split, the number of kernels and the median kernel time (short kernels point
at launch overhead), GPU busy time.

**Fix**, by the largest cause:

- data: ``dataloader-stall``'s fix, from the rank's recorded settings and loader timing (twice its workers);
- syncs: see ``host-sync`` (no ``.item()`` / ``.cpu()`` inside the step);
- CPU: larger batches per step, ``torch.compile(model)`` or CUDA graphs, fused / foreach optimizers, fewer small
  kernels (see ``launch-bound``).
"""

from __future__ import annotations

from . import Needs
from .finding import Finding
from .fixes import first_use_fix, launch_fix, setup_of
from ._util import loader_evidence, loader_fix, mean, severity_for, step_ids

ID = "gpu-idle"
TITLE = "GPU idle for a large share of the step"
NEEDS = Needs(steps=("step", "wall_us"), gpu_steps=("bd_idle",))

FIXES = {  # data: dataloader-stall's, from the rank's recorded settings (_util.loader_fix)
    "sync": "avoid .item() / .cpu() / torch.cuda.synchronize() inside the step; log every N steps",
    "cpu": "model = torch.compile(model)  # fewer, larger kernels; or a larger batch per step / CUDA graphs",
}


def check(report, config) -> list[Finding]:
    per_rank, ranks, steps = [], [], set()
    worst = None
    for ra in report.ranks:
        s = ra.steps
        if ra.basis != "gpu" or "bd_idle" not in s or not len(s):
            continue
        share = s["bd_idle"] / s["wall_us"].where(s["wall_us"] > 0)
        mask = (share >= config.gpu_idle_share_warning).fillna(False).to_numpy()
        if not mask.any():
            continue
        sel = s[mask]
        causes = {
            "dataloader": mean(sel["idle_dataloader_us"]),
            "sync": mean(sel["idle_sync_us"]),
            "cpu": mean(sel["idle_other_us"]),
        }
        main = max(causes, key=causes.get)
        sh = mean(share[mask])
        sev = severity_for(sh, config.gpu_idle_share_warning, config.gpu_idle_share_critical) or "warning"
        idle = mean(sel["bd_idle"])
        if worst is None or sh > worst[0]:
            worst = (sh, sev, ra.rank, idle, main, ra)
        per_rank.append(
            {
                "rank": ra.rank,
                "steps": step_ids(s, mask),
                "idle_us_per_step": idle,
                "share_of_step": sh,
                "idle_split_us_per_step": causes,
                "main_cause": main,
                "kernels_per_step": mean(sel["kernel_count"]),
                "median_kernel_us": mean(sel["median_kernel_us"]),
                "gpu_busy_us_per_step": mean(sel["gpu_busy_us"]),
            }
        )
        ranks.append(ra.rank)
        steps.update(step_ids(s, mask))
    if not per_rank:
        return []
    sh, sev, rank, idle, main, wra = worst
    if main == "dataloader":
        fix = loader_fix(loader_evidence(wra), wra.setup)
    elif main == "cpu" and "idle_first_launch_us" in wra.steps and \
            wra.steps["idle_first_launch_us"].mean() >= 0.5 * wra.steps["idle_other_us"].mean() > 0:
        fix, main = first_use_fix(), "first_use"  # a first-use launch, not launch overhead (analyze/idle.py)
    elif main == "cpu":
        fix = launch_fix(setup_of(report, rank), FIXES[main])
    else:
        fix = FIXES[main]
    per_rank.sort(key=lambda e: e["rank"] != rank)  # the rank the title names comes first (renderers show it)
    label = {"first_use": "a first-use launch (module load)", "dataloader": "waiting for data", "sync": "blocked in syncs", "cpu": "the CPU not issuing work fast enough"}
    return [
        Finding(
            id=ID,
            severity=sev,
            title=f"GPU idle {100 * sh:.0f} % of the step ({idle / 1000:.1f} ms, rank {rank}), mostly {label[main]}",
            ranks=sorted(ranks),
            steps=sorted(steps),
            evidence={
                "per_rank": per_rank,
                "threshold_share_warning": config.gpu_idle_share_warning,
                "threshold_share_critical": config.gpu_idle_share_critical,
            },
            fix=fix,
            time_at_stake_us=idle,
        )
    ]
