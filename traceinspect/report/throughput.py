"""The throughput records of the report (``ranks[].throughput`` and the job's ``throughput``), made from
``analyze/throughput.py``'s figures field by field (docs/metrics.md, "Throughput, FLOPs and MFU")."""

from __future__ import annotations

from dataclasses import asdict

from msgspec import UNSET

from ..analyze.throughput import Throughput, job_throughput, rank_throughput
from .doc import JobThroughputDoc, RooflineRowDoc, ThroughputDoc


def _doc(t: Throughput) -> ThroughputDoc:
    from .build import clean

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
    from .build import clean

    figures = [t for t in (_rank_figures(ra) for ra in report.ranks) if t is not None]
    if not figures:
        return UNSET
    strategy = getattr(report, "strategy", None)
    kinds = tuple(getattr(strategy, "kinds", ()) or ())
    j = job_throughput(figures, report.world_size, kinds)
    return JobThroughputDoc(**{k: clean(v) for k, v in asdict(j).items()})
