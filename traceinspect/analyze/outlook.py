"""The memory outlook of a rank: its batch, the device's budget, the peak predicted at other batches, the largest
batch that fits, and the (batch, accumulation steps) pairs that keep the logical batch (docs/memory.md).

A pure function over what the per-rank stage made (``memory_*`` tables of analyze/memory.py, the step table's
batch columns, the capture metadata) and the settings; nothing here reads events.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .throughput import accumulation, physical_batch


@dataclass(frozen=True)
class Prediction:
    batch: int
    peak_allocated: int
    peak_reserved: int
    fits: bool | None  # None: no capacity known
    measured: bool


@dataclass(frozen=True)
class AccumOption:
    batch: int
    accum_steps: int
    logical_batch: int
    peak_allocated: int
    fits: bool | None
    current: bool


@dataclass(frozen=True)
class Outlook:
    batch: int | None
    batch_source: str
    accum: int | None
    accum_source: str
    capacity: int | None
    unseen: int
    unseen_recorded: bool
    reserved_ratio: float
    budget: float | None  # allocated bytes a step may peak at: capacity - unseen - slack
    peak_allocated: int
    peak_reserved: int | None
    max_batch: int | None
    envelope: pd.DataFrame  # memory_scaling: (step, fixed, scaling) where the prediction can peak
    predicted: list[Prediction] = field(default_factory=list)
    accum_options: list[AccumOption] = field(default_factory=list)

    def predict(self, batch: float) -> float | None:
        return predicted_peak(self.envelope, self.batch, batch) if self.batch and len(self.envelope) else None


def predicted_peak(env: pd.DataFrame, b0: int, b: float) -> float:
    """The predicted peak allocated bytes at batch ``b`` from the envelope (``memory_scaling``) of batch ``b0``:
    ``max_k fixed_k + scaling_k * b / b0``."""
    if not len(env):
        return float("nan")
    return float((env["fixed"].to_numpy(float) + env["scaling"].to_numpy(float) * (b / b0)).max())


def largest_fitting(env: pd.DataFrame, b0: int, budget: float) -> int | None:
    """The largest batch whose predicted peak stays within ``budget`` bytes (None: nothing scales with the batch;
    0: not even one sample fits)."""
    f, sc = env["fixed"].to_numpy(float), env["scaling"].to_numpy(float)
    if not len(f) or not (sc > 0).any():
        return None
    if (f[sc <= 0] > budget).any():
        return 0
    per = sc[sc > 0] / b0
    return int(max(np.floor((budget - f[sc > 0]) / per).min(), 0))


def memory_outlook(ra, thresholds) -> Outlook | None:
    """The rank's outlook, or None where the trace has no memory events."""
    t = ra.tables
    if "memory_steps" not in t or "memory_device" not in t:
        return None
    ms = t["memory_steps"]
    real = ms[ms["events"] > 0]
    if not len(real):
        return None
    dev = t["memory_device"].iloc[0]
    env = t.get("memory_scaling", pd.DataFrame(columns=["step", "fixed", "scaling"]))
    b0, bsrc = physical_batch(ra.metadata, ra.steps)
    accum, asrc = accumulation(ra.metadata, ra.steps)
    capacity = int(dev["capacity"]) if dev["capacity"] > 0 else None
    unseen = int(dev["unseen"]) if dev["unseen"] >= 0 else int(thresholds.memory_unseen_bytes)
    worst = real.loc[real["peak_allocated"].idxmax()]
    ratio = (float(worst["reserved_at_peak"]) / float(worst["peak_allocated"])
             if worst["reserved_at_peak"] > 0 and worst["peak_allocated"] > 0 else 1.0)
    ratio = max(ratio, 1.0)
    # The allocator's slack at the peak (reserved less allocated) is kept, in bytes, at another batch: its rounding
    # and cached blocks do not grow with the tensors (on an H100, the conv net's 197 MB of slack at batch 64 left
    # the largest batch found by running, 6,716, within 1.2 %; a ratio kept instead predicted 17 % too few).
    slack = max(float(worst["reserved_at_peak"]) - float(worst["peak_allocated"]), 0.0) \
        if worst["reserved_at_peak"] > 0 else 0.0
    budget = capacity - unseen - slack if capacity else None
    max_b = largest_fitting(env, b0, budget) if b0 and budget is not None else None
    reserved = int(real["peak_reserved"].max())
    out = Outlook(batch=b0, batch_source=bsrc, accum=accum, accum_source=asrc, capacity=capacity, unseen=unseen,
                  unseen_recorded=bool(dev["unseen_recorded"]), reserved_ratio=ratio, budget=budget,
                  peak_allocated=int(real["peak_allocated"].max()), peak_reserved=reserved if reserved >= 0 else None,
                  max_batch=max_b, envelope=env)
    if not b0 or not len(env):
        return out
    fits = (lambda pa: bool(pa <= budget)) if budget is not None else (lambda pa: None)
    cands = sorted({b0, 2 * b0, 4 * b0} | ({max_b} if max_b else set()) | (
        {max_b // 8 * 8} if max_b and max_b >= 8 else set()))
    for b in cands:
        pa = predicted_peak(env, b0, b)
        out.predicted.append(Prediction(batch=int(b), peak_allocated=int(round(pa)),
                                        peak_reserved=int(round(pa + slack)), fits=fits(pa), measured=b == b0))
    logical = b0 * (accum or 1)
    for b in divisors(logical):
        if max_b is not None and b > max_b and b != b0:
            continue
        pa = predicted_peak(env, b0, b)
        out.accum_options.append(AccumOption(batch=b, accum_steps=logical // b, logical_batch=logical,
                                             peak_allocated=int(round(pa)), fits=fits(pa), current=b == b0))
    return out


def divisors(n: int) -> list[int]:
    """The divisors of ``n`` in increasing order (the physical batches that keep a logical batch of ``n``)."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small) | {n // d for d in small})
