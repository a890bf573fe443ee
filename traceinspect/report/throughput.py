"""The throughput records of the report (``ranks[].throughput`` and the job's ``throughput``), made from
``analyze/throughput.py``'s figures field by field (docs/metrics.md, "Throughput, FLOPs and MFU")."""

from __future__ import annotations

from dataclasses import asdict

import numpy as np
from msgspec import UNSET

from ..analyze.throughput import Throughput, job_throughput, rank_throughput
from .values import clean
from .doc import JobThroughputDoc, RooflineRowDoc, ThroughputDoc


def _doc(t: Throughput) -> ThroughputDoc:
    kw = {k: clean(v) for k, v in asdict(t).items() if k != "roofline"}
    return ThroughputDoc(**kw, roofline=[RooflineRowDoc(**clean(asdict(r))) for r in t.roofline])


def _rank_figures(ra) -> Throughput | None:
    """The rank's figures; None where its analysis lacks what they are read from (a report loaded from an older
    cache entry)."""
    if ra.steps is None or "wall_us" not in ra.steps:
        return None
    return rank_throughput(ra)


def throughput_doc(ra):
    """``ranks[].throughput``, or unset where the rank's analysis cannot give it."""
    t = _rank_figures(ra)
    return _doc(t) if t is not None else UNSET


def job_throughput_doc(report):
    """The job's ``throughput``: the ranks' figures with the world size and the strategy (analyze/strategy.py)."""
    figures = [t for t in (_rank_figures(ra) for ra in report.ranks) if t is not None]
    if not figures:
        return UNSET
    strategy = getattr(report, "strategy", None)
    kinds = tuple(getattr(strategy, "kinds", ()) or ())
    j = job_throughput(figures, report.world_size, kinds)
    return JobThroughputDoc(**{k: clean(v) for k, v in asdict(j).items()})


def _bf16_terms(ra, acc: dict | None, thresholds) -> tuple[float, float] | None:
    """(GPU us saved, CPU us added) per step by bf16 autocast: the no-mixed-precision rule's own claim terms (its
    ``Claim.gpu`` column and ``Claim.adds_cpu``), where the rank has that rule's claim; else None."""
    from ..diagnose.no_mixed_precision import RULE

    if not any(c.get("id") == RULE.id and (c.get("us") or 0) > 0 for c in (acc or {}).get("claims", [])):
        return None
    s = ra.steps
    if s is None or RULE.claim.gpu.column not in s or not len(s):
        return None
    ((_pool, gpu),) = RULE.claim.gpu.demands(None, ra, s, thresholds, 0.0)
    return float(np.nanmean(gpu)), float(np.nanmean(RULE.claim.adds_cpu(s, thresholds)))


def tradeoff_fields(ra, thresholds, acc: dict | None = None) -> dict:
    """``tradeoff`` (the rows) and ``tradeoff_model`` (the rows with the model's terms), or nothing."""
    from ..analyze.outlook import memory_outlook
    from ..analyze.tradeoff import tradeoff
    from .doc import TradeoffDoc, TradeoffRowDoc

    t = _rank_figures(ra)
    if t is None:
        return {}
    table = tradeoff(ra, t, memory_outlook(ra, thresholds), _bf16_terms(ra, acc, thresholds))
    if table is None or not table.options:
        return {}
    rows = [TradeoffRowDoc(batch=o.batch, accum_steps=o.accum_steps, step_ms=o.step_us / 1000,
                           peak_bytes=o.peak_bytes, fits=o.fits, allreduces=o.allreduces,
                           samples_per_s=o.samples_per_s,
                           gpu_hours_per_million_samples=clean(o.gpu_hours_per_million_samples),
                           current=o.current, best=o.best,
                           **({"precision": o.precision} if o.precision != "recorded" else {})) for o in table.options]
    return {"tradeoff": rows, "tradeoff_model": TradeoffDoc(logical_batch=table.logical_batch, basis=table.basis,
                                                            terms=clean(table.terms), rows=rows)}


def gpu_hours(us_per_step: float | None, samples_per_step: float | None) -> float | None:
    """GPU-hours per million samples of ``us_per_step`` on one GPU that trains ``samples_per_step`` a step."""
    if us_per_step is None or not samples_per_step:
        return None
    return us_per_step / 1e6 / samples_per_step * 1e6 / 3600


def cost_fields(ra, acc: dict | None, thresholds) -> dict:
    """``cost``: GPU-hours (and money) per million samples today and at the projected step; nothing where the
    samples per step are not known."""
    from .doc import CostDoc

    t = _rank_figures(ra)
    if t is None or not t.samples_per_step or not t.step_us:
        return {}
    price = thresholds.gpu_hour_price or None
    now = gpu_hours(t.step_us, t.samples_per_step)
    proj = gpu_hours((acc or {}).get("projected_step_us"), t.samples_per_step)
    return {"cost": CostDoc(gpu_hours_per_million_samples=now, projected_gpu_hours_per_million_samples=proj,
                            gpu_hour_price=price, cost_per_million_samples=now * price if price and now else None,
                            projected_cost_per_million_samples=proj * price if price and proj else None)}


def finding_cost(f, samples: dict, thresholds) -> dict:
    """A time finding's claim as GPU-hours (and money) per million samples on its claim rank; nothing where the
    claim or that rank's samples per step are not known."""
    rank = f.extra.get("claim_rank")
    hours = gpu_hours(f.time_at_stake_us, samples.get(rank)) if f.time_at_stake_us else None
    if hours is None:
        return {}
    out = {"gpu_hours_per_million_samples": hours}
    if thresholds.gpu_hour_price:
        out["cost_per_million_samples"] = hours * thresholds.gpu_hour_price
    return out


def samples_per_step(report) -> dict:
    """rank -> samples per step, where known."""
    out = {}
    for ra in report.ranks:
        t = _rank_figures(ra)
        if t is not None and t.samples_per_step:
            out[ra.rank] = t.samples_per_step
    return out
