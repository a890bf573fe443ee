"""The JSON contract ``traceinspect.diff/1`` as msgspec Structs, and its JSON Schema.

Every section is typed here field by field (docs/diff.md), in the order ``report/diff.py`` and
``report/diff_runs.py`` write them: the noise rule, each side's summary, the per-rank tables, the step-time
comparison, the findings, and the sections of work vs rate (``runs``, ``work``, ``rate``, ``names``, ``verdict``,
``gate``, ``throughput``, ``memory``). Fields are only added, never renamed. Imports msgspec only.
"""

from __future__ import annotations

from typing import Generic, Literal, TypeVar

import msgspec
from msgspec import UNSET, Struct, UnsetType

Num = float | int | None
T = TypeVar("T")


class Pair(Struct, Generic[T], kw_only=True):
    """One value per side."""

    base: T
    new: T


class NoiseRuleDoc(Struct, kw_only=True):
    """When a change is significant (``report/diff.py``'s ``NOISE_RULE``)."""

    se_factor: float
    min_share_of_step: float
    text: str


class SideDoc(Struct, kw_only=True):
    """One side's report: its source, ranks, steps per rank (its real steps) and findings."""

    source: str | None
    world_size: int | None
    ranks: list[int]
    steps: dict[str, int]  # rank -> steps
    missing_ranks: list[int]
    findings: int


class StatsDoc(Struct, kw_only=True):
    """A side's steps: how many, their mean and sample standard deviation (null with fewer than 2)."""

    n: int
    mean_us: Num
    sd_us: Num


class RunNoiseDoc(Struct, kw_only=True):
    """The captures of each side and the spread between their means (``report/diff_noise.py``)."""

    base: int
    new: int
    measured: bool  # whether a side has several captures
    run_means_us: Pair[list[float]]
    between_run_sd_us: Pair[Num]
    note: str | None  # why the run-to-run variation is not measured


# The change of one metric, base against new, and whether it is beyond the noise (``report/diff.py``'s
# ``blank_comparison`` and ``judge``): the fields a metric row and the step-time comparison share, in their order.
_CHANGE = [
    ("base", StatsDoc),
    ("new", StatsDoc),
    ("delta_us", Num),
    ("rel_change", Num),
    ("share_of_step", Num),
    ("se_us", Num),
    ("noise_us", Num),
    ("threshold_us", Num),
    ("significant", bool | None),  # null: fewer than 2 steps on a side
    ("change", Literal["unknown", "up", "down", "none"]),
]

#: One metric of a pair of ranks (``metric``: wall, a breakdown category, or a CPU wait), base against new.
MetricDoc = msgspec.defstruct("MetricDoc", [("metric", str), ("kind", Literal["step", "breakdown", "cpu_wait"]),
                                            *_CHANGE], kw_only=True)


class RankDiffDoc(Struct, kw_only=True):
    """A pair of ranks compared: the base's and the new run's."""

    base_rank: int
    new_rank: int
    basis: Pair[str]
    steps: Pair[list[int]]  # the steps compared on each side
    device: Pair[str | None]
    metrics: list[MetricDoc]


#: The step time of the compared ranks (the slowest of each side) over every capture of each side; ``runs``: with
#: the captures of each side.
OverallDoc = msgspec.defstruct("OverallDoc", [("base_rank", int | None), ("new_rank", int | None), ("metric", str),
                                              *_CHANGE, ("runs", RunNoiseDoc | UnsetType, UNSET)],
                               omit_defaults=True, kw_only=True)


class FindingChangeDoc(Struct, omit_defaults=True, kw_only=True):
    """A finding matched by rule id (``key``: the id, ``id#2``... when a rule fired more than once)."""

    id: str
    key: str
    title: str | None
    severity: Pair[str | None]  # null on the side without the finding
    ranks: Pair[list[int] | None]
    time_at_stake_us: Pair[Num]
    title_base: str | None
    title_new: str | None
    direction: Literal["better", "worse"] | UnsetType = UNSET  # severity_changed only


class FindingChangesDoc(Struct, kw_only=True):
    disappeared: list[FindingChangeDoc]
    appeared: list[FindingChangeDoc]
    severity_changed: list[FindingChangeDoc]
    unchanged: list[FindingChangeDoc]


class RunsDoc(Struct, kw_only=True):
    base: list[str | None]  # the source of every capture of the base side
    new: list[str | None]
    ranks: dict[str, list[int | None]]  # the rank compared in each capture
    measured: bool  # whether run-to-run variation is part of the noise (several captures on a side)


class SpreadDoc(Struct, kw_only=True):
    base: Num
    new: Num


class WorkRowDoc(Struct, kw_only=True):
    key: str  # a step field of the report (docs/metrics.md), or loader.<setting> (setup.loader, docs/setup.md)
    label: str
    unit: Literal["count", "bytes", "us"]
    base: Num  # mean per step over the side's captures
    new: Num
    delta: Num
    spread: SpreadDoc  # range of the captures' means on each side (0 with one capture)
    changed: bool


class RateRowDoc(Struct, kw_only=True):
    key: str
    label: str
    unit: Literal["count", "bytes", "us"]
    base: Num
    new: Num
    rel_change: Num
    effect_us: Num  # per step: the new work times the change of the rate (docs/diff.md)
    changed: bool


class NameChangeDoc(Struct, kw_only=True):
    name: str
    shape: str | UnsetType = UNSET  # kernels by name and shape only
    base_count: float
    new_count: float
    base_us: float
    new_us: float
    delta_us: float


class SameNameDoc(Struct, kw_only=True):
    name: str
    count: float  # calls per step, the same on both sides
    base_us_per_call: float
    new_us_per_call: float
    rel_change: Num
    new_us: float
    shape: str | UnsetType = UNSET  # kernels by name and shape: grid and block, or "shape not recorded"


class TotalDoc(Struct, kw_only=True):
    count: float
    us: float


class NamesDoc(Struct, omit_defaults=True, kw_only=True):
    what: str
    available: bool  # false where a side is a saved report (the names are read from traces)
    changed_names: int | UnsetType = UNSET
    changed: list[NameChangeDoc] | UnsetType = UNSET
    changed_delta_us: float | UnsetType = UNSET
    changed_at_base_rate_us: float | UnsetType = UNSET  # the count changes at the base's time per call
    # of those, the DataLoader's fetches (CPU ops): where the loader's configuration changed, priced by its wait
    loader_at_base_rate_us: float | UnsetType = UNSET
    same: list[SameNameDoc] | UnsetType = UNSET
    same_names_base_rate_us: float | UnsetType = UNSET
    same_names_new_us: float | UnsetType = UNSET
    same_names_rel_change: Num | UnsetType = UNSET
    base_total: TotalDoc | UnsetType = UNSET
    new_total: TotalDoc | UnsetType = UNSET


class NameSectionsDoc(Struct, kw_only=True):
    kernels: NamesDoc
    ops: NamesDoc
    kernel_shapes: NamesDoc | UnsetType = UNSET  # kernels by name and launch shape (grid, block)


class WorkCostDoc(Struct, kw_only=True):
    us: Num  # the step change the work change predicts at the base's own rates (docs/diff.md)
    rel: Num  # us over the base step
    host_us: Num  # the host time it adds per step
    gpu_us: Num  # the GPU time it adds per step
    host_from: str  # what each side was priced from
    gpu_from: str


class VerdictDoc(Struct, kw_only=True):
    kind: Literal["none", "unknown", "machine", "code"]
    text: str
    bound: Literal["host", "gpu"] | None
    work_changed: bool
    work_items: list[str]
    work_explains_us: Num  # work_cost.us
    rates: list[str]  # the keys of the rates the verdict names
    work_cost: WorkCostDoc | None = None  # only where the work changed


class PerSampleDoc(Struct, kw_only=True):
    """The step per sample of each side, where the samples per step changed (docs/diff.md, "The regression gate")."""

    samples_per_step: SpreadDoc  # each side's (throughput.samples_per_step of the compared rank)
    changed: bool
    us_per_sample: SpreadDoc  # the steps' wall times over the samples per step: the mean over every capture
    rel_change: Num
    threshold_us: Num  # the noise threshold of the change, by the step time's rule (docs/diff.md)
    significant: bool | None  # beyond the noise (null: fewer than 2 steps on a side)
    work_cost_rel: Num  # the step the work change predicts at the base's rates, per sample, against the base's


class GateDoc(Struct, kw_only=True):
    pct: float
    count_machine: bool
    tripped: bool
    reasons: list[str]
    tripped_by: list[Literal["work", "step", "machine", "throughput"]] = []  # what tripped it
    per_sample: PerSampleDoc | UnsetType = UNSET  # only where the samples per step changed


class FigureRowDoc(Struct, kw_only=True):
    """One figure of the reports, base against new (docs/diff.md, "Throughput, MFU, GPU-hours and memory")."""

    key: str  # throughput.<field> or memory.<field> of the compared rank, job.<field> of the report's throughput
    scope: Literal["rank", "job"]
    label: str
    unit: str
    better: Literal["higher", "lower", "none"]
    base: Num  # mean over the side's captures; null: not known (reason.base says why)
    new: Num
    delta: Num
    rel_change: Num
    spread: SpreadDoc  # range of the captures' values on each side (0 with one capture)
    reason: Pair[str | None]  # why the figure is null on that side
    assessment: Literal["better", "worse", "same"] | None  # the change against ``better``; null: not known


class DiffDoc(Struct, omit_defaults=True, kw_only=True):
    schema: str
    rule: NoiseRuleDoc
    base: SideDoc
    new: SideDoc
    matched_by: str
    ranks: list[RankDiffDoc]
    only_in_base: list[int]
    only_in_new: list[int]
    overall: OverallDoc | None
    findings: FindingChangesDoc
    runs: RunsDoc | UnsetType = UNSET
    work: list[WorkRowDoc] | UnsetType = UNSET
    rate: list[RateRowDoc] | UnsetType = UNSET
    names: NameSectionsDoc | UnsetType = UNSET
    verdict: VerdictDoc | UnsetType = UNSET
    gate: GateDoc | UnsetType = UNSET
    throughput: list[FigureRowDoc] | UnsetType = UNSET  # samples/s, tokens/s, TFLOP/s, MFU, GPU-hours
    memory: list[FigureRowDoc] | UnsetType = UNSET  # peak allocated and reserved bytes, capacity


def check(dd: DiffDoc | dict) -> DiffDoc:
    """The diff dict typed (raises ``msgspec.ValidationError`` where it breaks the contract); a ``DiffDoc`` as it
    is."""
    return dd if isinstance(dd, DiffDoc) else msgspec.convert(dd, DiffDoc)


def diff_json_schema() -> dict:
    schema = msgspec.json.schema(DiffDoc)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "traceinspect.diff/1"
    return schema


def diff_schema_text() -> str:
    """The published JSON Schema of the diff (docs/diff.schema.json) as text."""
    return msgspec.json.format(msgspec.json.encode(diff_json_schema()), indent=2).decode() + "\n"
