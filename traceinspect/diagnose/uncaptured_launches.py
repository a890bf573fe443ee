"""uncaptured-launches: the GPU waits on launches that a graph of the model's forward and backward leaves on the CPU.

**Detects** the launch wait ``launch-bound``'s fix does not remove: the GPU idle, nothing queued, while the step's
code ran work a CUDA graph of the forward and backward keeps on the CPU (``idle_launch_us`` less
``idle_launch_capturable_us``: the optimizer step, ``zero_grad``, the autograd engine's ``AccumulateGrad`` per
parameter, the Python between the regions; docs/metrics.md), and the idle between the steps' CPU windows
(``idle_host_us``: the loop's own Python). One graph of the whole step (forward, backward and the optimizer, with
its gradients kept in place) takes all of it off the CPU: the GPU then runs the step's kernels back to back.

**Condition**, per step (the rule fires when at least half of a rank's steps meet it): at least
``launch_bound_min_kernels`` (20) kernels in the step, and that wait at least ``step_capture_idle_share`` (10 %) of
the step.

**Evidence**: that wait per step and its parts (``kept_idle_us_per_step``: while the work a graph of the model
leaves ran; ``host_idle_us_per_step``: between the steps' CPU windows), its share of the step, the CPU time of the
step outside the capturable work (``kept_cpu_us_per_step``: ``cpu_issue_us - cpu_capturable_us``), kernels and
graph replays per step.

**Time at stake**: that wait less what launching the whole-step graph costs the CPU (``replay_us_per_step``: 1.45 us
a kernel launched one by one today, ``cudaGraphLaunch``'s cost per node measured on an H100 in fixtures/gpu_step_graph;
a loop that synchronizes every step waits for it), from what ``launch-bound`` explained and left unclaimed
(``Claim.claims_explained``), less what earlier claims of the launch pool took (``optimizer-not-fused``: a fused
optimizer's launches). With
``launch-bound``'s claim, every launch wait of the step is claimed once: the projection after both fixes is the
GPU's own work plus the waits for data, syncs and queued work, what a replay of the whole step reaches. What the
whole-step graph leaves on the CPU: the DataLoader (``dataloader-stall``), the batch's copy into the static inputs,
the replay's launch, the reads of the loss (``host-sync``); a trace that replays nothing does not show what a
replay costs the CPU, so the claim is an upper bound there.

**Fix**: one graph for the whole training step, fitted to the run (the optimizer's own class, capturable or
fused)::

    opt = torch.optim.AdamW(model.parameters(), lr=lr, capturable=True)   # its step inside the graph
    static_x, static_y = next(iter(loader))   # static inputs; warm up a few steps on a side stream first
    g = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)   # once, before the capture: the graph's backward makes the .grad tensors
    with torch.cuda.graph(g):
        loss = loss_fn(model(static_x), static_y); loss.backward(); opt.step()
    for x, y in loader:
        static_x.copy_(x, non_blocking=True); static_y.copy_(y, non_blocking=True); g.replay()

or ``torch.compile`` of the whole step (forward, backward, ``opt.step()``) with ``mode="reduce-overhead"``, the
optimizer capturable or fused, ``opt.zero_grad(set_to_none=False)`` (gradients kept, not set to None) and static
inputs. ``launch-bound``'s fix (``torch.compile(model, mode="reduce-overhead")``) replays the forward and backward
only and leaves this wait; a run that already replays graphs is told to move the rest of the step inside them.
"""

from __future__ import annotations

from typing import Annotated

import msgspec
import numpy as np

from ._rule import Claim, Needs, PerRank, RankHit, Rule
from ._util import mean, step_ids
from .bounds import col
from .takes import Custom
from .units import COUNT, Count, Share, Us

# Optimizers whose step can run inside a CUDA graph with ``capturable=True`` (its step count on the GPU).
CAPTURABLE = {"Adam", "AdamW", "NAdam", "RAdam", "Adamax", "ASGD", "Rprop"}
# Why the claim is at most what the fix saves in a trace that replays nothing.
UPPER_BOUND = ("an upper bound: what a replay of the whole step costs the CPU (the batch's copy into the static "
               "inputs, its launch) is not in a trace that replays nothing")


class RankEvidence(RankHit, kw_only=True):
    wait_us_per_step: Us  # the claim's basis: kept + host
    kept_idle_us_per_step: Us  # launch wait while work a graph of the model leaves on the CPU ran
    host_idle_us_per_step: Us  # idle between the steps' CPU windows
    share_of_step: Share
    kept_cpu_us_per_step: Us | None  # cpu_issue_us - cpu_capturable_us
    kernels_per_step: Count
    graph_launches_per_step: Count
    replay_us_per_step: Us | None = None  # the whole-step graph's own launch, kept out of the claim (estimated)


class Evidence(msgspec.Struct, kw_only=True):
    per_rank: list[RankEvidence]
    threshold_idle_share: Share
    min_kernels_per_step: Annotated[int, COUNT]
    claim_note: str | None = None


# CPU time a replay costs per kernel node of the graph (``cudaGraphLaunch``), during which a step that starts from an
# empty queue (a loop that synchronizes every step) leaves the GPU idle: on an H100 (CUDA 13, fixtures/gpu_step_graph)
# the whole-step graphs of 601 and 658 nodes took 0.81-0.97 and 0.63-0.94 ms to launch, 0.96-1.6 us a node.
REPLAY_US_PER_KERNEL = 1.45


def wait_us(s) -> np.ndarray:
    """Per step: the launch wait a graph of the model leaves, and the idle between the steps' CPU windows."""
    kept = np.clip(col(s, "idle_launch_us") - col(s, "idle_launch_capturable_us"), 0.0, None)
    return kept + col(s, "idle_host_us")


def replay_us(s) -> np.ndarray:
    """Per step: what launching one graph of the step's kernels (those launched one by one today) costs the CPU."""
    launched = col(s, "launch_count") if "launch_count" in s else col(s, "kernel_count")
    return REPLAY_US_PER_KERNEL * launched


NEED = ("idle_launch_us", "idle_launch_capturable_us", "idle_host_us", "kernel_count")


def _rank(ra, config, report):
    s = ra.steps
    if ra.basis != "gpu" or not len(s) or any(c not in s for c in NEED):
        return None
    wall = col(s, "wall_us")
    wait = wait_us(s)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(wall > 0, wait / wall, 0.0)
    mask = (s["kernel_count"].to_numpy(float) >= config.launch_bound_min_kernels) & (
        share >= config.step_capture_idle_share)
    if not mask.any() or mask.sum() * 2 < len(s):
        return None
    sel = s[mask]
    kept = np.clip(col(sel, "idle_launch_us") - col(sel, "idle_launch_capturable_us"), 0.0, None)
    cpu = (mean(np.clip(col(sel, "cpu_issue_us") - col(sel, "cpu_capturable_us"), 0.0, None))
           if "cpu_issue_us" in sel and "cpu_capturable_us" in sel else None)
    return RankEvidence(
        rank=ra.rank,
        steps=step_ids(s, mask),
        wait_us_per_step=float(wait[mask].mean()),
        kept_idle_us_per_step=float(kept.mean()),
        host_idle_us_per_step=mean(sel["idle_host_us"]),
        share_of_step=float(share[mask].mean()),
        kept_cpu_us_per_step=cpu,
        kernels_per_step=mean(sel["kernel_count"]),
        graph_launches_per_step=mean(sel["graph_launch_count"]) if "graph_launch_count" in sel else 0.0,
        replay_us_per_step=mean(replay_us(sel)),
    )


def _summary(hits, w, report, config):
    e = w.ev
    title = (f"GPU waits {100 * e.share_of_step:.0f} % of the step ({e.wait_us_per_step / 1000:.2f} ms, rank "
             f"{e.rank}) on launches a graph of the model leaves on the CPU: the optimizer, AccumulateGrad, "
             "zero_grad, the Python between")
    ev = Evidence(per_rank=[h.ev for h in hits], threshold_idle_share=config.step_capture_idle_share,
                  min_kernels_per_step=config.launch_bound_min_kernels,
                  claim_note=None if e.graph_launches_per_step else UPPER_BOUND)
    return ev, title, float(np.mean([max(h.ev.wait_us_per_step - (h.ev.replay_us_per_step or 0.0), 0.0)
                                     for h in hits]))


def _optimizer_line(setup) -> str:
    """The run's optimizer, made to step inside the graph (capturable, else fused), or a note where it is already."""
    opt = getattr(setup, "optimizer", None)
    name = getattr(opt, "name", None) if opt is not None and opt.present else None
    if name is None:
        return "opt = torch.optim.AdamW(model.parameters(), lr=lr, capturable=True)   # its step inside the graph"
    if opt.fused or opt.capturable:
        return f"# the {name} step is already {'fused' if opt.fused else 'capturable'}: capture it with the rest"
    if name in CAPTURABLE:
        return f"opt = torch.optim.{name}(model.parameters(), lr=lr, capturable=True)   # its step inside the graph"
    from .fixes import FUSED_CLASSES

    if name in FUSED_CLASSES:
        return f"opt = torch.optim.{name}(model.parameters(), lr=lr, fused=True)   # its step inside the graph"
    return f"# {name} has no capturable or fused form: its step stays on the CPU, outside the graph"


def fix(ev: Evidence, setup=None) -> str:
    from .fixes import _graphs, is_ddp

    if _graphs(setup):  # graphs of the model already: what is left is the rest of the step (advice, not new graphs)
        return "\n".join([
            "# the program already replays graphs of the model: the optimizer step,",
            "# zero_grad, AccumulateGrad and the Python between stay on the CPU; move",
            "# them into the captured step (forward, backward, opt.step() in one graph,",
            "# static inputs, gradients kept with zero_grad(set_to_none=False))",
            _optimizer_line(setup)])
    lines = [
        "# one CUDA graph for the whole step (forward, backward, optimizer): the",
        "# CPU keeps the batch's copy in, one replay and the reads of the loss",
        "# (torch.compile(model, mode=\"reduce-overhead\") keeps the optimizer,",
        "# zero_grad, AccumulateGrad and the Python between on the CPU)",
        _optimizer_line(setup),
        "static_x, static_y = next(iter(loader))   # static inputs; warm up a few steps on a side stream first",
        "g = torch.cuda.CUDAGraph()",
        "opt.zero_grad(set_to_none=True)   # once, before the capture: the graph's backward makes the .grad tensors",
        "with torch.cuda.graph(g):",
        "    loss = loss_fn(model(static_x), static_y); loss.backward(); opt.step()",
        "for x, y in loader:",
        "    static_x.copy_(x, non_blocking=True); static_y.copy_(y, non_blocking=True); g.replay()",
        "# or torch.compile(train_step, mode=\"reduce-overhead\") of the whole step, zero_grad(set_to_none=False)",
    ]
    if setup is not None and is_ddp(setup) and (setup.world_size or 1) > 1:
        lines.append("# DDP: build it on a side stream and run 11 warm-up steps before the capture (NCCL >= 2.9.6)")
    return "\n".join(lines)


def _claim(f, ra, s, config) -> list:
    return [("launch", wait_us(s))]


RULE = Rule(
    id="uncaptured-launches",
    title="The GPU waits on launches a graph of the model leaves on the CPU",
    needs=Needs(steps=("step", "wall_us"), gpu_steps=("kernel_count",)),
    claim=Claim(order=125, gpu=Custom(_claim, "`launch`: `idle_launch_us - idle_launch_capturable_us + idle_host_us` "
                                              f"less the replay's launch ({REPLAY_US_PER_KERNEL} us x `launch_count`), "
                                              "first from what `launch-bound` explained and left"),
                cpu=None, claims_explained=True, keeps=replay_us),
    label="launches outside the graph",
    thresholds=("step_capture_idle_share", "launch_bound_min_kernels"),
    evidence=Evidence, fix=fix, check=PerRank(_rank, _summary, worst=lambda e: e.share_of_step),
)
