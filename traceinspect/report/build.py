"""Report -> the JSON contract ``traceinspect.report/1``, built directly as the typed document (``report/doc.py``).

Field names here are a contract other tools build on: add fields, never rename. Values keep raw units
(microseconds, bytes); ``null`` where a number does not exist (e.g. GPU busy time of a CPU-only trace). Every
record is made by its Struct's constructor, field by field: a field the document does not declare is an error
here, never a key that silently vanishes.
"""

from __future__ import annotations

import math
from dataclasses import asdict, fields

import numpy as np
import pandas as pd
import msgspec
from msgspec import UNSET

from ..thresholds import DEFAULT
from ..analyze.categories import CPU_CATEGORIES, EXPOSED_NAMES, GPU_CATEGORIES
from ..analyze.timeline import step_intervals
from ..load.unmodelled import IMPOSSIBLE
from .columns import STEP_COLUMNS
from .values import clean, clean_records
from .doc import (SCHEMA, AfterFixDoc, ClaimDoc, CompileSetupDoc, CopySetupDoc, FindingDoc, LoaderBoundDoc,
                  LoaderSetupDoc, OptimizerSetupDoc, PartialStepDoc, RankDoc, ReportDoc, SetupDoc, SkippedDoc, StepDoc,
                  SummaryDoc, TimelineDoc, TimelineLaneDoc, UtilizationDoc)
from .doc_records import (CaptureMetadataDoc, CollectiveDoc, CommKindDoc, CrossRankDoc, JsonObject, MatmulKernelDoc,
                          RunsDoc, StrategyDoc, UtilizationSummaryDoc, UtilizationWindowDoc, VerdictDoc)
from .throughput import (cost_fields, finding_cost, job_throughput_doc, samples_per_step, throughput_doc,
                         tradeoff_fields)


def step_fields(row: dict, basis: str) -> dict:
    """One step-table row -> the keyword arguments of its ``StepDoc`` (its fields come from the column registry)."""
    d = {"step": int(row["step"]), "wall_us": clean(row["wall_us"]), "gpu_busy_us": clean(row.get("gpu_busy_us"))}
    if basis == "gpu":
        d["breakdown_us"] = {n: clean(row[f"bd_{n}"]) for n in EXPOSED_NAMES}
        d["breakdown_us"]["idle"] = clean(row["bd_idle"])
        d["totals_us"] = {n: clean(row[f"tot_{n}"]) for n in GPU_CATEGORIES}
    else:
        d["breakdown_us"] = {n: clean(row[f"cpu_{n}"]) for n in CPU_CATEGORIES}
        d["totals_us"] = {}
    d["basis"] = basis
    for key in ("h2d_bytes", "pageable_h2d_bytes", "d2h_bytes"):
        # A CPU-only trace has no copies to measure: null, not 0 (unknown is never zero).
        v = row.get(key)
        d[key] = None if v is None or _isnan(v) else int(v)
    d["dataloader_us"] = clean(row.get("dataloader_us", 0.0))
    # Exactly the registered step fields (report/columns.py); a column an analysis did not make on this rank
    # (CPU-only traces) stays absent.
    for c in STEP_COLUMNS:
        if c.name not in d and c.name in row:
            d[c.name] = clean(row[c.name])
    d["synthetic"] = bool(row.get("synthetic", False))
    return d


def _isnan(v) -> bool:
    return isinstance(v, float) and math.isnan(v)


def rank_summary(steps: list[StepDoc]) -> SummaryDoc:  # type: ignore[valid-type]
    """Means over the rank's steps (synthetic whole-window steps included when they are all there is)."""
    real = [s for s in steps if not s.synthetic] or steps
    n = len(real)
    if not n:
        return SummaryDoc(steps=0)

    def avg(get):
        vals = [get(s) for s in real]
        vals = [v for v in vals if v is not None]
        return sum(vals) / len(vals) if vals else None

    keys = list(real[0].breakdown_us)
    return SummaryDoc(
        steps=n,
        mean_wall_us=avg(lambda s: s.wall_us),
        min_wall_us=min(s.wall_us for s in real),
        max_wall_us=max(s.wall_us for s in real),
        mean_gpu_busy_us=avg(lambda s: s.gpu_busy_us),
        mean_breakdown_us={k: avg(lambda s, k=k: s.breakdown_us.get(k)) for k in keys},
        mean_h2d_bytes=avg(lambda s: s.h2d_bytes),
        mean_pageable_h2d_bytes=avg(lambda s: s.pageable_h2d_bytes),
        mean_d2h_bytes=avg(lambda s: s.d2h_bytes),
        mean_dataloader_us=avg(lambda s: s.dataloader_us),
    )


def _claims(claims) -> list[ClaimDoc]:
    return [ClaimDoc(**clean(c)) for c in claims]


def _records(table: pd.DataFrame | None) -> list[dict]:
    return clean_records(table) if table is not None else []


def typed_rows(rows: list[dict], kind) -> list:
    """``[typed(r, kind) for r in rows]`` for rows already cleaned (``clean_records``): one conversion for all of
    them, row by row only where one does not validate."""
    try:
        return msgspec.convert(rows, list[kind])
    except msgspec.ValidationError:
        return [typed(r, kind) for r in rows]


def typed(value, kind):
    """A JSON-shaped value the analyses made (cleaned: ``values.clean``) as its record type (``doc_records.py``);
    None stays None."""
    if value is None:
        return None
    value = clean(value)
    try:
        return msgspec.convert(value, kind)
    except msgspec.ValidationError:
        if not isinstance(value, dict):
            return None
    # a value of another type than its field's (a damaged or hand-written trace): read as absent, as the analyses
    # read it; the fields that hold stay
    kept = {}
    for k, v in value.items():
        try:
            msgspec.convert({k: v}, kind)
        except msgspec.ValidationError:
            continue
        kept[k] = v
    try:
        return msgspec.convert(kept, kind)
    except msgspec.ValidationError:  # a record with required fields that did not hold: none
        return None


def rank_doc(ra, acc: dict | None = None, thresholds=DEFAULT) -> RankDoc:
    acc = acc or {}
    step_claims = acc.get("step_claims") or {}
    colls = ra.tables.get("collectives")
    by_step: dict | None = None
    if colls is not None and len(colls):
        by_step = {}
        step_of = colls["step"].to_numpy().astype(np.int64).tolist() if "step" in colls else [-1] * len(colls)
        for step, doc in zip(step_of, typed_rows(clean_records(colls), CollectiveDoc)):
            by_step.setdefault(step, []).append(doc)
    kinds = ra.tables.get("comm_by_kind")
    by_kind: dict = {}
    for rec in kinds.to_dict("records") if kinds is not None else ():
        by_kind.setdefault(int(rec["step"]), []).append(typed({k: v for k, v in rec.items() if k != "step"}, CommKindDoc))
    steps = []
    for row in ra.steps.to_dict("records"):
        kw = step_fields(row, ra.basis)
        kw["claims"] = _claims(step_claims.get(kw["step"], []))
        if by_step is not None:
            kw["collectives"] = by_step.get(kw["step"], [])
            kw["comm_by_kind"] = by_kind.get(kw["step"], [])
        steps.append(StepDoc(**kw))
    util = ra.tables.get("utilization")
    util_summary = ra.tables.get("utilization_summary")
    matmul = ra.tables.get("matmul_kernels")
    partial = ra.tables.get("partial_steps")
    return RankDoc(
        rank=ra.rank,
        world_size=ra.world_size,
        files=list(ra.files),
        device=ra.device,
        compute_capability=list(ra.compute_capability) if ra.compute_capability else None,
        basis=ra.basis,
        events=ra.event_count,
        metadata=typed(ra.metadata or {}, CaptureMetadataDoc),
        summary=rank_summary(steps),
        utilization=UtilizationDoc(
            summary=typed(util_summary.to_dict("records")[0], UtilizationSummaryDoc)
            if util_summary is not None and len(util_summary) else None,
            windows=typed(_records(util), list[UtilizationWindowDoc]),
        ),
        matmul_kernels=typed(_records(matmul.sort_values("total_us", ascending=False).head(10)), list[MatmulKernelDoc])
        if matmul is not None and len(matmul) else [],
        errors=list(ra.errors),
        # The accounting (docs/findings.md): mean step, the step if every finding were fixed, disjoint claims.
        step_us=clean(acc.get("step_us")),
        projected_step_us=clean(acc.get("projected_step_us")),
        claims=_claims(acc.get("claims", [])),
        # ProfilerSteps the recording cut short at a window's end: seen, not counted (docs/metrics.md)
        partial_steps=[PartialStepDoc(**x) for x in _records(partial)],
        steps=steps,
        timeline=timeline_doc(ra),
        setup=setup_doc(getattr(ra, "setup", None)),
        unmodelled={k: v for k, v in (getattr(ra, "unmodelled", None) or {}).items() if k != IMPOSSIBLE} or UNSET,
        impossible_time_events=(getattr(ra, "unmodelled", None) or {}).get(IMPOSSIBLE) or UNSET,
        **_memory_fields(ra, thresholds),
        throughput=throughput_doc(ra),
        **tradeoff_fields(ra, thresholds, acc),
        **cost_fields(ra, acc, thresholds),
    )


def _memory_fields(ra, thresholds) -> dict:
    from .memory_doc import memory_doc

    doc, reason = memory_doc(ra, thresholds)
    return {"memory": doc} if doc is not None else {"memory": None, "memory_reason": reason}


def setup_doc(setup) -> SetupDoc | None:
    """The rank's ``Setup`` (analyze/setup.py), field by field: its nested records become their Structs."""
    if setup is None:
        return None
    kw = {f.name: getattr(setup, f.name) for f in fields(setup)}
    nested = {"optimizer": OptimizerSetupDoc, "compile": CompileSetupDoc, "loader": LoaderSetupDoc, "copies": CopySetupDoc}
    for name, doc in nested.items():
        kw[name] = doc(**asdict(kw[name]))
    kw["not_recorded"] = list(kw["not_recorded"])
    return SetupDoc(**kw)


def timeline_doc(ra) -> TimelineDoc | None:
    """The one step the timeline plot shows, as intervals (``analyze/timeline.py``: ``step_intervals``)."""
    tl = step_intervals(ra.tables.get("timeline"), ra.steps)
    if tl is None:
        return None
    return TimelineDoc(step=tl.step, start_us=tl.start_us, wall_us=tl.wall_us, steps_in_rank=tl.steps_in_rank,
                       breakdown=tl.breakdown, pageable=tl.pageable,
                       streams=[TimelineLaneDoc(stream=s.stream, events=s.events, intervals=s.intervals)
                                for s in tl.streams])


# A finding's accounting fields whose values are records of their own (docs/findings.md).
_NESTED = {"explained_by": _claims, "loader_bound": lambda d: LoaderBoundDoc(**d),
           "after_loader_fix": lambda d: AfterFixDoc(**d)}


def finding_doc(f, samples: dict | None = None, thresholds=DEFAULT) -> FindingDoc:
    extra = {k: clean(v) for k, v in f.extra.items()}
    extra.update(finding_cost(f, samples or {}, thresholds))
    for k, make in _NESTED.items():
        if k in extra:
            extra[k] = make(extra[k])
    return FindingDoc(id=f.id, severity=f.severity, title=f.title, ranks=clean(list(f.ranks)),
                      steps=clean(list(f.steps)), evidence=typed(f.evidence, JsonObject), fix=f.fix,
                      time_at_stake_us=clean(f.time_at_stake_us), docs=f.docs or f"traceinspect explain {f.id}",
                      **extra)


def build_doc(report) -> ReportDoc:
    """A diagnose ``Report`` -> its ``ReportDoc``."""
    acc = report.accounting or {}
    samples = samples_per_step(report)
    return ReportDoc(
        schema=SCHEMA,
        source=report.source,
        world_size=report.world_size,
        ranks_analyzed=len(report.ranks),
        ranks=[rank_doc(r, acc.get("ranks", {}).get(r.rank), report.thresholds) for r in report.ranks],
        verdict=typed(acc.get("verdict"), VerdictDoc),
        findings=[finding_doc(f, samples, report.thresholds) for f in report.findings],
        skipped=[SkippedDoc(file=s.file, reason=s.reason) for s in report.skipped],
        missing_ranks=list(report.missing_ranks),
        cross_rank=typed(report.cross_rank or {}, CrossRankDoc),
        errors=list(report.errors),
        runs=typed(report.runs, RunsDoc),  # runs, ranks, windows found (docs/folders.md)
        strategy=typed(strategy_doc(report), StrategyDoc),  # analyze/strategy.py over the rank analyses
        throughput=job_throughput_doc(report),  # analyze/throughput.py over the rank analyses
    )


def strategy_doc(report) -> dict:
    """The strategy the ranks show (analyze/strategy.py) and, where it names a parallelism but no rank recorded a
    collective, ``communication``: a sentence saying so (docs/communication.md)."""
    d = report.strategy.to_dict()
    colls = [ra.tables.get("collectives") for ra in report.ranks]
    if not report.strategy.kinds or not report.ranks or any(c is not None and len(c) for c in colls):
        return d
    if report.world_size == 1:
        d["communication"] = (f"no collective recorded: at world size 1 {report.strategy.parallelism} has no other "
                              "rank to exchange with, so it issues no all-gather, reduce-scatter or all-reduce (the "
                              "backend launches no communication kernel) and no communication finding applies")
    else:
        d["communication"] = "no collective recorded on any rank: no communication finding applies"
    return d
