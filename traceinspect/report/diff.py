"""Two reports -> what changed, and whether each change is larger than the run's own step-to-step noise (pure).

``diff_reports(base, new, pairs=None)`` takes two report dicts (``report.to_dict()`` or a saved report.json) and
returns a plain, JSON-serializable dict (schema ``traceinspect.diff/1``). Nothing here prints or reads files.

What is compared, per rank (matched by rank id, or by ``pairs`` of ``(base_rank, new_rank)``):

* ``wall``: the step's wall time, then every breakdown category (``breakdown_us``), then, for GPU ranks, the CPU's
  waits (``dataloader_us``, ``sync_us``), each as its mean per step over the rank's steps (synthetic whole-window
  steps only when a rank has nothing else, as in the report's summary).

When a change is real (``NOISE_RULE``): with ``n`` steps, mean ``m`` and sample standard deviation ``sd``
(``ddof=1``) on each side, the change ``delta = m_new - m_base`` has the Welch standard error
``se = sqrt(sd_base^2 / n_base + sd_new^2 / n_new)``; it is **significant** when

    |delta| > SE_FACTOR * se   and   |delta| > MIN_SHARE * mean wall of the base rank

i.e. it stands out of the step-to-step spread (about a 95 % two-sided level for normal step times) and it is big
enough to matter (1 % of the step). With fewer than 2 steps on a side the spread is unknown and ``significant`` is
None ("cannot tell"). Step times are not independent draws (warm-up, periodic work), so this is a screen, not a
proof: more steps on each side make it sharper.

Findings are matched by rule id: ``disappeared`` (base only), ``appeared`` (new only), ``severity_changed``, and
``unchanged`` (same severity; the time at stake may differ).
"""

from __future__ import annotations

import math

from ..analyze.categories import GPU_BREAKDOWN
from ..severities import SEVERITIES

DIFF_SCHEMA = "traceinspect.diff/1"
SE_FACTOR = 2.0
MIN_SHARE = 0.01
NOISE_RULE = (f"a change is significant when |delta| > {SE_FACTOR:g} x SE, SE = sqrt(sd_base^2/n_base + "
              f"sd_new^2/n_new) (Welch, sample sd over steps), and |delta| > {100 * MIN_SHARE:g} % of the base "
              "rank's mean step; fewer than 2 steps on a side: cannot tell")

GPU_KEYS = GPU_BREAKDOWN
# The CPU categories in reading order (a step's course: load, forward, backward, communicate, update).
CPU_KEYS = ("dataloader", "forward", "backward", "comm", "optimizer", "other")
CPU_WAITS = (("dataloader_us", "dataloader_wait"), ("sync_us", "sync_wait"))


def _real_steps(rank: dict) -> list[dict]:
    steps = rank.get("steps") or []
    real = [s for s in steps if not s.get("synthetic")]
    return real or steps


def describe(values: list[float]) -> dict:
    """n, mean and sample standard deviation (None when n < 2) of a list of numbers (None values dropped)."""
    vals = [float(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    n = len(vals)
    if not n:
        return {"n": 0, "mean_us": None, "sd_us": None}
    mean = sum(vals) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in vals) / (n - 1)) if n >= 2 else None
    return {"n": n, "mean_us": mean, "sd_us": sd}


def blank_comparison(a: dict, b: dict) -> dict:
    """A comparison of sides ``a`` and ``b`` before any change is computed (every number None)."""
    return {"base": a, "new": b, "delta_us": None, "rel_change": None, "share_of_step": None, "se_us": None,
            "noise_us": None, "threshold_us": None, "significant": None, "change": "unknown"}


def judge(out: dict, mean_a: float, mean_b: float, se: float | None, step_us: float | None,
          se_factor: float = SE_FACTOR, min_share: float = MIN_SHARE) -> dict:
    """``out`` (a ``blank_comparison``) with the change from ``mean_a`` to ``mean_b`` filled in, and, given its
    standard error ``se`` (None: the spread is unknown), its noise level and whether it is significant
    (NOISE_RULE)."""
    delta = mean_b - mean_a
    out["delta_us"] = delta
    out["rel_change"] = delta / mean_a if mean_a else None
    out["share_of_step"] = delta / step_us if step_us else None
    if se is None:
        return out
    floor = min_share * step_us if step_us else 0.0
    sig = abs(delta) > se_factor * se and abs(delta) > floor
    out.update({"se_us": se, "noise_us": se_factor * se, "threshold_us": max(se_factor * se, floor),
                "significant": bool(sig), "change": ("up" if delta > 0 else "down") if sig else "none"})
    return out


def compare(base_vals: list[float], new_vals: list[float], step_us: float | None) -> dict:
    """One metric: both sides' stats, the change, its noise level and whether it is significant (NOISE_RULE)."""
    a, b = describe(base_vals), describe(new_vals)
    out = blank_comparison(a, b)
    if a["mean_us"] is None or b["mean_us"] is None:
        return out
    se = None if a["sd_us"] is None or b["sd_us"] is None else math.sqrt(
        a["sd_us"] ** 2 / a["n"] + b["sd_us"] ** 2 / b["n"])
    return judge(out, a["mean_us"], b["mean_us"], se, step_us)


def _metric_series(steps: list[dict], metric: str, basis: str) -> list:
    if metric == "wall":
        return [s.get("wall_us") for s in steps]
    for key, name in CPU_WAITS:
        if metric == name:
            return [s.get(key) for s in steps]
    return [(s.get("breakdown_us") or {}).get(metric) for s in steps]


def _metrics_of(basis: str) -> list[tuple[str, str]]:
    """(metric, kind) in display order for a basis."""
    keys = GPU_KEYS if basis == "gpu" else CPU_KEYS
    out = [("wall", "step")] + [(k, "breakdown") for k in keys]
    if basis == "gpu":
        out += [(name, "cpu_wait") for _, name in CPU_WAITS]
    return out


def compare_ranks(base_rank: dict, new_rank: dict) -> dict:
    """Every metric of one pair of ranks."""
    sa, sb = _real_steps(base_rank), _real_steps(new_rank)
    basis_a, basis_b = base_rank.get("basis", "gpu"), new_rank.get("basis", "gpu")
    step_us = describe([s.get("wall_us") for s in sa])["mean_us"]
    metrics = _metrics_of(basis_a)
    if basis_b != basis_a:
        metrics += [m for m in _metrics_of(basis_b) if m not in metrics]
    rows = []
    for metric, kind in metrics:
        va = _metric_series(sa, metric, basis_a) if (metric, kind) in _metrics_of(basis_a) else []
        vb = _metric_series(sb, metric, basis_b) if (metric, kind) in _metrics_of(basis_b) else []
        rows.append({"metric": metric, "kind": kind, **compare(va, vb, step_us)})
    return {
        "base_rank": base_rank["rank"],
        "new_rank": new_rank["rank"],
        "basis": {"base": basis_a, "new": basis_b},
        "steps": {"base": [s["step"] for s in sa], "new": [s["step"] for s in sb]},
        "device": {"base": base_rank.get("device"), "new": new_rank.get("device")},
        "metrics": rows,
    }


def _finding_key(findings: list[dict]) -> dict:
    """Rule id -> the finding (the first when a rule fired more than once; the others get '#2', '#3' keys)."""
    out: dict = {}
    for f in findings:
        k, i = f["id"], 1
        while k in out:
            i += 1
            k = f"{f['id']}#{i}"
        out[k] = f
    return out


def _sev(s) -> int:
    return SEVERITIES.index(s) if s in SEVERITIES else -1


def compare_findings(base: list[dict], new: list[dict]) -> dict:
    a, b = _finding_key(base), _finding_key(new)

    def entry(k, fa, fb):
        f = fb or fa
        return {"id": f["id"], "key": k, "title": f.get("title"),
                "severity": {"base": fa and fa.get("severity"), "new": fb and fb.get("severity")},
                "ranks": {"base": fa and fa.get("ranks"), "new": fb and fb.get("ranks")},
                "time_at_stake_us": {"base": fa and fa.get("time_at_stake_us"),
                                     "new": fb and fb.get("time_at_stake_us")},
                "title_base": fa and fa.get("title"), "title_new": fb and fb.get("title")}

    out = {"disappeared": [], "appeared": [], "severity_changed": [], "unchanged": []}
    for k in a:
        if k not in b:
            out["disappeared"].append(entry(k, a[k], None))
    for k in b:
        if k not in a:
            out["appeared"].append(entry(k, None, b[k]))
        elif a[k].get("severity") != b[k].get("severity"):
            e = entry(k, a[k], b[k])
            e["direction"] = "worse" if _sev(b[k].get("severity")) > _sev(a[k].get("severity")) else "better"
            out["severity_changed"].append(e)
        else:
            out["unchanged"].append(entry(k, a[k], b[k]))
    return out


def _side(d: dict) -> dict:
    return {
        "source": d.get("source"),
        "world_size": d.get("world_size"),
        "ranks": [r["rank"] for r in d.get("ranks", [])],
        "steps": {str(r["rank"]): len(_real_steps(r)) for r in d.get("ranks", [])},
        "missing_ranks": list(d.get("missing_ranks") or []),
        "findings": len(d.get("findings") or []),
    }


def _slowest(d: dict) -> dict | None:
    ranks = [r for r in d.get("ranks", []) if _real_steps(r)]
    if not ranks:
        return None
    return max(ranks, key=lambda r: describe([s.get("wall_us") for s in _real_steps(r)])["mean_us"] or 0.0)


def diff_reports(base: dict, new: dict, pairs: list[tuple[int, int]] | None = None) -> dict:
    """The diff dict of two report dicts. ``pairs``: explicit (base_rank, new_rank) matches; default by rank id."""
    ra = {r["rank"]: r for r in base.get("ranks", [])}
    rb = {r["rank"]: r for r in new.get("ranks", [])}
    if pairs:
        missing = [f"{x} (base)" for x, _ in pairs if x not in ra] + [f"{y} (new)" for _, y in pairs if y not in rb]
        if missing:
            raise ValueError(f"no such rank: {', '.join(missing)}; the base has ranks {sorted(ra)}, "
                             f"the new run {sorted(rb)}")
        matched = list(pairs)
    else:
        matched = [(r, r) for r in sorted(ra) if r in rb]
    used_a = {x for x, _ in matched}
    used_b = {y for _, y in matched}
    overall = None
    sa, sb = _slowest(base), _slowest(new)
    if sa is not None and sb is not None:
        step_us = describe([s.get("wall_us") for s in _real_steps(sa)])["mean_us"]
        overall = {"base_rank": sa["rank"], "new_rank": sb["rank"], "metric": "wall",
                   **compare([s.get("wall_us") for s in _real_steps(sa)],
                             [s.get("wall_us") for s in _real_steps(sb)], step_us)}
    return {
        "schema": DIFF_SCHEMA,
        "rule": {"se_factor": SE_FACTOR, "min_share_of_step": MIN_SHARE, "text": NOISE_RULE},
        "base": _side(base),
        "new": _side(new),
        "matched_by": "pairs" if pairs else "rank id",
        "ranks": [compare_ranks(ra[x], rb[y]) for x, y in matched],
        "only_in_base": sorted(r for r in ra if r not in used_a),
        "only_in_new": sorted(r for r in rb if r not in used_b),
        "overall": overall,
        "findings": compare_findings(base.get("findings") or [], new.get("findings") or []),
    }
