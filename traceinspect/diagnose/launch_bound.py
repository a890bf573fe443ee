"""launch-bound: the GPU waits on the CPU, which cannot issue short kernels as fast as the GPU runs them.

**Detects** steps where the GPU sits idle between kernels while the training process is neither waiting for
data nor blocked in a sync (``idle_other_us``, see docs/metrics.md), and the kernels are shorter than the CPU
time spent per kernel: the CPU thread issues one kernel per PyTorch op (Python, the dispatcher, then a launch
call of a few microseconds), so when kernels run for a couple of microseconds the GPU drains its queue and waits.

**Condition**, per step (the rule fires when at least half of a rank's steps meet it):

- at least ``launch_bound_min_kernels`` (20) kernels in the step;
- idle time not explained by data or syncs, ``idle_other_us``, is at least ``launch_bound_idle_share`` (20 %) of
  the step: that much of the step is recoverable without touching the data pipeline;
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
**Time at stake**: what the prescribed fix removes, ``idle_launch_capturable_us`` (docs/metrics.md): the launch
overhead (``idle_launch_us``) during which the CPU ran work a CUDA graph of the model's forward and backward takes
off it (``cpu_capturable_us``: the eager ops and the Python between them, or a compiled region's generated code that
launches its kernels one by one). The fixed step keeps the rest of the CPU's work: the optimizer step (claimed by
``optimizer-not-fused`` where that fires), ``zero_grad``, ``AccumulateGrad`` per parameter, ``loss.item()`` and
syncs, the DataLoader, collectives, the Python between the regions; the GPU idle while those run is explained by this
finding (``kept_idle_us_per_step``) and claimed by ``uncaptured-launches`` (a graph of the whole step removes it)
where that fires, else by none. In a trace that replays no graph the claim is an upper bound
(``claim_note``): what a replay itself costs the CPU (its input copies and checks, its launch, the compiled wrappers
around it) is not in the trace. Step tables without the column (made before it existed) claim ``idle_other_us``.

**Fix**: fewer, larger kernels per unit of work, fitted to the run (diagnose/fixes.py): an eager model is
compiled with CUDA graphs, a compiled one gets them added, a graph-replaying one is told what is left::

    model = torch.compile(model, mode="reduce-overhead")   # CUDA graphs: forward and backward replayed
    loader = DataLoader(dataset, batch_size=4 * bs)    # more work per kernel (scale the learning rate)
    opt = torch.optim.AdamW(params, fused=True)        # one kernel for all parameters

or capture the static part of the step in a CUDA graph (``torch.cuda.graphs``). Where the loop's thread was off a
CPU a quarter or more of that time while the pinning thread ran longer than that, the fix says so first: the
launches are slow for a reason fewer launches do not remove (the threads share one interpreter lock).
"""

from __future__ import annotations

from typing import Annotated

import msgspec
import numpy as np

from ._memory import BatchFit, batch_fit
from ._rule import Claim, Needs, PerRank, RankHit, Rule
from ._util import first_window, mean, step_ids, thread_cpu_per_step
from .takes import Column
from .units import COUNT, Count, Share, Us

FIX = (
    'model = torch.compile(model, mode="reduce-overhead")   # CUDA graphs: forward and backward replayed\n'
    "# a fused optimizer: torch.optim.AdamW(params, fused=True)"
)
# Why a claim on a trace that replays no graph is at most what the fix saves.
UPPER_BOUND = ("an upper bound: what a graph replay itself costs the CPU (its input copies and checks, its launch, the "
               "compiled wrappers around it) is not in a trace that replays nothing")
U = msgspec.UNSET


class RankEvidence(RankHit, kw_only=True):
    kernels_per_step: Count
    median_kernel_us: Us
    short_kernels_per_step: Count | None
    launch_calls_per_step: Count | None
    launch_call_us_per_step: Us | None
    cpu_us_per_launch_call: Us | None
    cpu_us_per_kernel: Us
    graph_launches_per_step: Count
    kernels_per_launch: Count | None
    gpu_us_per_launch_median: Us
    cpu_us_per_launch: Us
    cpu_step_us: Us
    cpu_issue_us: Us  # the step's CPU time less data waits and blocked syncs
    idle_other_us_per_step: Us
    idle_other_share: Share  # the launch wait's share of the step
    # the claim's basis (analyze/issue.py, analyze/idle.py); None where the step table has no such column
    capturable_cpu_us_per_step: Us | None = None  # CPU time a CUDA graph of the model takes off the CPU
    idle_launch_us_per_step: Us | None = None  # launch overhead, all of it
    idle_launch_capturable_us_per_step: Us | None = None  # ... of it while that capturable work ran: the claim
    kept_idle_us_per_step: Us | None = None  # ... the rest, while work a graph leaves on the CPU ran
    smi_util: Share | None  # of the step window with a kernel running
    # where the capture timed the process's threads (process_threads)
    loop_thread_cpu_us_per_step: Us | msgspec.UnsetType = U
    loop_thread_off_cpu_us_per_step: Us | msgspec.UnsetType = U
    pin_thread_cpu_us_per_step: Us | None | msgspec.UnsetType = U


class Evidence(msgspec.Struct, kw_only=True):
    per_rank: list[RankEvidence]
    threshold_idle_share: Share
    min_kernels_per_step: Annotated[int, COUNT]
    claim_note: str | None = None  # where the claim is an upper bound of what the fix saves, why
    batch_fit: BatchFit | None = None  # whether a larger batch fits (the titled rank's memory, _memory.batch_fit)


def _rank(ra, config, report):
    s = ra.steps
    need = ("idle_other_us", "kernel_count", "median_kernel_us", "cpu_step_us")
    if ra.basis != "gpu" or not len(s) or any(c not in s for c in need):
        return None
    wall = s["wall_us"].where(s["wall_us"] > 0)
    # Launch overhead only (analyze/idle.py): the GPU idle, nothing queued, while the step's code ran.
    share = ((s["idle_launch_us"] if "idle_launch_us" in s else s["idle_other_us"]) / wall).fillna(0.0)
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
    mask = ((kernels >= config.launch_bound_min_kernels) & (share >= config.launch_bound_idle_share)
            & (gpu_per_launch < cpu_per_launch)).fillna(False).to_numpy()
    if not mask.any() or mask.sum() * 2 < len(s):
        return None
    sel = s[mask]

    def opt(c):  # a column's mean over the flagged steps, None where the rank has no such column
        return mean(sel[c]) if c in sel else None

    launches, launch_us = opt("launch_count"), opt("launch_call_us")

    threads, extra = thread_cpu_per_step(ra), {}  # where the capture timed the process's threads
    if threads is not None and threads["loop_us"] is not None:
        issue = mean(issue_us.clip(lower=0.0)[first_window(s)])  # over the steps the thread times cover
        # at least this long the loop's thread was off a CPU while it had work to issue (its CPU time also holds
        # any spin inside syncs, so the difference is a lower bound)
        extra = {"loop_thread_cpu_us_per_step": threads["loop_us"],
                 "loop_thread_off_cpu_us_per_step": max(issue - threads["loop_us"], 0.0),
                 "pin_thread_cpu_us_per_step": threads["pin_us"]}
    return RankEvidence(
        rank=ra.rank,
        steps=step_ids(s, mask),
        kernels_per_step=mean(sel["kernel_count"]),
        median_kernel_us=mean(sel["median_kernel_us"]),
        short_kernels_per_step=opt("short_kernel_count"),
        launch_calls_per_step=launches,
        launch_call_us_per_step=launch_us,
        cpu_us_per_launch_call=(launch_us / launches) if launches else None,
        cpu_us_per_kernel=mean(cpu_per_kernel[mask]),
        graph_launches_per_step=mean(sel["graph_launch_count"]) if "graph_launch_count" in sel else 0.0,
        kernels_per_launch=opt("kernels_per_launch"),
        gpu_us_per_launch_median=mean(gpu_per_launch[mask]),
        cpu_us_per_launch=mean(cpu_per_launch[mask]),
        cpu_step_us=mean(sel["cpu_step_us"]),
        cpu_issue_us=mean(issue_us[mask]),
        idle_other_us_per_step=mean(sel["idle_other_us"]),
        idle_other_share=mean(share[mask]),
        smi_util=opt("smi_util"),
        capturable_cpu_us_per_step=opt("cpu_capturable_us"),
        idle_launch_us_per_step=opt("idle_launch_us"),
        idle_launch_capturable_us_per_step=opt("idle_launch_capturable_us"),
        kept_idle_us_per_step=(opt("idle_launch_us") - opt("idle_launch_capturable_us")
                               if "idle_launch_us" in sel and "idle_launch_capturable_us" in sel else None),
        **extra,
    ), mean(n_launch[mask])


def _summary(hits, w, report, config):
    e, nlaunch, graph = w.ev, w.aux, w.ev.graph_launches_per_step
    # The share is all of the launch wait; the claim is the part of it the prescribed fix removes: both in ms here,
    # so the at-stake line (what the DataLoader's pace or other findings take of that part) reads on from the title.
    wait = e.idle_launch_us_per_step if e.idle_launch_us_per_step is not None else e.idle_other_us_per_step
    part = e.idle_launch_capturable_us_per_step
    title = (f"GPU waits on launches {100 * e.idle_other_share:.0f} % of the step ({wait / 1000:.2f} ms, rank {e.rank}"
             + (f"; {part / 1000:.2f} ms of it while work a graph of the model takes off the CPU ran"
                if part is not None and wait - part >= 0.005 * wait else "")
             + f"): {e.kernels_per_step:.0f} kernels/step"
             + (f" from {nlaunch:.0f} launches ({graph:.0f} graph replays)" if graph else "")
             + f", median {e.gpu_us_per_launch_median:.1f} us on the GPU vs {e.cpu_us_per_launch:.1f} us of CPU "
             "per launch")
    ev = Evidence(per_rank=[h.ev for h in hits], threshold_idle_share=config.launch_bound_idle_share,
                  min_kernels_per_step=config.launch_bound_min_kernels,
                  claim_note=None if graph else UPPER_BOUND, batch_fit=batch_fit(w.ra, config))
    return ev, title, float(np.mean([_claimed(h.ev) for h in hits]))


def _claimed(e: RankEvidence) -> float:
    """The rank's claim before the accounting: the capturable launch overhead, or (older tables) all of it."""
    c = e.idle_launch_capturable_us_per_step
    return e.idle_other_us_per_step if c is None else c


# The loop's thread off a CPU for this share of the time it had work to issue is contention, not launch cost.
OFF_CPU_SHARE = 0.25


def fix(ev: Evidence, setup=None) -> str:
    """The fix, with a note where the capture saw the loop's thread (of the rank the title names) wait for a CPU
    or the interpreter lock while the DataLoader's pinning thread ran in the same process: then the launches are
    slow for a reason they share."""
    e = ev.per_rank[0]
    off, loop, pin = (e.loop_thread_off_cpu_us_per_step or None, e.loop_thread_cpu_us_per_step,
                      e.pin_thread_cpu_us_per_step)
    loop, pin = (None if loop is U else loop), (None if pin is U else pin)
    from .fixes import launch_fix

    fixed = launch_fix(setup, FIX, ev.batch_fit)  # fitted to the run's setup and to what memory allows
    if not off or loop is None or off < OFF_CPU_SHARE * (off + loop) or not pin or pin < off:
        return fixed
    return fixed + (f"\n# the loop's thread was on a CPU {loop / 1000:.1f} ms of the {(loop + off) / 1000:.1f} ms a "
                  f"step it had work to issue, while the DataLoader's pinning thread ran {pin / 1000:.1f} ms a step "
                  f"in this process (one interpreter lock): fewer batch bytes for that thread first")


RULE = Rule(
    id="launch-bound",
    title="The GPU waits on kernel launches",
    needs=Needs(
        steps=("step", "wall_us"),
        gpu_steps=("idle_other_us", "kernel_count", "median_kernel_us", "cpu_step_us"),
    ),
    claim=Claim(order=120, gpu=Column("launch", "idle_launch_capturable_us", fallback="idle_other_us"), cpu=None,
                explains=Column("launch", "idle_other_us")),
    label="launch overhead",
    thresholds=("launch_bound_idle_share", "launch_bound_min_kernels"),
    evidence=Evidence, fix=fix, check=PerRank(_rank, _summary, worst=lambda e: e.idle_other_share),
)
