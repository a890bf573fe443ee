"""A rank's memory tables (analyze/memory.py) -> its ``MemoryDoc``, field by field (docs/memory.md)."""

from __future__ import annotations

import math

import pandas as pd

from .doc import (AccumulationOptionDoc, MemoryDoc, MemoryHolderDoc, MemoryLeakDoc, MemoryPredictionDoc,
                  MemoryStepDoc)

HOW_TO_RECORD = ("the trace has no [memory] events: record them with torch.profiler.profile(..., "
                 "profile_memory=True) or traceinspect.capture.profile(..., profile_memory=True)")
TOP_HOLDERS = 12


def _int(v) -> int | None:
    """A byte count, or None where the analysis marked it unknown (-1, NaN)."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    v = int(v)
    return v if v >= 0 else None


def _num(v):
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def _rows(t: pd.DataFrame | None) -> list[dict]:
    return t.to_dict("records") if t is not None and len(t) else []


def memory_doc(ra, thresholds) -> tuple[MemoryDoc | None, str | None]:
    """(the rank's MemoryDoc, None), or (None, why there is none)."""
    from ..analyze.outlook import memory_outlook

    t = ra.tables
    o = memory_outlook(ra, thresholds)
    if o is None:
        return None, HOW_TO_RECORD
    dev = t["memory_device"].iloc[0]
    steps = [MemoryStepDoc(step=int(r["step"]), start_allocated_bytes=_int(r["start_allocated"]),
                           peak_allocated_bytes=_int(r["peak_allocated"]), peak_reserved_bytes=_int(r["peak_reserved"]),
                           end_allocated_bytes=_int(r["end_allocated"]), peak_at_us=_num(r["peak_at_us"]),
                           slack_at_peak_bytes=_int(r["slack_at_peak"]), fixed_at_peak_bytes=_int(r["fixed_at_peak"]),
                           scaling_at_peak_bytes=_int(r["scaling_at_peak"]),
                           host_peak_allocated_bytes=_int(r["host_peak_allocated"]))
             for r in _rows(t["memory_steps"])]
    reasons = []
    if o.capacity is None:
        reasons.append("capacity: the trace names no device memory (deviceProperties[].totalGlobalMem)"
                       if int(dev["device_type"]) != 0 else "capacity: a CPU-only run (host memory)")
    if o.batch is None:
        reasons.append(f"batch_size: {o.batch_source}")
    holders = _rows(t.get("memory_peak"))
    return MemoryDoc(
        device_type=int(dev["device_type"]), device_id=int(dev["device_id"]), capacity_bytes=o.capacity,
        peak_allocated_bytes=o.peak_allocated, peak_reserved_bytes=o.peak_reserved,
        peak_share=(o.peak_reserved / o.capacity) if o.peak_reserved is not None and o.capacity else None,
        unseen_bytes=o.unseen, unseen_source="capture" if o.unseen_recorded else "assumed",
        reserved_ratio=o.reserved_ratio,
        alloc_conf=dev["alloc_conf"] if isinstance(dev["alloc_conf"], str) else None,
        oom_events=int(dev["oom_events"]), steps=steps,
        peak_holders=[MemoryHolderDoc(origin=h["origin"], phase=h["phase"], op=str(h["op"]), bytes=int(h["bytes"]),
                                      count=int(h["count"])) for h in holders[:TOP_HOLDERS]],
        leaks=[MemoryLeakDoc(step=int(x["step"]), phase=x["phase"], op=str(x["op"]), bytes=int(x["bytes"]),
                             count=int(x["count"])) for x in _rows(t.get("memory_leak"))],
        growth_bytes_per_step=_num(dev["growth_per_step"]),
        batch_size=o.batch, batch_source=o.batch_source if o.batch else None, accumulation_steps=o.accum,
        max_batch_predicted=o.max_batch,
        predicted=[MemoryPredictionDoc(batch=p.batch, peak_allocated_bytes=p.peak_allocated,
                                       peak_reserved_bytes=p.peak_reserved, fits=p.fits, measured=p.measured)
                   for p in o.predicted],
        accumulation_options=[AccumulationOptionDoc(batch=a.batch, accum_steps=a.accum_steps,
                                                    logical_batch=a.logical_batch,
                                                    peak_allocated_bytes=a.peak_allocated, fits=a.fits,
                                                    current=a.current) for a in o.accum_options],
        reasons=reasons,
    ), None
