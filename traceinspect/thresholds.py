"""The thresholds: what ``--set NAME=VALUE`` changes, and all that the analysis, the rules and the report's figures
read of the settings.

Every threshold says why it has the value it has (``setting(default, why)``: the field's metadata, what ``explain``
prints). Each rule declares the ones it reads (``RULE = Rule(..., thresholds=(...))``, diagnose/_rule.py); the rest
are read for every rule by the accounting (the severity scale, the bounds of a faster step), by the per-rank
analyses (the kernel and nvidia-smi views) or by the report's cost figures. The stages below the run are handed a
``Thresholds`` and nothing else of the settings: how to run is ``config.RunOptions`` (``run/``), what one trace file
may cost is ``load.limits.Limits`` (``load/``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace


def setting(default, why: str):
    """A threshold: its default and why it has that value (``reason``; ``traceinspect explain RULE`` shows it)."""
    return field(default=default, metadata={"why": why})


@dataclass(frozen=True)
class Thresholds:
    # --- dataloader-stall --------------------------------------------------------------------------------------
    dataloader_share_warning: float = setting(
        0.10,
        "Share of a step the main thread spends waiting in DataLoader.__next__ before we call it a stall. 10 "
        "%: below that, a faster loader gains little; above it, the data pipeline is a first-order cost of "
        "every step.")

    # --- pageable-memcpy ---------------------------------------------------------------------------------------
    pageable_min_bytes_per_step: int = setting(
        64 * 1024,
        "Any pageable host<->device copy is worth fixing (pinning is free), but a few bytes (e.g. a scalar "
        ".item()) are not a data-transfer problem. Copies below this many bytes per step are ignored by the "
        "rule.")

    # --- host-sync ---------------------------------------------------------------------------------------------
    host_sync_share_warning: float = setting(
        0.05,
        "Share of the step the CPU is blocked in synchronizing CUDA calls. 5 %: a blocked CPU cannot queue "
        "the next kernels, so each sync drains the GPU's queue; a couple of percent is normal (loss logging "
        "every step).")

    # --- gpu-idle ----------------------------------------------------------------------------------------------
    gpu_idle_share_warning: float = setting(
        0.15,
        "GPU idle share of the step window. nvidia-smi's 0-95 % flicker corresponds to idle shares of 20 % "
        "and more; 15 % is where a training step is clearly not keeping the GPU fed.")
    short_kernel_us: float = setting(
        10.0,
        "A kernel shorter than this (us) is \"short\": launch overhead (~5-10 us per launch on the CPU) rivals "
        "it.")

    # --- exposed-comm ------------------------------------------------------------------------------------------
    comm_exposed_share_warning: float = setting(
        0.10,
        "Communication not hidden behind compute, as a share of the step.")

    # --- pipeline-bubble / tp-exposed-comm ---------------------------------------------------------------------
    pp_bubble_share_warning: float = setting(
        0.10,
        "A pipeline stage's time blocked on its neighbours, as a share of its step: GPipe and 1F1B alone leave "
        "(p-1)/(m+p-1) idle (20 % at 2 stages x 4 micro-batches, 10 % at 2 x 10), so from 10 % the bubble is "
        "worth shrinking.")
    tp_comm_share_warning: float = setting(
        0.10,
        "Tensor-parallel collectives the step waits for, as a share of the step: inside every layer, they are "
        "on the critical path unless overlapped; from 10 % they are a first-order cost.")

    # --- small-buckets -----------------------------------------------------------------------------------------
    small_bucket_min_count: int = setting(
        8,
        "A step with at least this many gradient all-reduces per round, most of them smaller than "
        "small_bucket_bytes, spends its communication on per-call latency rather than bandwidth.")
    small_bucket_bytes: int = setting(
        4 * 1024 * 1024,
        "4 MiB: below roughly this size an NCCL all-reduce on NVLink/IB does not reach its bus bandwidth (the "
        "nccl-tests curves flatten between 4 and 64 MiB), so each call costs mostly fixed latency.")
    small_bucket_share: float = setting(
        0.5,
        "Share of all-reduce calls of a round that must be small for the rule to fire.")

    # --- straggler ---------------------------------------------------------------------------------------------
    straggler_skew_share_warning: float = setting(
        0.05,
        "The waiting one rank causes the others at collectives (net of the waiting they cause one another), as "
        "a share of the step, above which it is holding them back: below 5 % arrival jitter is ordinary.")
    straggler_min_skew_us: float = setting(
        500.0,
        "... and at least this many microseconds per step (tiny steps make shares noisy).")
    straggler_min_last_share: float = setting(
        0.6,
        "The same rank must arrive last at this share of collectives, or cause this share of all the waiting: "
        "below both, ranks taking turns is noise.")
    straggler_noise_se: float = setting(
        2.0,
        "The waiting a rank causes (net, per step), and the excess of the cause named for it, must each exceed "
        "this many standard errors of their mean over the steps: a burst in one or two steps (a process "
        "descheduled on a shared host) is not a rank that holds the others back, nor a cause that explains it.")

    # --- no-mixed-precision -----------------------------------------------------------------------------------
    fp32_matmul_share_warning: float = setting(
        0.20,
        "Share of kernel time in fp32 (FFMA, not TF32, not 16-bit) matrix work on a GPU with tensor cores "
        "(compute capability >= 8). A bf16 tensor-core GEMM is 8-16x faster than FFMA, so 20 % of kernel time "
        "is worth a precision review.")

    # --- launch-bound -----------------------------------------------------------------------------------------
    launch_bound_idle_share: float = setting(
        0.20,
        "GPU idle not explained by data waits or syncs, as a share of the step: large enough to recover.")
    launch_bound_min_kernels: int = setting(
        20,
        "Steps with very few kernels cannot be bound by their launches.")

    # --- uncaptured-launches ----------------------------------------------------------------------------------
    step_capture_idle_share: float = setting(
        0.10,
        "Launch wait a graph of the model's forward and backward leaves on the CPU (the optimizer, AccumulateGrad, "
        "zero_grad, the Python between), as a share of the step: below a tenth, capturing the whole step is not "
        "worth its constraints (static inputs, a capturable optimizer).")

    # --- optimizer-not-fused ----------------------------------------------------------------------------------
    optimizer_min_ops: int = setting(
        4,
        "An optimizer step with fewer ops than this is not judged.")

    # --- tensor-core-alignment --------------------------------------------------------------------------------
    tc_alignment_share: float = setting(
        0.10,
        "Share of 16-bit GEMM time in GEMMs whose dimensions are not multiples of 8.")

    # --- severity, from the time a finding claims (docs/findings.md) -------------------------------------------
    severity_critical_share: float = setting(
        0.25,
        "One scale for every rule, applied after the accounting has given each finding its disjoint claim. "
        "Critical: a quarter of the step, and at least 1 ms: fixing it alone makes the job visibly faster (a "
        "4/3 speed-up or more), and a sub-millisecond wait never is (a 26 us sync on a 100 us step is noise, "
        "not an emergency).")
    severity_critical_min_us: float = setting(
        1000.0,
        "Critical's absolute floor (us): see above.")
    severity_warning_share: float = setting(
        0.05,
        "Warning: 5 % of the step and 100 us: the smallest saving worth a code change on a job that runs for "
        "days.")
    severity_warning_min_us: float = setting(
        100.0,
        "Warning's absolute floor (us): see above.")
    severity_noise_se: float = setting(
        2.0,
        "A claim smaller than this many standard errors of the rank's mean step cannot be told from the "
        "step-to-step noise (a fix could not be confirmed by measuring the step): at most info.")
    thin_evidence_min_steps: int = setting(
        4,
        "Thin evidence caps a finding at warning: fewer steps than this, or (cross-rank rules) fewer matched "
        "collectives than this. With 3 steps one outlier is a third of the sample.")
    thin_evidence_min_collectives: int = setting(
        10,
        "Matched collectives below which a cross-rank finding rests on thin evidence: see above.")
    pinned_h2d_gbps_assumed: float = setting(
        25.0,
        "The pinned bandwidth a pageable copy is compared with when the trace has no pinned "
        "copy of its own to measure. 25 GB/s: a pinned copy over PCIe Gen4 x16 in practice (Gen5 parts reach "
        "~50), so the saving is not overstated.")
    loader_paced_min_us: float = setting(
        100.0,
        "A step in which the GPU idled at least this long (us) waiting for the DataLoader, and at least "
        "loader_paced_min_share of the step, is paced by the loader: a faster GPU does not make the next "
        "batch arrive sooner, so GPU-side savings (compute) claim nothing of it until the loader's fix. 100 "
        "us: the warning floor, far above the few microseconds a ready batch takes to hand over.")
    loader_paced_min_share: float = setting(
        0.02,
        "The share of the step the data wait must also reach: 2 %, above the jitter of a loader that keeps up "
        "(a 120 us wait in a 123 ms step is a batch that was nearly ready, not a loader setting the pace).")
    autocast_casts_per_gemm: float = setting(
        4.0 / 3.0,
        "Kernels bf16 autocast adds per fp32 GEMM kernel: each matrix op casts its two fp32 inputs (input, "
        "weight) forward and the cast's gradients flow back, ~4 cast kernels per op, whose 3 GEMMs (forward, "
        "two backward) are in the trace: 4/3. Each added kernel costs the CPU its measured time per launch.")
    pin_thread_min_gbps: float = setting(
        2.4,
        "A DataLoader with workers and pin_memory=True hands every batch to one thread of the training "
        "process, which rebuilds it from the workers' shared memory and copies it into pinned memory; no "
        "trace records that thread. Where the capture did not time it, no claim counts a step shorter than "
        "the step's pinned batch bytes take at this rate (GB/s): the slowest it ran in our captures (2.4 "
        "GB/s: 7.05 ms a 16.8 MB batch, H200 host, fixtures/gpu_pairs/s3_big_clean; 3.5-7.0 ms in all four s3 "
        "captures). The part below is left uncounted.")

    # --- device memory (docs/memory.md) ------------------------------------------------------------------------
    memory_unseen_bytes: int = setting(
        1 << 30,
        "Device memory the allocator's events cannot see (the CUDA context, NCCL's buffers, other processes), "
        "assumed where the capture did not record the device's free memory: 1 GiB, what a CUDA context (about "
        "0.5 GiB on H100/H200) and one NCCL communicator's buffers take. The largest batch is predicted within "
        "the capacity less this.")
    memory_near_full_share: float = setting(
        0.90,
        "The step's peak reserved memory at or above this share of the device. 90 %: the "
        "TensorBoard profiler's line; above it a longer sequence, a bigger batch or fragmentation runs the "
        "card out of memory.")
    memory_near_full_critical_share: float = setting(
        0.97,
        "Memory near full is critical at this share (or when an allocation failed): what is left is about the "
        "allocator's own rounding and one large activation.")
    memory_headroom_share: float = setting(
        0.50,
        "Headroom: the peak reserved memory below this share of the device, and a batch of at least "
        "twice today's predicted to fit. 50 %: half the card unused is room for twice the activations.")
    allocator_slack_share: float = setting(
        0.20,
        "Allocator slack: reserved minus allocated at the step's peak, as a share of reserved, at or above "
        "this. 20 %: the caching allocator's rounding costs a few percent; beyond a fifth, segments are "
        "fragmented by tensors whose sizes change (variable sequence lengths).")
    allocator_slack_min_bytes: int = setting(
        1 << 30,
        "The slack must also reach this many bytes (1 GiB): less is not worth a setting on a data-center card.")
    memory_growth_min_bytes: int = setting(
        16 << 20,
        "Growth: allocated memory at the step's end grows by at least this much from step to step, every "
        "step (16 MiB: above the allocator's rounding of a few small tensors, below one leaked activation).")
    ddp_gradient_copies_min_bytes: int = setting(
        64 << 20,
        "Gradient copies: the peak it would lower at least this much (64 MiB); smaller models gain little.")

    # --- cost (docs/metrics.md, "Cost") ---------------------------------------------------------------------------
    gpu_hour_price: float = setting(
        0.0,
        "The price of one GPU-hour, in your currency, to show costs beside GPU-hours; 0 (the default): no price is "
        "assumed and only GPU-hours are shown.")

    # --- nvidia-smi view ---------------------------------------------------------------------------------------
    util_window_us: float = setting(
        100_000.0,
        "nvidia-smi samples utilization over a period between 1/6 s and 1 s depending on the product; 100 ms "
        "matches `nvidia-smi dmon`'s finest view on data-center GPUs and resolves step-level flicker.")

    def with_overrides(self, **kw):
        """A copy with these fields changed; a name that is no field is a one-line ``UsageError`` (a removed
        setting names what replaced it)."""
        known = {f.name for f in fields(self)}
        bad = sorted(set(kw) - known)
        if bad:
            from .errors import UsageError

            gone = [f"{n}: removed ({REMOVED[n]})" for n in bad if n in REMOVED]
            raise UsageError("; ".join(gone) if gone else f"unknown setting(s): {', '.join(bad)}")
        return replace(self, **kw)

    def with_settings(self, pairs):
        """``["host_sync_share_warning=0.1", ...]`` (``--set``) -> a copy; each value parsed as its field's type (int
        or float) and checked (finite, >= 0, shares at most 1). One-line error otherwise."""
        return replace(self, **dict(parse_setting(p) for p in pairs))


# Settings that no longer exist, and what replaced them: a finding's severity comes from the time it claims, on
# one scale for every rule (docs/findings.md), so the rules' own severity lines did nothing.
_BY_CLAIM = "severity comes from the time a finding claims"
REMOVED = {
    **{f"{rule}_share_critical": f"{_BY_CLAIM}: use severity_critical_share / severity_critical_min_us"
       for rule in ("dataloader", "host_sync", "gpu_idle", "comm_exposed", "fp32_matmul", "straggler_skew",
                    "launch_bound_idle")},
    **{name: f"{_BY_CLAIM}: use severity_warning_share / severity_warning_min_us"
       for name in ("pageable_share_warning", "gradscaler_share_warning", "optimizer_share_warning",
                    "tc_alignment_narrow_share")},
    "ddp_bucket_cap_bytes": "it only echoed DDP's default bucket cap (25 MiB) into the evidence",
    "small_bucket_target_buckets": "the recommended bucket cap aims at 6 buckets per round, a constant of the "
                                   "rule (4-8 keep the first all-reduces overlapping backward)",
}


def reason(name: str) -> str:
    """Why a threshold has its value (its ``setting`` metadata)."""
    by_name = {f.name: f for f in fields(Thresholds)}
    return by_name[name].metadata.get("why", "") if name in by_name else ""


def thresholds() -> list:
    """The fields ``--set`` accepts (dataclass fields), in declaration order, each declared with ``setting``. Where
    and how to run have their own options (--workers, ...); the limits on what one file may cost are no threshold
    (raise one with Config(...) in the Python API)."""
    return [f for f in fields(Thresholds) if "why" in f.metadata]


def parse_setting(text: str) -> tuple[str, object]:
    """``"name=value"`` -> (name, typed value); raises ``UsageError`` with one line naming the problem."""
    from .errors import UsageError

    name, sep, raw = text.partition("=")
    name, raw = name.strip(), raw.strip()
    by_name = {f.name: f for f in thresholds()}
    if not sep or not name:
        raise UsageError(f"--set {text!r}: expected NAME=VALUE, e.g. --set host_sync_share_warning=0.1")
    if name in REMOVED:
        raise UsageError(f"--set {name}: removed ({REMOVED[name]})")
    if name not in by_name:
        close = [n for n in by_name if name.split("_")[0] in n][:4]
        hint = (f" (did you mean {', '.join(close)}?)" if close
                else " (`traceinspect explain RULE` lists a rule's thresholds)")
        raise UsageError(f"--set {name}: unknown setting{hint}")
    kind = by_name[name].type  # a string under `from __future__ import annotations`
    try:
        value = {"int": int, "float": float}[kind](raw.replace("_", ""))
    except (KeyError, ValueError):
        raise UsageError(f"--set {name}={raw}: expected a{'n' if kind == 'int' else ''} {kind}") from None
    if not value >= 0 or value == float("inf") or (name == "util_window_us" and value == 0):
        raise UsageError(f"--set {name}={raw}: must be a finite number {'> 0' if name == 'util_window_us' else '>= 0'}")
    if "share" in name and value > 1:
        raise UsageError(f"--set {name}={raw}: a share is between 0 and 1")
    return name, value


DEFAULT = Thresholds()
