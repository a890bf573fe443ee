"""The step time of several captures per side: the spread between runs joins the step-to-step noise (pure).

One side is a list of runs, each a list of step times (us) of one rank. With ``k`` runs of ``n_i`` steps, means
``m_i`` and sample sds ``sd_i``:

* the side's mean is the mean of the run means (each capture weighs the same);
* the within-run variance ``w = mean(sd_i^2)``; the between-run variance ``b = var(m_i)`` (ddof=1; k >= 2);
* the side's standard error ``se^2 = max(b, w / n) / k`` where ``n`` is the mean step count (the run means vary
  at least as much as their own steps allow), and with one run ``se^2 = w / n`` (Welch's, as for one capture);
* a side with one run borrows the other side's between-run variance when that side has several runs (one machine,
  one job: its run-to-run variation applies to both);
* the change is significant when ``|delta| > SE_FACTOR * sqrt(se_base^2 + se_new^2)`` and ``> MIN_SHARE`` of the
  base mean step (``report/diff.py``'s rule).

With one run on each side the between-run variation is not measured, and the result says so.
"""

from __future__ import annotations

import math

from .diff import blank_comparison, describe, judge

NOT_MEASURED = ("run-to-run variation is not measured (one capture per side): the noise is the step-to-step spread "
                "inside each run, which can be far smaller than the difference between two captures of one job")


def _stats(vals: list[float]) -> dict:
    d = describe(vals)
    return {"n": d["n"], "mean_us": d["mean_us"], "var": d["sd_us"] ** 2 if d["sd_us"] is not None else None}


def side_stats(runs: list[list[float]]) -> dict:
    """One side: the runs' stats, the mean of run means, the within- and between-run variances."""
    per = [s for s in (_stats(r) for r in runs) if s["n"]]
    if not per:
        return {"runs": 0, "n": 0, "mean_us": None, "within_var": None, "between_var": None, "n_mean": 0,
                "run_means_us": []}
    means = [s["mean_us"] for s in per]
    k = len(per)
    mean = sum(means) / k
    var = [s["var"] for s in per if s["var"] is not None]
    within = sum(var) / len(var) if len(var) == k else None
    between = sum((m - mean) ** 2 for m in means) / (k - 1) if k >= 2 else None
    return {"runs": k, "n": sum(s["n"] for s in per), "mean_us": mean, "within_var": within,
            "between_var": between, "n_mean": sum(s["n"] for s in per) / k, "run_means_us": means}


def _se2(side: dict, borrowed_between: float | None) -> float | None:
    if side["within_var"] is None:
        return None
    within = side["within_var"] / side["n_mean"]
    between = side["between_var"] if side["between_var"] is not None else borrowed_between
    if between is None:
        return within
    return max(between, within) / side["runs"]


def compare_runs(base: list[list[float]], new: list[list[float]], step_us: float | None,
                 se_factor: float, min_share: float) -> dict:
    """The diff's ``compare`` over several runs per side (module docstring); the same keys, plus ``runs``."""
    a, b = side_stats(base), side_stats(new)

    def pub(s: dict) -> dict:
        sd = math.sqrt(s["within_var"]) if s["within_var"] is not None else None
        return {"n": s["n"], "mean_us": s["mean_us"], "sd_us": sd}

    measured = a["between_var"] is not None or b["between_var"] is not None
    out = {**blank_comparison(pub(a), pub(b)),
           "runs": {"base": a["runs"], "new": b["runs"], "measured": measured,
                    "run_means_us": {"base": a["run_means_us"], "new": b["run_means_us"]},
                    "between_run_sd_us": {k: (math.sqrt(s["between_var"]) if s["between_var"] is not None else None)
                                          for k, s in (("base", a), ("new", b))},
                    "note": None if measured else NOT_MEASURED}}
    if a["mean_us"] is None or b["mean_us"] is None:
        return out
    sea, seb = _se2(a, b["between_var"]), _se2(b, a["between_var"])
    se = math.sqrt(sea + seb) if sea is not None and seb is not None else None
    return judge(out, a["mean_us"], b["mean_us"], se, step_us, se_factor, min_share)
