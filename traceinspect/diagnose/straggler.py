"""straggler: one rank arrives late at the collectives and every other rank waits for it.

**Detects**, from the cross-rank analysis (docs/communication.md): each collective matched on every rank, the
rank that arrived last (latest start of its NCCL kernel / gloo work, or latest CPU issue where there is no
execution record), and the time the other ranks spent waiting inside the collective for it.

**Condition**: one rank is last in at least ``straggler_min_last_share`` (60 %) of the matched collectives, or
causes at least that share of all the waiting the ranks cause one another (``caused_wait_share``: being last at a
collective nobody waited long for, e.g. a broadcast issued right after the one everybody waited at, is arrival
jitter, and with few collectives the count alone turns on it); ranks that take turns being last are noise, not a
straggler. Or, where a job has many collectives per step (FSDP: an all-gather per block), so that one late arrival
per step (at the step's first all-gather, after the slow data step) is outnumbered by the jitter at the others: the
rank causes more than half of the waiting, and its own extra work (the cause, below) accounts for at least
``CAUSE_MIN_SHARE`` of the waiting it causes. And the waiting it causes, net of the waiting the other ranks cause (mutual waiting cancels out), is at
least ``straggler_min_skew_us`` (500 us) per step and at least ``straggler_skew_share_warning`` (5 %) of the step.
Why: below 5 % (and half a millisecond) arrival jitter is ordinary; above it one rank's extra work sets the pace of
the whole job: a data-parallel step is as slow as its slowest rank. And, with ``MIN_STEPS`` (3) steps or more, the
lateness is there step after step: the net wait, taken per step (the waiting the rank causes in the step less what
the rank that causes the most of the rest causes in it), has a mean above ``straggler_noise_se`` (2) standard errors
of itself, or the cause named below does. A burst in one or two steps (on a shared host, a process descheduled
for a while) moves the mean as much as a slow rank does, but it is not one rank holding the others back, and the
next window would not show it.

**Why it matters**: the fast ranks' GPUs sit in NCCL kernels (or gloo waits) doing nothing. That time looks like
communication in their profiles but is waiting: a faster interconnect would not help, fixing the late rank
would.

**The cause**: the late rank's per-step numbers are compared with the median of the other ranks (DataLoader
wait, host-to-device copies, host syncs, GPU compute, CPU forward / backward / optimizer / other); the largest
excess is named *only when it explains most of the waiting* (at least ``CAUSE_MIN_SHARE``, 50 %, of the net wait
per step; the finding states the fraction) *and it is there step after step* (its mean excess above
``straggler_noise_se`` standard errors of itself over the steps). Waiting shows up on the other ranks, so the late rank's excess is what
made it late. When no number explains it, the finding says so: the delay is not in the profiled steps (it happened
before the window, or in work the trace does not record), and the largest difference is listed as not the cause.

**Thin evidence**: fewer than ``MIN_MATCHED`` (10) matched collectives, or fewer than 3 steps: the finding says so
(``thin_evidence: true``; the severity scale caps it at *warning*, docs/findings.md).

**Evidence**: the rank, how often last, mean and max arrival skew (us and share of the step), the waiting it
causes per step, the cause with both sides' numbers, and every candidate compared.

**Fix** (by cause)::

    # DataLoader: give the slow rank's input pipeline the same speed as the others
    loader = DataLoader(ds, num_workers=8, persistent_workers=True, prefetch_factor=4, pin_memory=True)
    # uneven work (variable sequence lengths): bucket samples by length so every rank gets similar work
    # rank-0-only work (logging, checkpointing, evaluation): make it asynchronous or spread it over ranks
    # slow device or host: check clocks / thermal throttling / noisy neighbours on that rank's machine
"""

from __future__ import annotations

from typing import Annotated, ClassVar

import msgspec

from ._rule import Claim, Needs, Rule, finding
from .fixes import setup_of
from .takes import Estimate
from .units import COUNT, Count, Share, Us

FIXES = {
    "dataloader_us": (
        "# rank {r} waits longer for its batches than the others: speed up its input pipeline\n"
        "loader = DataLoader(ds, batch_size=..., num_workers=8, persistent_workers=True,\n"
        "                    prefetch_factor=4, pin_memory=True)\n"
        "# and check that rank's data shard / storage (slow disk, remote files, expensive samples)"),
    "h2d_time_us": (
        "# rank {r} spends longer copying inputs to the GPU: pin host memory and copy asynchronously\n"
        "loader = DataLoader(ds, ..., pin_memory=True)\n"
        "x = x.to(device, non_blocking=True)"),
    "sync_us": (
        "# rank {r} blocks on host-device syncs the others do not: remove .item() / .cpu() / print(tensor)\n"
        "# from its step (rank-0-only logging is the usual culprit); log every N steps"),
    "compute_kernel_time_us": (
        "# rank {r} computes longer: uneven work (e.g. variable sequence lengths) or a slow GPU\n"
        "# bucket samples by length so every rank gets similar work; check clocks / throttling (nvidia-smi -q -d PERFORMANCE)"),
    "cpu_forward": "# rank {r} runs its forward slower: uneven inputs or a loaded CPU on its host",
    "cpu_backward": "# rank {r} runs its backward slower: uneven inputs or a loaded CPU on its host",
    "cpu_optimizer": "# rank {r} spends longer in the optimizer step: look for work only that rank does there",
    "cpu_other": (
        "# rank {r} does extra work on its training thread (logging, checkpointing, evaluation?)\n"
        "# make it asynchronous or spread it over all ranks"),
}
GENERIC_FIX = "# find what rank {r} does that the others do not (compare its step breakdown with theirs)"
UNSEEN_FIX = (
    "# what delays rank {r} is not in the profiled steps: profile a longer window, starting earlier\n"
    "# (schedule(wait=..., warmup=..., active=...) with more active steps), and look at what that rank does\n"
    "# between steps (checkpointing, evaluation, logging) and at its input pipeline")
CAUSE_MIN_SHARE = 0.5  # a cause is named when its excess explains at least half the waiting it is blamed for
MIN_MATCHED = 10  # fewer matched collectives than this: too few arrivals to call one rank the straggler firmly
MIN_STEPS = 3


def _ms_or_us(us: float) -> str:
    return f"{us / 1000:.1f} ms" if abs(us) >= 1000 else f"{us:.0f} us"


class Candidate(msgspec.Struct, kw_only=True):
    """One per-step number of the late rank against the others' median, as the cross-rank analysis compares them
    (the cause is the largest difference)."""

    metric: str  # the step column
    label: str
    late_rank_us: Us | None
    others_us: Us | None
    difference_us: Us | None
    difference_se_us: Us | None  # standard error of the difference's mean over the steps


class Evidence(msgspec.Struct, kw_only=True):
    FIX_ONLY: ClassVar = ("cpu_only",)
    rank: int
    last_count: Annotated[int, COUNT]
    matched_collectives: Annotated[int, COUNT]
    last_share: Share | None  # of the matched collectives
    caused_wait_share: Share | None  # of the waiting the ranks cause one another
    mean_skew_us: Us | None
    mean_skew_share: Share | None  # of the step
    max_skew_us: Us | None
    caused_wait_per_step_us: Us | None
    others_caused_wait_per_step_us: Us
    net_wait_per_step_us: Us  # what it costs the others, net of what they cost one another
    share_of_step: Share
    step_wall_us: Us
    cause: Candidate | None  # the cross-rank analysis' cause, where it explains at least CAUSE_MIN_SHARE of the wait
    cause_explains_share: Share | None  # of the net wait (above 1 where the difference exceeds it)
    largest_difference: Candidate | None
    thin_evidence: bool
    steps_with_collectives: Annotated[int, COUNT]
    threshold_cause_share: Share
    threshold_min_matched: Annotated[int, COUNT]
    candidates: list[Candidate]
    unmatched_collectives: Annotated[int, COUNT]
    threshold_min_last_share: Share
    threshold_share_warning: Share
    threshold_min_skew_us: Us
    cpu_only: bool = False  # every rank of the run is CPU-only: no GPU advice
    net_wait_se_us: Us | None = None  # standard error of the per-step net wait's mean (None: under MIN_STEPS)
    threshold_noise_se: Count | None = None  # how many standard errors


def fix(ev: Evidence, setup=None) -> str:
    out = FIXES.get(ev.cause.metric, GENERIC_FIX) if ev.cause else UNSEEN_FIX
    if ev.cpu_only:  # no GPU advice on a CPU-only run
        gpu_only = ",\n                    prefetch_factor=4, pin_memory=True)"
        out = out.replace(gpu_only, ",\n                    prefetch_factor=4)")
    out = out.format(r=ev.rank)
    if setup is not None and ev.cause and ev.cause.metric == "dataloader_us":
        from .fixes import fit_loader_fix  # the late rank's loader: workers within its cores, what it lacks

        head, *lines = out.split("\n")
        out = "\n".join([head, *fit_loader_fix(setup, lines, setup.loader.num_workers)])
    return out


def _cause_backed(s: dict) -> bool:
    """The rank causes more of the waiting than all the others together, and its own extra work (the cause)
    accounts for at least CAUSE_MIN_SHARE of the waiting it causes: a delay with a visible cause, not turns."""
    cause, gross = s.get("cause"), s.get("caused_wait_per_step_us") or 0.0
    return bool(cause and (s.get("caused_wait_share") or 0.0) > 0.5 and gross > 0
                and cause["difference_us"] >= CAUSE_MIN_SHARE * gross)


def _net_by_step(s: dict, others: list) -> list[float]:
    """Per step: the waiting the late rank caused, less what the other rank causing the most of the rest caused."""
    if not others:
        return [float(x["wait_us"] or 0.0) for x in s.get("caused_wait_by_step") or []]
    top = max(others, key=lambda p: p.get("caused_wait_per_step_us") or 0.0)
    theirs = {x["step"]: float(x["wait_us"] or 0.0) for x in top.get("caused_wait_by_step") or []}
    return [float(x["wait_us"] or 0.0) - theirs.get(x["step"], 0.0) for x in s.get("caused_wait_by_step") or []]


def _se(values: list[float]) -> float | None:
    n = len(values)
    if n < MIN_STEPS:
        return None
    mean = sum(values) / n
    return (sum((v - mean) ** 2 for v in values) / (n - 1)) ** 0.5 / n ** 0.5


def _steady(mean: float, se: float | None, config) -> bool:
    """Above the noise of its own step-to-step spread (always, where too few steps tell)."""
    return se is None or mean > config.straggler_noise_se * se


def check(report, config) -> list:
    cr = report.cross_rank or {}
    s = cr.get("straggler")
    if not s:
        return []
    min_last = config.straggler_min_last_share
    warn = config.straggler_skew_share_warning
    min_us = config.straggler_min_skew_us
    r = s["rank"]
    others = [p for p in cr.get("per_rank", []) if p["rank"] != r]
    others_caused = max((p.get("caused_wait_per_step_us") or 0.0 for p in others), default=0.0)
    net = (s.get("caused_wait_per_step_us") or 0.0) - others_caused
    wall = s.get("step_wall_us") or 0.0
    share = net / wall if wall > 0 else 0.0
    dominant = max(s.get("last_share") or 0.0, s.get("caused_wait_share") or 0.0) >= min_last
    if not (dominant or _cause_backed(s)) or net < min_us or share < warn:
        return []
    steps = sorted({int(c["step"]) for c in cr.get("collectives", []) if c.get("last_rank") == r})
    nsteps = len({int(c["step"]) for c in cr.get("collectives", [])})
    thin = (s.get("matched") or 0) < MIN_MATCHED or nsteps < MIN_STEPS
    cause = s.get("cause")
    explained = (cause["difference_us"] / net) if cause and net > 0 else None
    # a difference in one or two steps explains nothing about the others
    steady_cause = bool(cause) and _steady(cause["difference_us"] or 0.0, cause.get("difference_se_us")
                                           if nsteps >= MIN_STEPS else None, config)
    named = bool(cause and explained >= CAUSE_MIN_SHARE and steady_cause)
    net_se = _se(_net_by_step(s, others))
    if not named and not _steady(net, net_se, config):
        return []  # ranks late in turns, or one burst: nothing holds the others back step after step
    if named:
        why = (f": {cause['label']} (+{cause['difference_us'] / 1000:.1f} ms per step vs the others, "
               f"{100 * min(explained, 1.0):.0f} % of the wait)")
    else:
        shown = ""
        if cause and not steady_cause:
            shown = (f"; the largest difference, {cause['label']} (+{_ms_or_us(cause['difference_us'])}), is not "
                     "there step after step")
        elif cause:
            shown = (f"; the largest difference, {cause['label']} (+{_ms_or_us(cause['difference_us'])}), "
                     f"explains only {100 * max(explained, 0.0):.0f} %")
        why = (shown + "; what delays it is not visible in the profiled steps (it precedes the window or is not "
               "recorded)")
    title = (f"Rank {r} arrives last at {s['last_count']} of {s['matched']} collectives; the others wait "
             f"{net / 1000:.1f} ms per step ({100 * share:.0f} %){why}"
             + (f" [thin evidence: {s['matched']} matched collectives, {nsteps} steps]" if thin else ""))
    ev = Evidence(
        rank=r, last_count=s["last_count"], matched_collectives=s["matched"], last_share=s.get("last_share"),
        caused_wait_share=s.get("caused_wait_share"), mean_skew_us=s.get("mean_skew_us"),
        mean_skew_share=s.get("mean_skew_share"), max_skew_us=s.get("max_skew_us"),
        caused_wait_per_step_us=s.get("caused_wait_per_step_us"), others_caused_wait_per_step_us=others_caused,
        net_wait_per_step_us=net, share_of_step=share, step_wall_us=wall,
        cause=Candidate(**cause) if named else None, cause_explains_share=explained,
        largest_difference=Candidate(**cause) if cause else None, thin_evidence=thin,
        steps_with_collectives=nsteps, threshold_cause_share=CAUSE_MIN_SHARE, threshold_min_matched=MIN_MATCHED,
        candidates=[Candidate(**c) for c in s.get("candidates", [])],
        unmatched_collectives=cr.get("unmatched_count", 0),
        threshold_min_last_share=min_last, threshold_share_warning=warn, threshold_min_skew_us=min_us,
        cpu_only=all(ra.basis == "cpu" for ra in report.ranks), net_wait_se_us=net_se,
        threshold_noise_se=config.straggler_noise_se,
    )
    return [finding(RULE, ev, title=title, ranks=[r], steps=steps, stake=net, setup=setup_of(report, r))]


RULE = Rule(
    id="straggler",
    title="One rank holds the others back at every collective",
    needs=Needs(),  # reads the cross-rank analysis (report.cross_rank), no per-rank columns
    claim=Claim(order=40, gpu=Estimate(("comm",)), cpu=Estimate(("comm",)), other_ranks=True),
    label="straggler",
    thresholds=("straggler_min_last_share", "straggler_min_skew_us", "straggler_skew_share_warning",
                "straggler_noise_se"),
    evidence=Evidence, fix=fix, check=check,
)
