"""A rank's work by name: kernels and CPU ops, each with its count and time per step (for the diff).

Read from the rank's ``kernels`` and ``cpu_ops`` tables (made once per rank in ``analyze/rank.py``), over the
rank's real steps (synthetic whole-window steps only when the rank has nothing else, as everywhere else). A CPU op's
time includes the ops nested in it; ``ProfilerStep#N`` annotations (one name per step) are left out.
"""

from __future__ import annotations

import pandas as pd

# Names kept per table (the ones with the most time per step); the rest are summed under OTHER.
TOP_NAMES = 400
OTHER = "(other names)"


def _steps_used(ra) -> list[int]:
    st = ra.steps
    if not len(st):
        return []
    real = st[~st["synthetic"].astype(bool)] if "synthetic" in st else st
    return [int(s) for s in (real if len(real) else st)["step"]]


def _by_name(table: pd.DataFrame | None, steps: list[int]) -> dict[str, list[float]]:
    if table is None or not len(table) or not steps:
        return {}
    t = table[table["step"].isin(steps)]
    t = t[~t["name"].astype(str).str.startswith("ProfilerStep#")]
    g = t.groupby(t["name"].astype(str), sort=False)[["count", "total_us"]].sum()
    g = g.sort_values("total_us", ascending=False) / len(steps)
    out = {str(n): [float(r["count"]), float(r["total_us"])] for n, r in g.head(TOP_NAMES).iterrows()}
    rest = g.iloc[TOP_NAMES:]
    if len(rest):
        out[OTHER] = [float(rest["count"].sum()), float(rest["total_us"].sum())]
    return out


def rank_inventory(ra) -> dict:
    """``{"steps": n, "kernels": {name: [count, us]}, "ops": {name: [count, us]}}``, per step."""
    steps = _steps_used(ra)
    return {"rank": ra.rank, "steps": len(steps),
            "kernels": _by_name(ra.tables.get("kernels"), steps),
            "ops": _by_name(ra.tables.get("cpu_ops"), steps)}


def report_inventory(report) -> dict[int, dict]:
    """Rank id -> its inventory, for every rank of a ``diagnose.engine.Report``."""
    return {ra.rank: rank_inventory(ra) for ra in report.ranks}
