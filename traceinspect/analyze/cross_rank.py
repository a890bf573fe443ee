"""Across ranks: match each collective on every rank, measure who arrives last, how long the others wait, and why.

``cross_rank_analysis(ranks, thresholds)`` (called by ``finish`` when more than one rank loaded) reads only the
per-rank ``RankAnalysis`` summaries (``tables["collectives"]`` and ``steps``) and returns plain JSON-serializable
data (dicts, lists, numbers, strings), stored as ``report.cross_rank``. Definitions: docs/communication.md.

Clocks: a rank's times are on its own clock; ``base_ns / 1000 + ts`` puts every rank on the common one (computed
relative to the earliest ``base_ns``, so no precision is lost to epoch-sized numbers).

Matching: by ``(process group, Seq)`` when every rank's records carry ``Seq`` for that group (newer torch), else by
order within ``(step, process group, collective name)``. A collective some ranks lack is listed under
``unmatched``, never an error. Point-to-point transfers (send, recv: a pipeline's activations and gradients) join
two ranks, not the group, and are not matched at all (``point_to_point`` counts them).

Arrival at a collective: the start of its execution (NCCL kernel or gloo work) on each rank when every rank has
one, else the CPU issue time. ``skew_us`` = latest arrival - earliest; the rank with the latest arrival is
``last_rank``. A rank that arrived early waits inside the collective until the last one arrives: its ``wait``
interval is [its arrival, min(latest arrival, end of its execution)]. Waiting is time lost to the straggler, not
the cost of communication; ``wait_us`` is the union of a rank's wait intervals per step (so concurrent
collectives do not count twice).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from .comm_names import POINT_TO_POINT
from .intervals import union_length

# Per-step numbers compared between the late rank and the others to name the cause (column, label). Only work
# a rank does before it can arrive; waiting shows up on the *other* ranks, so the late rank's excess is the cause.
CAUSE_METRICS = (
    ("dataloader_us", "waiting for the DataLoader (input pipeline)"),
    ("h2d_time_us", "host-to-device copies"),
    ("sync_us", "host-device synchronizations"),
    ("compute_kernel_time_us", "GPU compute kernels"),
    ("cpu_forward", "forward pass on the CPU"),
    ("cpu_backward", "backward pass on the CPU"),
    ("cpu_optimizer", "optimizer step"),
    ("cpu_other", "other work on the training thread"),
)

MAX_LISTED = 200  # collectives / mismatches listed individually in the result (the counts are always complete)


def _f(x) -> float | None:
    """JSON-safe float: None for NaN/inf."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def _union_length(starts: np.ndarray, ends: np.ndarray) -> float:
    return union_length(starts, ends, -np.inf, np.inf)


def _all_collectives(ranks) -> pd.DataFrame:
    frames = []
    # Common clock relative to the earliest rank origin: the base difference is exact integer arithmetic, and
    # absolute epoch microseconds (~1.8e15) would round to 0.25 us in float64.
    base0 = min(int(ra.base_ns) for ra in ranks)
    for ra in ranks:
        c = ra.tables.get("collectives")
        if c is None or not len(c):
            continue
        # Point-to-point transfers (a pipeline's send/recv) pair two ranks, not the group: never one collective.
        c = c[(c["step"] >= 0) & ~c["name"].isin(POINT_TO_POINT)]
        if not len(c):
            continue
        base = (int(ra.base_ns) - base0) / 1000.0
        d = pd.DataFrame({
            "rank": ra.rank,
            "step": c["step"].to_numpy().astype(np.int64),
            "pg": c["pg"].fillna("").astype(str).to_numpy(),
            "name": c["name"].astype(str).to_numpy(),
            "seq": c["seq"].to_numpy().astype(np.int64),
            "bytes": c["bytes"].to_numpy().astype(np.int64),
            "issue": base + c["cpu_ts_us"].to_numpy(dtype=float),
            "exec": base + c["ts_us"].to_numpy(dtype=float),
            "exec_end": base + (c["ts_us"] + c["dur_us"]).to_numpy(dtype=float),
            "grad": c["grad"].to_numpy().astype(bool) if "grad" in c else False,
        })
        order_t = np.where(np.isfinite(d["issue"]), d["issue"], d["exec"])
        d = d.assign(_t=order_t).sort_values("_t", kind="stable").drop(columns="_t")
        d["ordinal"] = d.groupby(["step", "pg", "name"], sort=False).cumcount()
        frames.append(d)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _point_to_point(ranks) -> int:
    """Sends and receives of every rank in its steps: left out of the matching."""
    n = 0
    for ra in ranks:
        c = ra.tables.get("collectives")
        if c is not None and len(c):
            n += int(((c["step"] >= 0) & c["name"].isin(POINT_TO_POINT)).sum())
    return n


def cross_rank_analysis(ranks, thresholds=None) -> dict:
    rank_ids = sorted(ra.rank for ra in ranks)
    result: dict = {
        "ranks": rank_ids, "match_by": None, "matched": 0, "unmatched_count": 0, "unmatched": [],
        "collectives": [], "per_rank": [], "per_step": [], "wait": [], "straggler": None,
        "point_to_point": _point_to_point(ranks),
    }
    df = _all_collectives(ranks)
    if not len(df):
        return result
    steps_of = {ra.rank: set(int(s) for s in ra.steps["step"]) for ra in ranks}

    # Keys: (pg, seq) where every rank has Seq for that group; else (step, pg, name, ordinal).
    seq_pgs = {pg for pg, g in df.groupby("pg") if (g["seq"] >= 0).all() and g["rank"].nunique() == len(rank_ids)}
    use_seq = df["pg"].isin(seq_pgs).to_numpy()
    df["key"] = [
        f"seq|{pg}|{sq}" if u else f"ord|{st}|{pg}|{nm}|{o}"
        for u, pg, sq, st, nm, o in zip(use_seq, df["pg"], df["seq"], df["step"], df["name"], df["ordinal"])
    ]
    result["match_by"] = "seq" if use_seq.all() else ("order" if not use_seq.any() else "seq+order")

    coll_rows, unmatched = [], []
    waits = []  # (rank, step, start, end, last_rank)
    last_counts = {r: 0 for r in rank_ids}
    skews_when_last = {r: [] for r in rank_ids}
    n_matched = 0
    for key, g in df.groupby("key", sort=False):
        present = sorted(g["rank"].unique().tolist())
        step = int(g["step"].iloc[0])
        expected = [r for r in rank_ids if step in steps_of.get(r, set())]
        have = set(present)  # a set: with hundreds of ranks a list lookup per rank would be quadratic
        missing = [r for r in expected if r not in have]
        if missing or len(g) != len(present):
            unmatched.append({"step": step, "pg": g["pg"].iloc[0], "name": g["name"].iloc[0],
                              "seq": int(g["seq"].iloc[0]) if key.startswith("seq") else None,
                              "ordinal": int(g["ordinal"].iloc[0]), "ranks_present": present,
                              "ranks_missing": missing})
        if len(present) < 2:
            continue
        g = g.drop_duplicates("rank")
        if np.isfinite(g["exec"]).all():
            arrival, basis = g["exec"].to_numpy(), "execution"
        elif np.isfinite(g["issue"]).all():
            arrival, basis = g["issue"].to_numpy(), "issue"
        else:
            continue
        n_matched += 1
        rk = g["rank"].to_numpy()
        latest = arrival.max()
        last = int(rk[int(np.argmax(arrival))])
        first = int(rk[int(np.argmin(arrival))])
        skew = float(latest - arrival.min())
        issue = g["issue"].to_numpy()
        issue_skew = float(np.nanmax(issue) - np.nanmin(issue)) if np.isfinite(issue).sum() >= 2 else float("nan")
        last_counts[last] += 1
        skews_when_last[last].append(skew)
        if basis == "execution":
            ends = g["exec_end"].to_numpy()
            for r, a, e in zip(rk, arrival, ends):
                w_end = min(latest, e)
                if w_end > a:
                    waits.append((int(r), step, float(a), float(w_end), last))
        if len(coll_rows) < MAX_LISTED:
            b = g["bytes"].to_numpy()
            coll_rows.append({"step": step, "pg": g["pg"].iloc[0], "name": g["name"].iloc[0],
                              "ordinal": int(g["ordinal"].iloc[0]),
                              "bytes": int(b.max()) if (b >= 0).all() else None,
                              "arrival": basis, "skew_us": _f(skew), "issue_skew_us": _f(issue_skew),
                              "last_rank": last, "first_rank": first})
    result["matched"] = n_matched
    result["unmatched_count"] = len(unmatched)
    result["unmatched"] = unmatched[:MAX_LISTED]
    result["collectives"] = coll_rows

    # Waiting: union per (rank, step), all collectives, and the part caused by each last rank.
    # Unions are computed once per (rank, step) and per (rank, step, last rank) group, not by filtering the whole
    # table for every pair of ranks: the cost grows with the ranks, not with their square or cube.
    wdf = pd.DataFrame(waits, columns=["rank", "step", "start", "end", "last"])
    own_union, caused_by = {}, {}
    if len(wdf):
        for (q, s), w in wdf.groupby(["rank", "step"], sort=False):
            own_union[(int(q), int(s))] = _union_length(w["start"].to_numpy(), w["end"].to_numpy())
        for (q, s, last), w in wdf.groupby(["rank", "step", "last"], sort=False):
            caused_by.setdefault((int(s), int(last)), []).append(
                (int(q), _union_length(w["start"].to_numpy(), w["end"].to_numpy())))
    wait_rows = []
    all_steps = sorted(set().union(*steps_of.values()))
    for r in rank_ids:
        for s in sorted(steps_of.get(r, ())):
            wait_rows.append({"rank": r, "step": s, "wait_us": own_union.get((r, s), 0.0)})
    result["wait"] = wait_rows

    # Step wall (median over ranks) for shares.
    walls = {}
    for ra in ranks:
        for s, w in zip(ra.steps["step"], ra.steps["wall_us"]):
            walls.setdefault(int(s), []).append(float(w))
    step_wall = {s: float(np.median(v)) for s, v in walls.items()}
    mean_wall = float(np.mean(list(step_wall.values()))) if step_wall else float("nan")

    # Ranks in each step, in rank order, and each one's position there.
    in_step = {s: [q for q in rank_ids if s in steps_of.get(q, ())] for s in all_steps}
    pos = {s: {q: i for i, q in enumerate(qs)} for s, qs in in_step.items()}
    per_rank = []
    for r in rank_ids:
        # Time the other ranks waited in collectives this rank arrived last at, per step (union per rank, mean
        # over the other ranks, 0 for those that did not wait for it), averaged over all steps.
        caused, caused_steps = [], []
        for s in all_steps:
            mine = pos[s].get(r)
            n_others = len(in_step[s]) - (mine is not None)
            if not n_others:
                continue
            vals = np.zeros(n_others)
            for q, u in caused_by.get((s, r), ()):
                i = pos[s].get(q)
                if q == r or i is None:
                    continue
                vals[i - (mine is not None and mine < i)] = u
            caused.append(float(np.mean(vals)))
            caused_steps.append(int(s))
        own_wait = [w["wait_us"] for w in wait_rows if w["rank"] == r]
        sk = skews_when_last[r]
        per_rank.append({
            "rank": r, "last_count": last_counts[r],
            "last_share": _f(last_counts[r] / n_matched) if n_matched else None,
            "mean_skew_us": _f(np.mean(sk)) if sk else 0.0,
            "max_skew_us": _f(np.max(sk)) if sk else 0.0,
            "caused_wait_per_step_us": _f(np.mean(caused)) if caused else 0.0,
            # the same per step: how the waiting it causes spreads over the steps (one burst, or every step)
            "caused_wait_by_step": [{"step": st, "wait_us": _f(v)} for st, v in zip(caused_steps, caused)],
            "wait_per_step_us": _f(np.mean(own_wait)) if own_wait else 0.0,
            "wait_total_us": _f(np.sum(own_wait)) if own_wait else 0.0,
        })
    # Each rank's share of all the waiting it and the others caused: a rank that is last only at collectives
    # nobody waited long for (a broadcast issued right after the one everybody waited at) is not the straggler.
    total_caused = sum(p["caused_wait_per_step_us"] or 0.0 for p in per_rank)
    for p in per_rank:
        p["caused_wait_share"] = _f((p["caused_wait_per_step_us"] or 0.0) / total_caused) if total_caused > 0 else None
    result["per_rank"] = per_rank

    per_step = []
    for s in all_steps:
        ws = [w for w in wait_rows if w["step"] == s]
        per_step.append({"step": s, "wall_us": _f(step_wall.get(s)),
                         "max_wait_us": _f(max((w["wait_us"] for w in ws), default=0.0)),
                         "wait_us_by_rank": [{"rank": w["rank"], "wait_us": _f(w["wait_us"])} for w in ws]})
    result["per_step"] = per_step

    # The straggler: the rank whose lateness made the others wait longest (the rank most often last where no
    # waiting is measured); the cause: its largest per-step excess over the others.
    if n_matched:
        top = max(per_rank, key=lambda p: (p["caused_wait_per_step_us"] or 0.0, p["last_count"]))
        r = top["rank"]
        cause, candidates = _cause(ranks, r)
        caused = top["caused_wait_per_step_us"] or 0.0
        result["straggler"] = {
            "rank": r, "last_count": top["last_count"], "matched": n_matched, "last_share": top["last_share"],
            "mean_skew_us": top["mean_skew_us"], "max_skew_us": top["max_skew_us"],
            "caused_wait_per_step_us": caused, "caused_wait_share": top["caused_wait_share"],
            "caused_wait_by_step": top["caused_wait_by_step"],
            "step_wall_us": _f(mean_wall),
            "skew_share": _f(caused / mean_wall) if mean_wall and math.isfinite(mean_wall) else None,
            "mean_skew_share": _f(top["mean_skew_us"] / mean_wall) if mean_wall and math.isfinite(mean_wall) else None,
            "cause": cause, "candidates": candidates,
        }
    return result


def _cause(ranks, late: int) -> tuple[dict | None, list]:
    """Compare the late rank's per-step numbers with the other ranks' median, per step, averaged over steps (with
    the standard error of that mean over the steps)."""
    by_rank = {ra.rank: ra.steps.set_index("step") for ra in ranks}
    mine = by_rank.get(late)
    others = [v for k, v in by_rank.items() if k != late]
    if mine is None or not others:
        return None, []
    cands = []
    for col, label in CAUSE_METRICS:
        if col not in mine.columns or not all(col in o.columns for o in others):
            continue
        diffs, mine_v, oth_v = [], [], []
        for s in mine.index:
            vals = [float(o.at[s, col]) for o in others if s in o.index and pd.notna(o.at[s, col])]
            if not vals or pd.isna(mine.at[s, col]):
                continue
            m, med = float(mine.at[s, col]), float(np.median(vals))
            diffs.append(m - med)
            mine_v.append(m)
            oth_v.append(med)
        if not diffs:
            continue
        # the standard error of the mean difference over the steps: a difference every step, or one burst
        se = _f(np.std(diffs, ddof=1) / np.sqrt(len(diffs))) if len(diffs) >= 2 else None
        cands.append({"metric": col, "label": label, "late_rank_us": _f(np.mean(mine_v)),
                      "others_us": _f(np.mean(oth_v)), "difference_us": _f(np.mean(diffs)),
                      "difference_se_us": se})
    cands.sort(key=lambda c: -(c["difference_us"] or 0.0))
    cause = cands[0] if cands and (cands[0]["difference_us"] or 0.0) > 0 else None
    return cause, cands
