"""The JSON contract ``traceinspect.report/1`` as msgspec Structs, and the JSON Schema generated from them.

This module is the contract: field names are never renamed or removed, only added. It imports msgspec and the
column registry only (no numpy, no pandas), so a saved or cached report loads and renders without the analysis
stack.

Conventions:
- raw units (``_us`` microseconds, ``_bytes`` bytes, shares 0..1); ``null`` where a number does not exist;
- a field typed ``... | UnsetType`` is *optional*: absent from the JSON when the producing analysis did not run
  (or is not in this build), never written as a made-up value. Fields added in later versions are optional, so
  older reports still validate;
- decoding ignores fields this version does not know (a newer report loads; the unknown fields are dropped).
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

from ..severities import SEVERITIES
from .columns import STEP_COLUMNS
from .doc_records import (CaptureMetadataDoc, CollectiveDoc, CommKindDoc, CrossRankDoc, JsonObject, MatmulKernelDoc,
                          RunsDoc, StrategyDoc, UtilizationSummaryDoc, UtilizationWindowDoc, VerdictDoc)

SCHEMA = "traceinspect.report/1"

Num = float | int | None  # a JSON number (an integer count may be written without a fraction), or null
_TYPES = {"int": int | None, "float": Num, "bool": bool | None}


class LoaderBoundDoc(Struct, omit_defaults=True, kw_only=True):
    """How much of a finding's claim the measured DataLoader cut: no step gets shorter than its batches take at
    ``period_us`` each (``limited_by``: the workers, or the pinning thread that handles every batch)."""

    period_us: Num
    cut_us: Num
    limited_by: str | None | UnsetType = UNSET
    batches_per_step: Num | UnsetType = UNSET
    # No capture timed the loader: the pinning thread's floor estimated from the step's pinned batch bytes at
    # rate_gbps, the part of the claim below it left uncounted (not known either way).
    estimated: bool | UnsetType = UNSET
    pinned_bytes_per_step: Num | UnsetType = UNSET
    rate_gbps: Num | UnsetType = UNSET


class ClaimDoc(Struct, omit_defaults=True, kw_only=True):
    """Time per step a finding claims (``id``: the finding id), in us."""

    id: str
    us: Num
    after: str | UnsetType = UNSET  # the finding whose fix this saving needs first (the DataLoader's)


class AfterFixDoc(Struct, omit_defaults=True, kw_only=True):
    """What a finding saves only once another finding (``id``) is fixed: ``us`` per step, in ``steps``."""

    id: str
    us: Num
    steps: list[int]


def _step_doc() -> type:
    """StepDoc: the head fields, then one optional field per registered step column (see ``report/columns.py``)."""
    head = [
        ("step", int),
        ("wall_us", Num),
        ("gpu_busy_us", Num),  # null on CPU-only traces
        ("breakdown_us", dict[str, Num]),  # exclusive split of wall_us (GPU or training-thread categories)
        ("totals_us", dict[str, Num]),  # per GPU category, may overlap; {} on CPU-only traces
        ("basis", Literal["gpu", "cpu"]),
        ("synthetic", bool),  # true: a window without ProfilerStep annotations, taken as one step
    ]
    optional = [(c.name, Annotated[_TYPES[c.type] | UnsetType, Meta(description=f"{c.meaning} [{c.unit}]")], UNSET)
                for c in STEP_COLUMNS]
    extra = [
        ("collectives", list[CollectiveDoc] | UnsetType, UNSET),  # the step's collectives (docs/communication.md)
        # per collective kind and process group: count, bytes, time (docs/communication.md)
        ("comm_by_kind", list[CommKindDoc] | UnsetType, UNSET),
        # time of this step each finding claims (docs/findings.md); the rank's claims are their means
        ("claims", list[ClaimDoc] | UnsetType, UNSET),
    ]
    optional += [f for f in extra if f[0] not in {c.name for c in STEP_COLUMNS}]
    return msgspec.defstruct("StepDoc", head + optional, omit_defaults=True, kw_only=True)


StepDoc = _step_doc()


class SummaryDoc(Struct, omit_defaults=True, kw_only=True):
    """Means over a rank's steps (docs/metrics.md, Summary); only ``steps`` when the rank has none."""

    steps: int
    mean_wall_us: Num | UnsetType = UNSET
    min_wall_us: Num | UnsetType = UNSET
    max_wall_us: Num | UnsetType = UNSET
    mean_gpu_busy_us: Num | UnsetType = UNSET
    mean_breakdown_us: dict[str, Num] | UnsetType = UNSET
    mean_h2d_bytes: Num | UnsetType = UNSET
    mean_pageable_h2d_bytes: Num | UnsetType = UNSET
    mean_d2h_bytes: Num | UnsetType = UNSET
    mean_dataloader_us: Num | UnsetType = UNSET


class UtilizationDoc(Struct, kw_only=True):
    """The nvidia-smi view (docs/utilization.md): a summary (null without GPU) and one row per window."""

    summary: UtilizationSummaryDoc | None
    windows: list[UtilizationWindowDoc]


class PartialStepDoc(Struct, kw_only=True):
    """A ProfilerStep the recording cut short at a window's end: seen in the trace, not counted as a step."""

    step: int
    window: int
    cpu_us: Num  # duration of its ProfilerStep annotation


Span = list[float]  # [start, duration] in us since the step's start


class TimelineLaneDoc(Struct, kw_only=True):
    """One stream of the timeline step: per GPU category its event count and the union of its events."""

    stream: int
    events: dict[str, int]
    intervals: dict[str, list[Span]]


class TimelineDoc(Struct, kw_only=True):
    """The one step the timeline plot shows (the median-wall step), as intervals (docs/presentation.md)."""

    step: int
    start_us: float
    wall_us: float
    steps_in_rank: int
    breakdown: dict[str, list[Span]]  # per GPU category, the instants the step's breakdown gives it
    streams: list[TimelineLaneDoc]
    pageable: list[Span]  # the pageable host<->device copies


class OptimizerSetupDoc(Struct, kw_only=True):
    """The optimizer (docs/setup.md): its class, step calls, and fused / foreach / capturable (null: not known)."""

    present: bool
    name: str | None
    steps: int
    fused: bool | None
    foreach: bool | None
    capturable: bool | None


class CompileSetupDoc(Struct, kw_only=True):
    """torch.compile's markers in the trace, and the compile mode the capture recorded (null: not recorded)."""

    compiled: bool
    regions: int
    cache_lookups: int
    triton_kernels: int
    mode: str | None


class LoaderSetupDoc(Struct, kw_only=True):
    """The DataLoader's fetches in the steps and its settings (null: not recorded)."""

    fetches: int
    worker_fetches: int
    num_workers: int | None
    pin_memory: bool | None
    persistent_workers: bool | None
    batch_size: int | None
    source: str


class CopySetupDoc(Struct, kw_only=True):
    """Host<->device copies over the rank's steps, by direction and host memory (null on CPU runs)."""

    h2d_pinned_count: int | None
    h2d_pinned_bytes: int | None
    h2d_pageable_count: int | None
    h2d_pageable_bytes: int | None
    d2h_pageable_count: int | None
    d2h_pageable_bytes: int | None


class SetupDoc(Struct, kw_only=True):
    """What the rank's run is (docs/setup.md); every fix is fitted to it. null: not known; ``not_recorded`` names
    the facts neither the trace nor the capture metadata records."""

    device: str
    device_name: str | None
    optimizer: OptimizerSetupDoc
    compile: CompileSetupDoc
    graph_launches: int
    amp_dtype: str | None
    amp_source: str | None
    grad_scaler: bool | None
    loader: LoaderSetupDoc
    copies: CopySetupDoc
    cpu_count: int | None
    parallelism: str | None
    backend: str | None
    world_size: int | None
    not_recorded: list[str]


class MemoryStepDoc(Struct, kw_only=True):
    """One step's device memory (docs/memory.md): bytes after the allocator's events, exact."""

    step: int
    start_allocated_bytes: int | None
    peak_allocated_bytes: int | None
    peak_reserved_bytes: int | None  # null: the allocator reports no reserved bytes (host memory)
    end_allocated_bytes: int | None
    peak_at_us: Num  # when the peak happened, from the step's start
    slack_at_peak_bytes: int | None  # reserved - allocated at the peak
    fixed_at_peak_bytes: int | None  # what does not grow with the batch, at the peak
    scaling_at_peak_bytes: int | None  # what grows with the batch (this step's activations), at the peak
    host_peak_allocated_bytes: int | None  # the host allocator's peak in the step (device runs only)


class MemoryHolderDoc(Struct, kw_only=True):
    """Allocations alive at the peak: when they were made (``origin``), in which phase, by which top-level op."""

    origin: str  # "this step" | "earlier step" | "before the recording"
    phase: str  # forward | backward | optimizer | other ("" before the recording)
    op: str
    bytes: int
    count: int


class MemoryLeakDoc(Struct, kw_only=True):
    """Allocations a step made that the recording never saw freed (steps before the last)."""

    step: int
    phase: str
    op: str
    bytes: int
    count: int


class MemoryPredictionDoc(Struct, kw_only=True):
    """The predicted peak at a physical batch (docs/memory.md); ``fits``: within the device less what the
    allocator does not see (null: no capacity known); ``measured``: the batch the trace ran."""

    batch: int
    peak_allocated_bytes: int
    peak_reserved_bytes: int
    fits: bool | None
    measured: bool


class AccumulationOptionDoc(Struct, kw_only=True):
    """A (physical batch, accumulation steps) pair that keeps the run's logical batch exactly."""

    batch: int
    accum_steps: int
    logical_batch: int
    peak_allocated_bytes: int
    fits: bool | None
    current: bool


class MemoryDoc(Struct, omit_defaults=True, kw_only=True):
    """A rank's device memory (docs/memory.md). Bytes are exact; null where not known."""

    device_type: int  # the allocator's device type: 0 host (CPU-only run), 1 CUDA, 6 HIP (ROCm)
    device_id: int
    capacity_bytes: int | None  # deviceProperties[].totalGlobalMem
    peak_allocated_bytes: int | None  # the largest of the steps'
    peak_reserved_bytes: int | None
    peak_share: Num  # peak reserved over capacity
    unseen_bytes: int  # device memory the allocator does not see (context, NCCL, other processes)
    unseen_source: str  # "capture" (total - free - reserved when the capture began) | "assumed" (a setting)
    reserved_ratio: Num  # reserved / allocated at the peak (the prediction keeps the slack in bytes: docs/memory.md)
    alloc_conf: str | None  # PYTORCH_CUDA_ALLOC_CONF as the capture recorded it
    oom_events: int  # [OutOfMemory] events: allocations that failed
    steps: list[MemoryStepDoc]
    peak_holders: list[MemoryHolderDoc]  # what holds the largest peak, the largest first (12 rows at most)
    leaks: list[MemoryLeakDoc]
    growth_bytes_per_step: Num  # mean change of end_allocated from step to step
    batch_size: int | None  # samples per micro-batch on this rank
    batch_source: str | None
    accumulation_steps: int | None
    max_batch_predicted: int | None  # the largest physical batch predicted to fit
    predicted: list[MemoryPredictionDoc]
    accumulation_options: list[AccumulationOptionDoc]
    reasons: list[str]  # why a number is null
class RooflineRowDoc(Struct, kw_only=True):
    """One op group (op, input shapes, dtype) over the rank's steps against the device's roofline
    (docs/metrics.md, "Roofline"): FLOPs, bytes read and written, kernel time, FLOPs per byte, achieved and attainable
    TFLOP/s, achieved / attainable, and the kernel time above the roofline. null: not known."""

    op: str
    shapes: str | None
    dtype: str | None
    causal: bool
    calls: int
    flops: Num
    bytes: Num
    kernel_us: Num
    intensity: Num
    achieved_tflops: Num
    attainable_tflops: Num
    efficiency: Num
    lost_us: Num


class ThroughputDoc(Struct, kw_only=True):
    """A rank's throughput, model FLOPs, MFU and GPU time per sample (docs/metrics.md, "Throughput, FLOPs and MFU");
    means over the rank's steps. null: not known, with the reason in ``reasons`` (field -> one line)."""

    samples_per_s: Num
    tokens_per_s: Num
    model_flops_per_step: Num
    achieved_tflops: Num
    mfu: Num
    batch: int | None
    batch_source: str | None
    accum_steps: int | None
    accum_source: str | None
    samples_per_step: Num
    tokens_per_step: Num
    step_us: Num
    causal_skipped_flops_per_step: Num
    precision: str | None
    precision_source: str | None
    peak_device: str | None
    peak_tflops: Num
    peak_source: str | None
    gpu_seconds_per_1k_samples: Num
    gpu_seconds_per_million_tokens: Num
    gpu_hours_per_million_samples: Num
    reasons: dict[str, str]
    roofline: list[RooflineRowDoc]


class JobThroughputDoc(Struct, kw_only=True):
    """The job's throughput (docs/metrics.md, "The job"): the ranks' means x the world size where every rank trains
    on its own samples; GPU time per sample with every GPU counted. null: not known, with the reason."""

    world_size: int | None
    ranks: int
    samples_per_s: Num
    tokens_per_s: Num
    model_flops_per_step: Num
    achieved_tflops: Num
    mfu: Num
    gpu_seconds_per_1k_samples: Num
    gpu_seconds_per_million_tokens: Num
    gpu_hours_per_million_samples: Num
    reasons: dict[str, str]


class TradeoffRowDoc(Struct, kw_only=True):
    """One (physical batch, accumulation steps) option for the rank's logical batch (docs/metrics.md, "The
    trade-off table"): predicted from this trace, never a row the memory outlook predicts will not fit."""

    batch: int
    accum_steps: int
    step_ms: float  # predicted time per logical batch (one optimizer step), ms
    peak_bytes: int | None  # predicted peak allocated memory; null without memory events
    fits: bool | None  # within the device less what the allocator does not see; null: not known
    allreduces: int  # gradient all-reduce rounds per logical batch
    samples_per_s: float
    gpu_hours_per_million_samples: Num  # per GPU (the job's is the same: its samples scale with its GPUs)
    current: bool  # the configuration the trace ran
    best: bool  # the most samples per second of the rows
    # "bf16" on a row projected with bf16 autocast (memory not projected); absent on rows in the recorded precision
    precision: str | UnsetType = UNSET


class TradeoffDoc(Struct, kw_only=True):
    """The trade-off table and the measured terms of its model (us)."""

    logical_batch: int
    basis: str
    terms: dict[str, Num | bool]
    rows: list[TradeoffRowDoc]


class CostDoc(Struct, kw_only=True):
    """What a million samples cost on the rank's GPU, today and with every finding fixed (docs/metrics.md, "Cost"):
    GPU-hours, and money where ``gpu_hour_price`` is set (null otherwise; no price is assumed)."""

    gpu_hours_per_million_samples: Num
    projected_gpu_hours_per_million_samples: Num  # at the projected step (every time finding fixed)
    gpu_hour_price: Num
    cost_per_million_samples: Num
    projected_cost_per_million_samples: Num


class RankDoc(Struct, omit_defaults=True, kw_only=True):
    rank: int
    world_size: int | None
    files: list[str]
    device: str | None
    compute_capability: list[int] | None
    basis: Literal["gpu", "cpu"]
    events: int
    metadata: CaptureMetadataDoc
    summary: SummaryDoc
    utilization: UtilizationDoc
    matmul_kernels: list[MatmulKernelDoc]
    errors: list[str]
    steps: list[StepDoc]  # type: ignore[valid-type]
    partial_steps: list[PartialStepDoc] | UnsetType = UNSET
    # Optional: per-rank step time and what the findings claim of it.
    step_us: Num | UnsetType = UNSET
    projected_step_us: Num | UnsetType = UNSET
    claims: list[ClaimDoc] | UnsetType = UNSET
    timeline: TimelineDoc | None | UnsetType = UNSET  # null without GPU events
    collectives: list[CollectiveDoc] | UnsetType = UNSET  # never written (the steps carry them); for old readers
    setup: SetupDoc | None | UnsetType = UNSET  # what the run is (docs/setup.md); null: it could not be read
    # Events of a category no analysis models (another device's, a newer activity type): category -> count. Absent
    # when there are none (docs/metrics.md, "Events not modelled").
    unmodelled: dict[str, int] | UnsetType = UNSET
    # Events dropped because their time is no time (NaN, infinite, a negative duration, beyond any clock); absent
    # when there are none.
    impossible_time_events: int | UnsetType = UNSET
    # Device memory (docs/memory.md); null with ``memory_reason`` when the trace has no memory events.
    memory: MemoryDoc | None | UnsetType = UNSET
    memory_reason: str | UnsetType = UNSET
    # The batch x accumulation trade-off (docs/metrics.md); absent where batch or micro-batches are not known.
    tradeoff: list[TradeoffRowDoc] | UnsetType = UNSET
    tradeoff_model: TradeoffDoc | UnsetType = UNSET
    cost: CostDoc | UnsetType = UNSET  # absent where the samples per step are not known
    # Throughput, model FLOPs from the recorded shapes, MFU and GPU time per sample (docs/metrics.md)
    throughput: ThroughputDoc | UnsetType = UNSET


class FindingDoc(Struct, omit_defaults=True, kw_only=True):
    """A finding: the rule id (stable), severity, evidence (raw units, the thresholds crossed) and the fix."""

    id: str
    severity: Literal[SEVERITIES]  # type: ignore[valid-type]
    title: str
    ranks: list[int]
    steps: list[int]
    evidence: JsonObject  # the rule's evidence record (diagnose/<rule>.py), its fields as JSON values
    fix: str
    time_at_stake_us: Num
    docs: str
    share_of_step: Num | UnsetType = UNSET
    severity_reason: str | None | UnsetType = UNSET
    thin_evidence: str | None | UnsetType = UNSET  # why the evidence is too thin for a higher severity
    # Deprecated, never written: kept in the schema for readers of older reports (field names are a contract).
    # host-sync names the finding that reports its time in its evidence (``evidence.owned_by``) instead.
    owned_by: str | None | UnsetType = UNSET
    estimate_us: Num | UnsetType = UNSET  # the rule's own estimate, before the accounting (docs/findings.md)
    claim_rank: int | None | UnsetType = UNSET  # the rank whose steps time_at_stake_us is measured on
    explained_by: list[ClaimDoc] | UnsetType = UNSET  # gpu-idle: the findings that claim part of the idle time
    loader_bound: LoaderBoundDoc | UnsetType = UNSET  # the claim beyond the measured loader's pace, cut off
    after_loader_fix: AfterFixDoc | UnsetType = UNSET  # saved only once the DataLoader keeps up (paced steps)
    bytes_at_stake: int | None | UnsetType = UNSET  # a memory finding: bytes of peak memory its fix frees
    # a time finding's claim as GPU-hours per million samples on the claim rank (docs/metrics.md, "Cost"), and in
    # money where gpu_hour_price is set
    gpu_hours_per_million_samples: Num | UnsetType = UNSET
    cost_per_million_samples: Num | UnsetType = UNSET

    # The evidence is the rule's own record, open by nature; these read the parts of it every rule shares.
    def per_rank_evidence(self) -> list[dict] | None:
        """The evidence's records, one per rank (``per_rank``), when it has a non-empty list of them; else None."""
        return per_rank_entries(self.evidence)

    def evidence_for(self, rank: int | None = None) -> dict:
        """The evidence of one rank: its ``per_rank`` record (the given rank's, else the first listed), else the
        evidence itself when it is not per rank."""
        return evidence_entry(self.evidence, rank)

    def claim_note(self) -> str | None:
        """The evidence's ``claim_note``: why the claim is an upper bound, one line; None when it has none."""
        note = self.evidence.get("claim_note")
        return note if isinstance(note, str) and note else None


def per_rank_entries(evidence: JsonObject | None) -> list[dict] | None:
    """An evidence record's ``per_rank`` list when it is a non-empty list of records (JSON objects); else None."""
    per_rank = evidence.get("per_rank") if isinstance(evidence, dict) else None
    if isinstance(per_rank, list) and per_rank and all(isinstance(x, dict) for x in per_rank):
        return per_rank
    return None


def evidence_rank(entry: dict) -> int | None:
    """The rank a per-rank evidence record is about (its ``rank``); None when it names none."""
    rank = entry.get("rank")
    return rank if isinstance(rank, int) and not isinstance(rank, bool) else None


def evidence_entry(evidence: JsonObject, rank: int | None = None) -> dict:
    """One rank's evidence: the ``per_rank`` record of ``rank`` (the first listed when none is), else the evidence
    itself (a record that is not per rank)."""
    per_rank = per_rank_entries(evidence)
    if per_rank is None:
        return evidence
    return next((x for x in per_rank if evidence_rank(x) == rank), per_rank[0])


class SkippedDoc(Struct):
    """A file the report could not use, and why (one line)."""

    file: str
    reason: str


class ReportDoc(Struct, omit_defaults=True, kw_only=True):
    schema: str
    source: str
    world_size: int | None
    ranks_analyzed: int
    ranks: list[RankDoc]
    findings: list[FindingDoc]
    skipped: list[SkippedDoc]
    missing_ranks: list[int]
    cross_rank: CrossRankDoc
    errors: list[str]  # analyses, rules or modules that failed or could not run; the rest of the report stands
    verdict: VerdictDoc | None | UnsetType = UNSET
    runs: RunsDoc | None | UnsetType = UNSET
    strategy: StrategyDoc | UnsetType = UNSET  # the parallel strategy the trace shows (docs/communication.md)
    throughput: JobThroughputDoc | UnsetType = UNSET  # the job's throughput and GPU time (docs/metrics.md)


def from_dict(d: dict) -> ReportDoc:
    """A report dict (parsed JSON) -> ReportDoc; raises ``msgspec.ValidationError``."""
    return msgspec.convert(d, ReportDoc)


def to_dict(doc: ReportDoc) -> dict:
    """ReportDoc -> plain dicts and lists (what the renderers read); optional fields that are unset are absent."""
    return msgspec.to_builtins(doc)


def json_schema() -> dict:
    """The JSON Schema (draft 2020-12) of a report, generated from the Structs."""
    schema = msgspec.json.schema(ReportDoc)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://traceinspect.dev/schema/report-1.json"
    schema["title"] = SCHEMA
    return schema
