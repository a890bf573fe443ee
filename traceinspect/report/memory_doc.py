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


def memory_doc(ra) -> tuple[MemoryDoc | None, str | None]:
    """(the rank's MemoryDoc, None), or (None, why there is none)."""
    t = ra.tables
    if "memory_steps" not in t:
        return None, HOW_TO_RECORD
    dev = t["memory_device"].iloc[0]
    summ = t["memory_summary"].iloc[0]
    steps = [MemoryStepDoc(step=int(r["step"]), start_allocated_bytes=_int(r["start_allocated"]),
                           peak_allocated_bytes=_int(r["peak_allocated"]), peak_reserved_bytes=_int(r["peak_reserved"]),
                           end_allocated_bytes=_int(r["end_allocated"]), peak_at_us=_num(r["peak_at_us"]),
                           slack_at_peak_bytes=_int(r["slack_at_peak"]), fixed_at_peak_bytes=_int(r["fixed_at_peak"]),
                           scaling_at_peak_bytes=_int(r["scaling_at_peak"]),
                           host_peak_allocated_bytes=_int(r["host_peak_allocated"]))
             for r in _rows(t["memory_steps"])]
    peaks = [s.peak_allocated_bytes for s in steps if s.peak_allocated_bytes is not None]
    reserved = [s.peak_reserved_bytes for s in steps if s.peak_reserved_bytes is not None]
    capacity = _int(dev["capacity"])
    reasons = []
    if capacity is None:
        reasons.append("capacity: the trace names no device memory (deviceProperties[].totalGlobalMem)"
                       if int(dev["device_type"]) != 0 else "capacity: a CPU-only run (host memory)")
    b0 = summ["batch_size"]
    b0 = int(b0) if b0 is not None and not (isinstance(b0, float) and math.isnan(b0)) else None
    if b0 is None:
        reasons.append("batch_size: not recorded (capture metadata batch_size or the DataLoader's)")
    accum = summ["accumulation_steps"]
    accum = int(accum) if accum is not None and not (isinstance(accum, float) and math.isnan(accum)) else None
    holders = _rows(t.get("memory_peak"))
    return MemoryDoc(
        device_type=int(dev["device_type"]), device_id=int(dev["device_id"]), capacity_bytes=capacity,
        peak_allocated_bytes=max(peaks) if peaks else None, peak_reserved_bytes=max(reserved) if reserved else None,
        peak_share=(max(reserved) / capacity) if reserved and capacity else None,
        unseen_bytes=int(summ["unseen"]), unseen_source="capture" if bool(summ["unseen_recorded"]) else "assumed",
        reserved_ratio=_num(summ["reserved_ratio"]),
        alloc_conf=dev["alloc_conf"] if isinstance(dev["alloc_conf"], str) else None,
        oom_events=int(dev["oom_events"]), steps=steps,
        peak_holders=[MemoryHolderDoc(origin=h["origin"], phase=h["phase"], op=str(h["op"]), bytes=int(h["bytes"]),
                                      count=int(h["count"])) for h in holders[:TOP_HOLDERS]],
        leaks=[MemoryLeakDoc(step=int(x["step"]), phase=x["phase"], op=str(x["op"]), bytes=int(x["bytes"]),
                             count=int(x["count"])) for x in _rows(t.get("memory_leak"))],
        growth_bytes_per_step=_num(summ["growth_per_step"]),
        batch_size=b0, batch_source=summ["batch_source"] if isinstance(summ["batch_source"], str) else None,
        accumulation_steps=accum, max_batch_predicted=_int(summ["max_batch"]),
        predicted=[MemoryPredictionDoc(batch=int(p["batch"]), peak_allocated_bytes=int(p["peak_allocated"]),
                                       peak_reserved_bytes=int(p["peak_reserved"]),
                                       fits=None if p["fits"] is None or p["fits"] != p["fits"] else bool(p["fits"]),
                                       measured=bool(p["measured"])) for p in _rows(t.get("memory_predicted"))],
        accumulation_options=[AccumulationOptionDoc(batch=int(a["batch"]), accum_steps=int(a["accum_steps"]),
                                                    logical_batch=int(a["logical_batch"]),
                                                    peak_allocated_bytes=int(a["peak_allocated"]),
                                                    fits=None if a["fits"] is None or a["fits"] != a["fits"]
                                                    else bool(a["fits"]), current=bool(a["current"]))
                              for a in _rows(t.get("memory_accum"))],
        reasons=reasons,
    ), None
