"""The JSON contract ``traceinspect.diff/1`` as msgspec Structs, and its JSON Schema.

The sections added for work vs rate (``runs``, ``work``, ``rate``, ``names``, ``verdict``, ``gate``) are typed here
field by field; the per-rank tables, the step-time comparison and the findings keep their dict shape (documented in
docs/diff.md). Fields are only added, never renamed. Imports msgspec only.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec
from msgspec import UNSET, Struct, UnsetType

Num = float | int | None


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
    reason: dict[str, str | None]  # base / new: why the figure is null on that side
    assessment: Literal["better", "worse", "same"] | None  # the change against ``better``; null: not known


class DiffDoc(Struct, omit_defaults=True, kw_only=True):
    schema: str
    rule: dict[str, Any]
    base: dict[str, Any]
    new: dict[str, Any]
    matched_by: str
    ranks: list[dict[str, Any]]
    only_in_base: list[int]
    only_in_new: list[int]
    overall: dict[str, Any] | None
    findings: dict[str, Any]
    runs: RunsDoc | UnsetType = UNSET
    work: list[WorkRowDoc] | UnsetType = UNSET
    rate: list[RateRowDoc] | UnsetType = UNSET
    names: NameSectionsDoc | UnsetType = UNSET
    verdict: VerdictDoc | UnsetType = UNSET
    gate: GateDoc | UnsetType = UNSET
    throughput: list[FigureRowDoc] | UnsetType = UNSET  # samples/s, tokens/s, TFLOP/s, MFU, GPU-hours
    memory: list[FigureRowDoc] | UnsetType = UNSET  # peak allocated and reserved bytes, capacity


def check(dd: dict) -> DiffDoc:
    """The diff dict typed (raises ``msgspec.ValidationError`` where it breaks the contract)."""
    return msgspec.convert(dd, DiffDoc)


def diff_json_schema() -> dict:
    schema = msgspec.json.schema(DiffDoc)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "traceinspect.diff/1"
    return schema


def diff_schema_text() -> str:
    """The published JSON Schema of the diff (docs/diff.schema.json) as text."""
    return msgspec.json.format(msgspec.json.encode(diff_json_schema()), indent=2).decode() + "\n"
