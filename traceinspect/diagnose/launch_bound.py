"""launch-bound: the GPU waits on the CPU, which cannot issue short kernels as fast as the GPU runs them.

**Detects** steps where the GPU sits idle between kernels while the training process is neither waiting for
data nor blocked in a sync (``idle_other_us``, see docs/metrics.md), and the kernels are shorter than the CPU
time spent per kernel: the CPU thread issues one kernel per PyTorch op (Python, the dispatcher, then a launch
call of a few microseconds), so when kernels run for a couple of microseconds the GPU drains its queue and waits.

**Condition**, per step (the rule fires when at least half of a rank's steps meet it):

- at least ``launch_bound_min_kernels`` (20) kernels in the step;
- launch overhead, ``idle_launch_us`` (the GPU idle with nothing queued while the step's code ran, after queued
  work, syncs, first-use launches and the DataLoader: analyze/idle.py; ``idle_other_us`` on reports without it),
  is at least ``launch_bound_idle_share`` (20 %) of
  the step (*critical* at ``launch_bound_idle_share_critical``, 50 %): that much of the step is recoverable
  without touching the data pipeline;
- the GPU work of a typical launch is shorter than the CPU time per launch: the median over the step's launch
  calls of the GPU time of the kernels each ran (``launch_gpu_median_us``) against ``(cpu_step_us - dataloader_us
  - sync_us) / launch_count`` (the CPU time the step had for issuing work, per launch call): the GPU finishes a
  typical launch before the CPU has produced the next one. A CUDA / HIP graph replay (``cudaGraphLaunch``,
  ``hipGraphLaunch``) is one launch that runs every kernel of its graph, so its GPU time is the whole graph's: the
  CPU does not launch those kernels one by one. Traces without launch records fall back to kernels (median
  kernel against CPU time per kernel).

**Evidence**: kernels per step, median kernel time, short kernels (< ``short_kernel_us``, 10 us), launch calls
per step (``cudaLaunchKernel``, ``cuLaunchKernel``, ``cudaLaunchKernelExC``, ``cuLaunchKernelEx``,
``cudaGraphLaunch``...), CPU time inside those calls per launch, CPU time per kernel, the idle time, and the
nvidia-smi view of the step (share of the step with a kernel running). Where the capture timed the training
process's threads (``process_threads``), the loop's thread's CPU time per step and how long, at least, it was off a
CPU while it had work to issue (``cpu_issue_us`` less its CPU time), and the DataLoader pinning thread's CPU time.
**Time at stake**: ``idle_other_us``.

**Fix**: fewer, larger kernels per unit of work::

    model = torch.compile(model)                       # fuses elementwise ops; mode="reduce-overhead" adds CUDA graphs
    loader = DataLoader(dataset, batch_size=4 * bs)    # more work per kernel (scale the learning rate)
    opt = torch.optim.AdamW(params, fused=True)        # one kernel for all parameters

or capture the static part of the step in a CUDA graph (``torch.cuda.graphs``). Where the loop's thread was off a
CPU a quarter or more of that time while the pinning thread ran longer than that, the fix says so first: the
launches are slow for a reason fewer launches do not remove (the threads share one interpreter lock).
"""

from __future__ import annotations

import numpy as np

from . import Needs
from .finding import Finding
from .fixes import launch_fix, setup_of
from ._util import first_window, mean, severity_for, step_ids, thread_cpu_per_step

ID = "launch-bound"
TITLE = "The GPU waits on kernel launches"
NEEDS = Needs(
    steps=("step", "wall_us"),
    gpu_steps=("idle_other_us", "kernel_count", "median_kernel_us", "cpu_step_us"),
)

FIX = (
    'model = torch.compile(model)   # or mode="reduce-overhead" for CUDA graphs\n'
    "# larger batch per step; torch.optim.AdamW(params, fused=True)"
)


def check(report, config) -> list[Finding]:
    warn = config.launch_bound_idle_share
    crit = config.launch_bound_idle_share_critical
    min_kernels = config.launch_bound_min_kernels
    per_rank, ranks, steps = [], [], set()
    worst = None
    for ra in report.ranks:
        s = ra.steps
        need = ("idle_other_us", "kernel_count", "median_kernel_us", "cpu_step_us")
        if ra.basis != "gpu" or not len(s) or any(c not in s for c in need):
            continue
        wall = s["wall_us"].where(s["wall_us"] > 0)
        # Launch overhead only (analyze/idle.py): the GPU idle with nothing queued while the step's code ran.
        waited = s["idle_launch_us"] if "idle_launch_us" in s else s["idle_other_us"]
        share = (waited / wall).fillna(0.0)
        kernels = s["kernel_count"].astype(float)
        # CPU time the training process had for issuing work: its step minus data waits and blocked syncs.
        issue_us = s["cpu_step_us"] - s.get("dataloader_us", 0.0) - s.get("sync_us", 0.0)
        cpu_per_kernel = issue_us.clip(lower=0.0) / kernels.where(kernels > 0)
        # Per launch call (a graph replay runs many kernels from one call); per kernel where launches are unknown.
        n_launch = s["launch_count"].astype(float) if "launch_count" in s else kernels * 0
        by_launch = (n_launch > 0) & s.get("launch_gpu_median_us", np.nan).notna() if "launch_count" in s else False
        cpu_per_launch = (issue_us.clip(lower=0.0) / n_launch.where(n_launch > 0)).where(by_launch, cpu_per_kernel)
        gpu_per_launch = (s["launch_gpu_median_us"].where(by_launch, s["median_kernel_us"])
                          if "launch_gpu_median_us" in s else s["median_kernel_us"])
        mask = ((kernels >= min_kernels) & (share >= warn) & (gpu_per_launch < cpu_per_launch)).fillna(False)
        mask = mask.to_numpy()
        if not mask.any() or mask.sum() * 2 < len(s):
            continue
        sel = s[mask]
        sh = mean(share[mask])
        idle = mean(sel["idle_other_us"])
        sev = severity_for(sh, warn, crit) or "warning"
        launches = mean(sel["launch_count"]) if "launch_count" in sel else None
        launch_us = mean(sel["launch_call_us"]) if "launch_call_us" in sel else None
        graph = mean(sel["graph_launch_count"]) if "graph_launch_count" in sel else 0.0
        if worst is None or sh > worst[0]:
            worst = (sh, sev, ra.rank, idle, mean(sel["kernel_count"]), mean(gpu_per_launch[mask]),
                     mean(cpu_per_launch[mask]), mean(n_launch[mask]), graph)
        per_rank.append({
            "rank": ra.rank,
            "steps": step_ids(s, mask),
            "kernels_per_step": mean(sel["kernel_count"]),
            "median_kernel_us": mean(sel["median_kernel_us"]),
            "short_kernels_per_step": mean(sel["short_kernel_count"]) if "short_kernel_count" in sel else None,
            "launch_calls_per_step": launches,
            "launch_call_us_per_step": launch_us,
            "cpu_us_per_launch_call": (launch_us / launches) if launches else None,
            "cpu_us_per_kernel": mean(cpu_per_kernel[mask]),
            "graph_launches_per_step": graph,
            "kernels_per_launch": mean(sel["kernels_per_launch"]) if "kernels_per_launch" in sel else None,
            "gpu_us_per_launch_median": mean(gpu_per_launch[mask]),
            "cpu_us_per_launch": mean(cpu_per_launch[mask]),
            "cpu_step_us": mean(sel["cpu_step_us"]),
            "cpu_issue_us": mean(issue_us[mask]),
            "idle_other_us_per_step": idle,
            "idle_other_share": sh,
            "idle_launch_us_per_step": mean(sel["idle_launch_us"]) if "idle_launch_us" in sel else None,
            "smi_util": mean(sel["smi_util"]) if "smi_util" in sel else None,
        })
        threads = thread_cpu_per_step(ra)  # where the capture timed the process's threads
        if threads is not None and threads["loop_us"] is not None:
            issue = mean(issue_us.clip(lower=0.0)[first_window(s)])  # over the steps the thread times cover
            per_rank[-1]["loop_thread_cpu_us_per_step"] = threads["loop_us"]
            # at least this long the loop's thread was off a CPU while it had work to issue (its CPU time also
            # holds any spin inside syncs, so the difference is a lower bound)
            per_rank[-1]["loop_thread_off_cpu_us_per_step"] = max(issue - threads["loop_us"], 0.0)
            per_rank[-1]["pin_thread_cpu_us_per_step"] = threads["pin_us"]
        ranks.append(ra.rank)
        steps.update(step_ids(s, mask))
    if not per_rank:
        return []
    sh, sev, rank, idle, kern, med, cpk, nlaunch, graph = worst
    per_rank.sort(key=lambda e: e["rank"] != rank)  # the rank the title names comes first (renderers show it)
    return [Finding(
        id=ID,
        severity=sev,
        title=(f"GPU waits on launches {100 * sh:.0f} % of the step (rank {rank}): {kern:.0f} kernels/step"
               + (f" from {nlaunch:.0f} launches ({graph:.0f} graph replays)" if graph else "")
               + f", median {med:.1f} us on the GPU vs {cpk:.1f} us of CPU per launch"),
        ranks=sorted(ranks),
        steps=sorted(steps),
        evidence={"per_rank": per_rank, "threshold_idle_share": warn, "threshold_idle_share_critical": crit,
                  "min_kernels_per_step": min_kernels},
        fix=fix_for(per_rank[0], setup_of(report, rank)),
        time_at_stake_us=float(np.mean([r["idle_other_us_per_step"] for r in per_rank])),
    )]


# The loop's thread off a CPU for this share of the time it had work to issue is contention, not launch cost.
OFF_CPU_SHARE = 0.25


def fix_for(ev: dict, setup=None) -> str:
    """The fix, with a note where the capture saw the loop's thread wait for a CPU or the interpreter lock while
    the DataLoader's pinning thread ran in the same process: then the launches are slow for a reason they share."""
    off, loop, pin = (ev.get("loop_thread_off_cpu_us_per_step"), ev.get("loop_thread_cpu_us_per_step"),
                      ev.get("pin_thread_cpu_us_per_step"))
    fix = launch_fix(setup, FIX)  # fitted to the run (diagnose/fixes.py)
    if not off or loop is None or off < OFF_CPU_SHARE * (off + loop) or not pin or pin < off:
        return fix
    return fix + (f"\n# the loop's thread was on a CPU {loop / 1000:.1f} ms of the {(loop + off) / 1000:.1f} ms a "
                  f"step it had work to issue, while the DataLoader's pinning thread ran {pin / 1000:.1f} ms a step "
                  f"in this process (one interpreter lock): fewer batch bytes for that thread first")
