"""The records of the report that the analyses hand over as JSON-shaped data: the capture metadata, the nvidia-smi
view, the matmul kernels, each step's collectives, the cross-rank result, the verdict, the runs of the folder and the
parallel strategy, typed field by field (``report/doc.py`` holds them in the document).

Fields are declared in the order their producers write them, so the JSON is what it was when these were plain
dicts; every field is optional (absent where its producer leaves it out) unless the producer always writes it.
Values that are open by nature (a workload's own settings, a rule's evidence) are ``JsonObject`` or
``JsonSection``: JSON objects of a bounded depth, never an arbitrary object.
"""

from __future__ import annotations

from typing import Union

from msgspec import UNSET, Struct, UnsetType

Num = float | int | None  # a JSON number, or null (report/doc.py's)
Scalar = Union[str, bool, int, float, None]


def _json(depth: int):
    t = Scalar
    for _ in range(depth):
        t = Union[str, bool, int, float, None, list[t], dict[str, t]]  # type: ignore[valid-type]
    return t


#: A JSON object whose values nest at most four deep: a rule's evidence (its records' lists of records of lists).
JsonObject = dict[str, _json(4)]  # type: ignore[valid-type]
#: A section of the capture metadata: values nest at most three deep (the capture writes two).
JsonSection = dict[str, _json(3)]  # type: ignore[valid-type]


class _Record(Struct, omit_defaults=True, kw_only=True):
    """Optional fields are absent from the JSON when unset; None is written as null."""


# ---------------------------------------------------------------------------------------------- capture metadata

class CaptureMetadataDoc(_Record):
    """What ``traceinspect.capture.profile`` wrote into the trace (its ``traceinspect`` key; docs/capture.md), in
    the order it writes it (sorted keys). Empty for a trace captured otherwise. The sections are the capture's own
    objects (``capture``: the schedule and options; ``dataloader``, ``ddp``: the objects handed in)."""

    accumulation_steps: int | None | UnsetType = UNSET
    amp_dtype: str | None | UnsetType = UNSET
    batch_size: int | None | UnsetType = UNSET
    capture: JsonSection | None | UnsetType = UNSET
    cpu_count: int | None | UnsetType = UNSET
    dataloader: JsonSection | None | UnsetType = UNSET
    ddp: JsonSection | None | UnsetType = UNSET
    device_memory: JsonSection | None | UnsetType = UNSET
    extra: JsonSection | None | UnsetType = UNSET
    grad_scaler: bool | None | UnsetType = UNSET
    loader_probe: JsonSection | None | UnsetType = UNSET
    loader_timing: JsonSection | None | UnsetType = UNSET
    no_sync: bool | None | UnsetType = UNSET
    process_threads: JsonSection | None | UnsetType = UNSET
    rank: int | None | UnsetType = UNSET
    schema: str | None | UnsetType = UNSET
    workload: JsonSection | None | UnsetType = UNSET
    world_size: int | None | UnsetType = UNSET

    def ddp_bucket_cap_mb(self) -> float | None:
        """DDP's ``bucket_cap_mb`` as the capture recorded it (the ``ddp`` section, the DDP object's settings), when
        it is a positive number; else None (not recorded)."""
        ddp = self.ddp
        mb = ddp.get("bucket_cap_mb") if isinstance(ddp, dict) else None
        return float(mb) if isinstance(mb, (int, float)) and mb > 0 else None


# ---------------------------------------------------------------------------------------------- per rank tables

class UtilizationSummaryDoc(_Record):
    """The nvidia-smi view over a rank's windows (docs/utilization.md, analyze/utilization.py ``summarize``)."""

    window_us: Num | UnsetType = UNSET
    windows: int | UnsetType = UNSET
    partial_windows_used: bool | UnsetType = UNSET
    mean_util: Num | UnsetType = UNSET
    min_util: Num | UnsetType = UNSET
    max_util: Num | UnsetType = UNSET
    share_below_50: Num | UnsetType = UNSET
    mean_comm_only: Num | UnsetType = UNSET
    low_windows: int | UnsetType = UNSET
    low_filler: str | None | UnsetType = UNSET
    low_fill_copy: Num | UnsetType = UNSET
    low_fill_dataloader: Num | UnsetType = UNSET
    low_fill_sync: Num | UnsetType = UNSET
    low_fill_other: Num | UnsetType = UNSET
    min_util_any_phase: Num | UnsetType = UNSET
    max_util_any_phase: Num | UnsetType = UNSET
    text: str | UnsetType = UNSET


class UtilizationWindowDoc(_Record):
    """One sample window: its GPU-Util and what filled the time no kernel ran (shares of the window)."""

    window: int
    window_start_us: Num
    window_end_us: Num
    partial: bool | None
    util: Num
    comm_only: Num
    copy: Num | UnsetType = UNSET
    dataloader: Num | UnsetType = UNSET
    sync: Num | UnsetType = UNSET
    other: Num | UnsetType = UNSET


class MatmulKernelDoc(_Record):
    """A matrix kernel (GEMM, convolution, attention), its precision and where that was read (docs/rules-precision.md)."""

    name: str
    precision: str | None
    family: str | None
    source: str | None
    op: str | None
    op_dtype: str | None
    count: int
    total_us: Num


class CollectiveDoc(_Record):
    """One collective of a step (docs/communication.md, analyze/collectives.py ``COLUMNS``, then its exposure)."""

    step: int
    name: str
    pg: str | None
    bytes: int | None
    nelems: int | None
    dtype: str | None
    group_size: int | None
    seq: int | None
    cpu_ts_us: Num
    cpu_dur_us: Num
    tid: int | None
    kernel: str | None
    kernel_ts_us: Num
    kernel_dur_us: Num
    ts_us: Num
    dur_us: Num
    algbw_gbps: Num
    busbw_gbps: Num
    phase: str | None
    backend: str | None
    source: str | None
    grad: bool | None
    pass_: int | None
    round: int | None
    bucket: int | None
    exposed_us: Num | UnsetType = UNSET


class CommKindDoc(_Record):
    """Per collective kind and process group in a step: count, bytes (null if any size is unknown), time."""

    name: str
    pg: str | None
    count: int
    bytes: Num
    unknown_size_count: int
    time_us: Num
    exposed_us: Num | UnsetType = UNSET


# ---------------------------------------------------------------------------------------------- across ranks

class UnmatchedDoc(_Record):
    """A collective some ranks lack."""

    step: int
    pg: str
    name: str
    seq: int | None
    ordinal: int
    ranks_present: list[int]
    ranks_missing: list[int]


class MatchedCollectiveDoc(_Record):
    """A collective matched on every rank: who arrived first and last, and the skew."""

    step: int
    pg: str
    name: str
    ordinal: int
    bytes: int | None
    arrival: str
    skew_us: Num
    issue_skew_us: Num
    last_rank: int
    first_rank: int


class RankWaitDoc(_Record):
    """A rank's time waiting in collectives in one step (the union of its wait intervals)."""

    rank: int
    step: int
    wait_us: Num


class StepWaitDoc(_Record):
    """A step's wait in the rank's collectives (``caused_wait_by_step``)."""

    step: int
    wait_us: Num


class RankStepWaitDoc(_Record):
    rank: int
    wait_us: Num


class CrossRankRankDoc(_Record):
    """One rank across the others: how often last, the skew then, the waiting it caused and its own."""

    rank: int
    last_count: int
    last_share: Num
    mean_skew_us: Num
    max_skew_us: Num
    caused_wait_per_step_us: Num
    caused_wait_by_step: list[StepWaitDoc]
    wait_per_step_us: Num
    wait_total_us: Num
    caused_wait_share: Num | UnsetType = UNSET


class CrossRankStepDoc(_Record):
    step: int
    wall_us: Num
    max_wait_us: Num
    wait_us_by_rank: list[RankStepWaitDoc]


class CauseDoc(_Record):
    """A per-step number of the late rank against the others' median (the straggler's cause candidates)."""

    metric: str
    label: str
    late_rank_us: Num
    others_us: Num
    difference_us: Num
    difference_se_us: Num


class StragglerDoc(_Record):
    """The rank whose lateness made the others wait longest, and why (docs/communication.md)."""

    rank: int
    last_count: int
    matched: int
    last_share: Num
    mean_skew_us: Num
    max_skew_us: Num
    caused_wait_per_step_us: Num
    caused_wait_share: Num
    caused_wait_by_step: list[StepWaitDoc]
    step_wall_us: Num
    skew_share: Num
    mean_skew_share: Num
    cause: CauseDoc | None
    candidates: list[CauseDoc]


class CrossRankDoc(_Record):
    """The cross-rank stage (analyze/cross_rank.py; docs/communication.md): empty (``{}``) with one rank."""

    ranks: list[int] | UnsetType = UNSET
    match_by: str | None | UnsetType = UNSET
    matched: int | UnsetType = UNSET
    unmatched_count: int | UnsetType = UNSET
    unmatched: list[UnmatchedDoc] | UnsetType = UNSET
    collectives: list[MatchedCollectiveDoc] | UnsetType = UNSET
    per_rank: list[CrossRankRankDoc] | UnsetType = UNSET
    per_step: list[CrossRankStepDoc] | UnsetType = UNSET
    wait: list[RankWaitDoc] | UnsetType = UNSET
    straggler: StragglerDoc | None | UnsetType = UNSET
    point_to_point: int | UnsetType = UNSET


# ---------------------------------------------------------------------------------------------- the report's head

class LargestClaimDoc(_Record):
    id: str
    us: Num
    severity: str | None
    title: str | None


class VerdictDoc(_Record):
    """The one line: the reference rank's step, the step with every finding fixed, the largest claim."""

    rank: int | UnsetType = UNSET
    step_us: Num | UnsetType = UNSET
    projected_step_us: Num | UnsetType = UNSET
    largest: LargestClaimDoc | None | UnsetType = UNSET
    text: str | UnsetType = UNSET


class ProcessDoc(_Record):
    rank: int | None
    pid: int | None
    host: str | None
    files: list[str]


class RunDoc(_Record):
    """One run found in the folder (docs/folders.md)."""

    run: int
    selected: bool
    folders: list[str]
    files: int
    ranks: list[int | None]
    world_size: int | None
    windows_per_rank: list[int]
    start_ns: int | None
    end_ns: int | None
    start: str | None
    clock: str
    processes: list[ProcessDoc]
    other_devices: list[str]
    notes: list[str] | UnsetType = UNSET


class RunsDoc(_Record):
    """The runs, ranks and windows the loader found in the folder, and which one is reported (docs/folders.md)."""

    count: int
    selected: int
    runs: list[RunDoc]
    other_runs_files: int
    copies_skipped: int
    summary: str
    notable: bool


class StrategyDoc(_Record):
    """The parallel strategy the ranks show (analyze/strategy.py; docs/communication.md)."""

    kinds: list[str]
    reshard_after_forward: bool | None
    pp_stages: int | None
    pp_microbatches: int | None
    pp_schedule: str | None
    evidence: list[str]
    parallelism: str
    communication: str | UnsetType = UNSET
