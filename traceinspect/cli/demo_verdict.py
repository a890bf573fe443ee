"""The demo's verdict: is the optimized step faster than the baseline's, beyond what the machine's noise allows?

Standard library only (the demo runs where only torch, click and rich are). Pure: numbers in, a verdict out.

The demo captures the two presets in turn (baseline, optimized, baseline, ...), one *round* being one capture of
each, and judges the per-capture step time ``m`` (the slowest rank's mean step, as ``traceinspect diff``'s overall
line). With ``k_b`` and ``k_o`` captures and means ``M_b``, ``M_o``, the change is ``delta = M_o - M_b``; its noise:

* **between runs** (two or more captures a side): the run means' sample sd ``s_b``, ``s_o`` (``ddof=1``),
  ``se = sqrt(s_b^2 / k_b + s_o^2 / k_o)``, ``noise = t95(k_b + k_o - 2) * se`` (two-sided 95 % Student t);
  this holds what changes from one capture to the next (other work starting or stopping), which the steps of one
  capture cannot show;
* **step to step** (one capture a side, quiet machine only): the diff's own ``2 x SE`` over the steps.

The change counts when ``|delta| > max(noise, MIN_SHARE * M_b)``: ``faster`` (delta < 0) or ``slower``. On a busy
machine (other work kept the cores over ``BUSY_SHARE`` busy just before or after a capture) a step-to-step noise
is not trusted, and a change that is not faster reads ``cannot tell: machine busy``: the optimized step is the more
CPU-bound of the two, so competing work takes its share of the cores from it while the baseline spends that time
waiting in collectives anyway; a slower reading there is the machine's, not the fixes'.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

FASTER = "faster"
SLOWER = "slower"
WITHIN_NOISE = "within noise"
BUSY = "cannot tell: machine busy"

#: Smallest change that counts, as a share of the baseline's step (the diff's MIN_SHARE).
MIN_SHARE = 0.01
#: Share of the machine's CPU time that other work must take, around a capture, to call the machine busy.
BUSY_SHARE = 0.5
#: What the threshold was made of, by ``Verdict.noise``.
NOISE_BASIS = {"between runs": "between runs, t95 x the standard error of the captures' mean step times",
               "step to step": "step to step, 2 x the standard error of one capture a side",
               "unknown": "unknown with one capture a side on a busy machine"}
#: Two-sided 95 % quantiles of Student's t by degrees of freedom (beyond 30: the normal's 1.96).
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t95(df: int) -> float:
    """The two-sided 95 % Student t quantile for ``df >= 1`` degrees of freedom."""
    return _T95[df - 1] if df <= len(_T95) else 1.96


@dataclass(frozen=True)
class Verdict:
    label: str                 # FASTER, SLOWER, WITHIN_NOISE or BUSY
    base_us: float             # mean of the baseline captures' step times
    new_us: float              # mean of the optimized captures' step times
    delta_us: float            # new_us - base_us
    threshold_us: float | None # the change must exceed this to count (None: no noise estimate yet)
    noise: str                 # "between runs", "step to step" or "unknown"
    busy: bool                 # other work kept the cores busy before some capture

    @property
    def decided(self) -> bool:
        """Measuring more would not change the call: a counted change, faster or slower."""
        return self.label in (FASTER, SLOWER)

    @property
    def rel_change(self) -> float | None:
        return self.delta_us / self.base_us if self.base_us else None


def mean_sd(values: Sequence[float]) -> tuple[float, float | None]:
    """Mean and sample standard deviation (None for one value) of a non-empty sequence."""
    n = len(values)
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n >= 2 else None
    return mean, sd


def judge(base: Sequence[float], new: Sequence[float], busy: bool, step_noise_us: float | None = None) -> Verdict:
    """The verdict on the captures so far: ``base``, ``new`` are the per-capture step times (us, one or more a
    side), ``busy`` whether the machine was busy before any capture, ``step_noise_us`` the step-to-step noise
    (``2 x SE``) of one pair of captures, used only while there is one capture a side on a quiet machine."""
    if not base or not new:
        raise ValueError("judge needs at least one capture on each side")
    (mb, sb), (mn, sn) = mean_sd(base), mean_sd(new)
    delta = mn - mb
    if sb is not None and sn is not None:
        se = math.sqrt(sb ** 2 / len(base) + sn ** 2 / len(new))
        noise_us, basis = t95(len(base) + len(new) - 2) * se, "between runs"
    elif not busy and step_noise_us is not None:
        noise_us, basis = step_noise_us, "step to step"
    else:
        noise_us, basis = None, "unknown"
    threshold = None if noise_us is None else max(noise_us, MIN_SHARE * mb)
    counted = threshold is not None and abs(delta) > threshold
    if counted and delta < 0:
        label = FASTER
    elif busy:
        label = BUSY
    elif counted:
        label = SLOWER
    else:
        label = WITHIN_NOISE
    return Verdict(label=label, base_us=mb, new_us=mn, delta_us=delta, threshold_us=threshold, noise=basis,
                   busy=busy)
