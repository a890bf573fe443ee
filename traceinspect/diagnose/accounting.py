"""One accounting of lost time: every finding is a disjoint slice of the step it claims.

The rules decide *whether* a problem is present; this module decides *how much of the step* each one may claim,
from the step columns the analyses computed (docs/metrics.md), so that the findings' claims of a step add up to at
most that step and to what fixing all of them would save (``projected_step_us``). docs/findings.md has the model.

Each step's wall time is cut into pools that do not overlap (GPU basis)::

    data    = idle_dataloader_us          GPU idle while the loop waits for a batch
    sync    = idle_sync_us                GPU idle while the CPU is blocked in a synchronizing call
    launch  = idle_other_us               GPU idle while the CPU runs Python / launches work
    copy    = bd_h2d_exposed + bd_d2h_exposed + bd_d2d_exposed + bd_memset_exposed
    comm    = bd_comm_exposed
    compute = bd_compute

(CPU-only traces: the training thread's ``dataloader``, ``comm``, ``optimizer``, ``forward``, ``backward``,
``other``.) Findings claim from their pools in the order their rules declare (``_rule.Claim``: what each takes,
per basis), each taking at most what is left, so a symptom (``Claim.symptom``, last) gets only the idle time no
cause explained; a finding may explain more of a pool than its fix removes (``Claim.explains``: launch
overhead its fix leaves on the CPU), and that rest is taken off the pool unclaimed, so no symptom claims it again;
a later finding whose fix removes that rest too (``Claim.claims_explained``: capturing the whole step, optimizer
included) claims it first, from that reserve, so the explained time is owned by exactly one claim or by none.
The accounting never asks which rule it holds. Work the GPU does faster after a fix saves only
where the GPU is the step's critical path: at most ``wall - cpu_floor``, the
part of the step the CPU does not need for its own work (``cpu_floor = cpu_issue_us``, the issuing threads' ops
and runtime calls outside syncs and DataLoader waits: ``bounds.cpu_floor``),
less what the data and sync claims already removed: the projection never drops below the CPU's own work unless a
CPU-side finding claims that too.

A step the DataLoader paced (the GPU idled waiting for its batch) gains nothing from a faster GPU alone: GPU-side
claims take nothing of it, and where the loader's own finding claims the rank, what they would save there once the
loader keeps up is kept apart (``after``), counted in the projection but not in the finding's own claim. CPU work
a fix adds (``Claim.adds_cpu``: bf16 autocast's casts) is taken off the room of that fix.

No fix but the loader's own makes a step shorter than its batches take the DataLoader (``bounds.loader_floor``: the
loader's period as the capture timed it, or an estimate for an untimed pinning thread): every other claim of a step
shares ``wall - floor`` (the loader room); the claim of the loader's own fix (``Claim.fixes_loader``) is not bounded
by it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from ._util import real_steps
from .bounds import col, gpu_room, loader_floor, paced
from .finding import Finding
from .severity import grade, thin as thin_evidence

IDLE_POOLS = ("data", "sync", "launch")
CPU_POOLS = ("data", "comm", "optimizer", "forward", "backward", "other")


def _pools(ra, s: pd.DataFrame, config, floor: np.ndarray | None) -> dict[str, np.ndarray]:
    if ra.basis == "gpu":
        copy = sum(col(s, f"bd_{k}") for k in ("h2d_exposed", "d2h_exposed", "d2d_exposed", "memset_exposed"))
        pools = {"data": col(s, "idle_dataloader_us"), "sync": col(s, "idle_sync_us"),
                 "launch": col(s, "idle_other_us"), "copy": copy, "comm": col(s, "bd_comm_exposed"),
                 "compute": col(s, "bd_compute"), "room": gpu_room(s), PACED: paced(s, config)}
    else:
        pools = {k: col(s, "cpu_dataloader" if k == "data" else f"cpu_{k}") for k in CPU_POOLS}
    if floor is not None:
        pools[LOADER_ROOM] = np.clip(col(s, "wall_us") - floor, 0.0, None)
    return pools


LOADER_ROOM = "loader_room"  # not a pool of the step: the bound a measured DataLoader puts on every other claim
PACED = "paced"  # not a pool either: the steps the DataLoader paced (bool per step)
LOADER_FIXED = "loader_fixed"  # set once the loader's own finding claimed time on the rank (its fix is in the plan)
EXPLAINED = "explained"  # pool -> [(finding id, us per step)]: time a finding explained and left unclaimed


def _estimate(f: Finding, rule, rank: int) -> float:
    """The rule's own per-step estimate for a rank (its evidence per rank, else the finding's)."""
    key = rule.claim.estimate_key
    per_rank = (f.evidence or {}).get("per_rank")
    if key and isinstance(per_rank, list):
        for e in per_rank:
            if isinstance(e, dict) and e.get("rank") == rank and e.get(key) is not None:
                return float(e[key])
    return float(f.time_at_stake_us or 0.0)


def _demands(f: Finding, rule, ra, s: pd.DataFrame, config) -> list[tuple[str, np.ndarray]]:
    """What fixing ``f`` would save on each step of rank ``ra``, as (pool, us per step) pairs: its rule's claim for
    the rank's basis (_rule.Claim)."""
    take = rule.claim.gpu if ra.basis == "gpu" else rule.claim.cpu
    return [] if take is None else take.demands(f, ra, s, config, _estimate(f, rule, ra.rank))


def _claim_ranks(f: Finding, rule, report) -> list[int]:
    """Ranks whose steps a finding shortens: its own, or (``Claim.other_ranks``: a straggler) the others'."""
    if rule.claim.other_ranks:
        others = [ra.rank for ra in report.ranks if ra.rank not in f.ranks]
        return others or list(f.ranks)
    return list(f.ranks)


def _take(f: Finding, rule, ra, s: pd.DataFrame, pools: dict, config
          ) -> tuple[np.ndarray, float, float, np.ndarray, dict]:
    """Take ``f``'s demands from the rank's pools (what is left of them): its claim per step, the mean of it that
    was GPU idle time, the mean the loader room cut from it, what it saves per step only after the loader's
    fix (GPU-side savings in the steps the loader paced), and the mean it took of each earlier finding's explained
    time (``Claim.claims_explained``)."""
    got = np.zeros(len(s))
    after = np.zeros(len(s))
    idle = cut = 0.0
    moved: dict[str, float] = {}  # mean explained idle of another finding this claim took (accounting below)
    spill = None
    bounded = LOADER_ROOM in pools and not rule.claim.fixes_loader
    for pool, want in _demands(f, rule, ra, s, config):
        if pool not in pools or pool in (LOADER_ROOM, PACED, LOADER_FIXED, EXPLAINED):
            continue
        want = spill if want is None else want(got) if callable(want) else want
        if want is None:
            continue
        want = np.clip(np.nan_to_num(want, nan=0.0, posinf=np.inf), 0.0, None)
        if rule.claim.claims_explained:  # what earlier findings explained and left: its fix removes it
            for owner, rest in pools.get(EXPLAINED, {}).get(pool, []):
                part = np.minimum(want, rest)
                if bounded:
                    part = np.minimum(part, pools[LOADER_ROOM])
                    pools[LOADER_ROOM] = pools[LOADER_ROOM] - part
                rest -= part  # in place: the reserve is shared with the owner's entry
                want = want - part
                got += part
                idle += float(part.mean())
                moved[owner] = moved.get(owner, 0.0) + float(part.mean())
        take = np.minimum(want, pools[pool])
        if pool == "compute" and "room" in pools:  # faster GPU work saves only where the GPU leads
            room = pools["room"]
            if rule.claim.adds_cpu is not None:  # ... and CPU work the fix adds (autocast's casts) takes room
                room = np.clip(room - rule.claim.adds_cpu(s, config), 0.0, None)
            take = np.minimum(take, room)
            if PACED in pools:  # in a step the loader paced, only after the loader's fix (else not at all)
                later = np.where(pools[PACED], take, 0.0)
                if pools.get(LOADER_FIXED) is not None:
                    after += later
                    pools["compute"] = pools["compute"] - later
                    pools["room"] = np.clip(pools["room"] - later, 0.0, None)
                take = take - later
        if bounded:  # no step gets shorter than its batches take the measured loader
            capped = np.minimum(take, pools[LOADER_ROOM])
            cut += float((take - capped).mean())
            take = capped
            pools[LOADER_ROOM] = pools[LOADER_ROOM] - take
        if pool in ("compute", "data", "sync") and "room" in pools:
            # The room is the step beyond the CPU's own work; waits for data or for the GPU are outside that
            # work, so what fixing them removes is no longer there for a faster GPU to remove.
            pools["room"] = np.clip(pools["room"] - take, 0.0, None)
        pools[pool] = pools[pool] - take
        got += take
        if pool in IDLE_POOLS:
            idle += float(take.mean())
        spill = np.clip(want - take, 0.0, None) if np.isfinite(want).all() else None
    if rule.claim.keeps is not None:  # what the fix itself leaves: off the pools, not claimed
        keep = np.minimum(got, np.clip(np.nan_to_num(rule.claim.keeps(s)), 0.0, None))
        got = got - keep
        kept = float(keep.mean())
        idle = max(idle - kept, 0.0)
        for owner in list(moved):  # the explained reserve was taken first: the kept time comes off it first
            cut_moved = min(moved[owner], kept)
            moved[owner] -= cut_moved
            kept -= cut_moved
    if rule.claim.explains is not None and ra.basis == "gpu":  # explained, not claimed: no symptom claims it
        for pool, want in rule.claim.explains.demands(f, ra, s, config, 0.0):
            if pool in pools and pool in IDLE_POOLS:
                gone = np.minimum(np.clip(np.nan_to_num(want) - got, 0.0, None), pools[pool])
                pools[pool] = pools[pool] - gone
                idle += float(gone.mean())
                pools.setdefault(EXPLAINED, {}).setdefault(pool, []).append((f.id, gone.copy()))
    if rule.claim.fixes_loader and got.sum() > 0:
        pools[LOADER_FIXED] = True
    # below a nanosecond: rounding of the pools, not a claim
    return np.where(got < 1e-3, 0.0, got), idle, cut, np.where(after < 1e-3, 0.0, after), moved


@dataclass
class _Ledger:
    """What the claims of every rank came to: rank -> finding id -> per-step arrays (us), and per rank the walls,
    step numbers and the loader's measured bound the grading reads."""

    rules: dict  # finding id -> its rule's declaration (_rule.Rule)
    walls: dict[int, np.ndarray]
    step_ids: dict[int, list[int]]
    periods: dict[int, dict | None]  # what the rank's DataLoader floor rests on (bounds.loader_floor)
    claims: dict[int, dict[str, np.ndarray]] = field(default_factory=dict)  # what each fix saves alone
    later: dict[int, dict[str, np.ndarray]] = field(default_factory=dict)  # what it saves after the loader's fix
    cut: dict[int, dict[str, float]] = field(default_factory=dict)  # mean the loader room cut from a claim
    idle: dict[int, dict[str, float]] = field(default_factory=dict)  # mean GPU idle a claim took

    @property
    def loader_id(self) -> str | None:
        """The finding whose fix is the DataLoader's own (``Claim.fixes_loader``)."""
        return next((k for k, r in self.rules.items() if r.claim.fixes_loader), None)

    def add(self, table: dict, rank: int, fid: str, value) -> None:
        row = table.setdefault(rank, {})
        row[fid] = row.get(fid, 0.0) + value


def account(report, findings: list[Finding], config) -> tuple[list[Finding], dict]:
    """Claims, per-rank projection and severities: returns the updated findings and the accounting dict."""
    from . import all_rules

    rules = {r.id: r for r in all_rules()}
    ranks = {ra.rank: ra for ra in report.ranks}
    steps = {r: real_steps(ra.steps) for r, ra in ranks.items()}
    floors = {r: loader_floor(ra, steps[r], config) for r, ra in ranks.items()}  # (per-step floor, its evidence)
    left = {r: _pools(ra, steps[r], config, floors[r][0] if floors[r] else None) for r, ra in ranks.items()}
    book = _Ledger(rules=rules, walls={r: col(s, "wall_us") for r, s in steps.items()},
                   step_ids={r: [int(st) for st in s["step"]] for r, s in steps.items()},
                   periods={r: fl[1] if fl else None for r, fl in floors.items()})
    for f in sorted(findings, key=lambda f: rules[f.id].claim.order):
        rule = rules[f.id]
        for r in _claim_ranks(f, rule, report):
            if r not in ranks or not len(steps[r]):
                continue
            got, idle, cut, after, moved = _take(f, rule, ranks[r], steps[r], left[r], config)
            for owner, us in moved.items():  # explained there, claimed here: listed once, as this claim
                if owner in book.idle.get(r, {}):
                    book.idle[r][owner] = max(book.idle[r][owner] - us, 0.0)
            if after.sum() > 0:
                book.add(book.later, r, f.id, after)
            if cut > 0:
                book.add(book.cut, r, f.id, cut)
            book.add(book.claims, r, f.id, got)
            if idle and ranks[r].basis == "gpu" and not rule.claim.symptom:
                book.add(book.idle, r, f.id, idle)
    acc = {"ranks": {r: _rank_summary(book, r) for r in steps}, "verdict": None}
    out = [_graded(f, acc, book, config) for f in findings]
    acc["verdict"] = _verdict(acc, out, rules)
    return out, acc


def _rank_summary(book: _Ledger, r: int) -> dict:
    """One rank's mean step, its noise, the projection and the claims, mean and per step."""
    wall, claims, later = book.walls[r], book.claims.get(r, {}), book.later.get(r, {})
    n = len(wall)
    # after: a saving that needs another finding's fix first (GPU-side savings in steps the loader paced)
    entries = [({"id": k}, v) for k, v in claims.items()] + [({"id": k, "after": book.loader_id}, v)
                                                                 for k, v in later.items()]
    total = sum((v for _, v in entries), np.zeros(n))
    return {
        "step_us": float(wall.mean()) if n else None,
        "step_se_us": float(wall.std(ddof=1) / np.sqrt(n)) if n >= 2 else None,
        "steps": n,
        "projected_step_us": float((wall - total).mean()) if n else None,
        "claims": sorted(({**e, "us": float(v.mean())} for e, v in entries if v.mean() > 0), key=lambda c: -c["us"]),
        "step_claims": {st: [{**e, "us": float(v[i])} for e, v in entries if v[i] > 0]
                        for i, st in enumerate(book.step_ids[r])},
    }


def reference_rank(acc: dict) -> int | None:
    """The rank the verdict describes: the slowest mean step (in DDP every rank waits for it)."""
    rows = [(v["step_us"], r) for r, v in acc["ranks"].items() if v["step_us"] is not None]
    return max(rows)[1] if rows else None


def _graded(f: Finding, acc: dict, book: _Ledger, config) -> Finding:
    memory = book.rules[f.id].claim.memory
    if memory is not None:  # bytes of peak memory, not time: graded by the rule's own memory scale
        sev, reason = memory(f, config)
        return replace(f, severity=sev, time_at_stake_us=None,
                       extra={**f.extra, "severity_reason": reason, "thin_evidence": None,
                              "bytes_at_stake": (f.evidence or {}).get("bytes_at_stake"),
                              "claim_rank": f.ranks[0] if f.ranks else None})
    ref = reference_rank(acc)
    per_rank = {r: float(c[f.id].mean()) for r, c in book.claims.items() if f.id in c and len(c[f.id])}
    if not per_rank:
        rank, claim = (f.ranks[0] if f.ranks else ref), None
    elif ref in per_rank:
        rank, claim = ref, per_rank[ref]
    else:
        rank = max(per_rank, key=per_rank.get)
        claim = per_rank[rank]
    info = acc["ranks"].get(rank) or {}
    step, se, nsteps = info.get("step_us"), info.get("step_se_us"), info.get("steps") or 0
    thin = thin_evidence(f, nsteps, config)
    # The noise a claim is judged by is that of the steps *without* it: a stall that comes and goes is both the
    # claim and most of the step's spread, and measuring the fix removes that spread with it.
    own = book.claims.get(rank, {}).get(f.id)
    if se is not None and own is not None and nsteps >= 2:
        se = float((book.walls[rank] - own).std(ddof=1) / np.sqrt(nsteps))
    # With fewer steps than the thin-evidence line the standard error is itself too uncertain to judge noise by
    # (from 3 samples it is off by half either way): thin evidence caps the severity instead.
    if nsteps < config.thin_evidence_min_steps:
        se = None
    sev, reason = grade(claim, step, se, thin, config, rank if len(acc["ranks"]) > 1 else None)
    extra = dict(f.extra)
    extra.update({
        "estimate_us": f.time_at_stake_us,
        "share_of_step": (claim / step) if claim is not None and step else None,
        "severity_reason": reason,
        "thin_evidence": thin,
        "claim_rank": rank,
    })
    cut = book.cut.get(rank, {}).get(f.id)
    if cut is not None and cut >= 1.0 and book.periods.get(rank):
        extra["loader_bound"] = {**book.periods[rank], "cut_us": cut}
    after = book.later.get(rank, {}).get(f.id)
    if after is not None and float(after.mean()) >= 1.0:
        extra["after_loader_fix"] = {"id": book.loader_id, "us": float(after.mean()),
                                     "steps": [st for st, v in zip(book.step_ids[rank], after) if v > 0]}
    if book.rules[f.id].claim.symptom and rank in book.walls:
        explained = book.idle.get(rank, {})
        extra["explained_by"] = [{"id": k, "us": v} for k, v in sorted(explained.items(), key=lambda kv: -kv[1])
                                 if v >= 1.0]
    return replace(f, severity=sev, time_at_stake_us=claim, extra=extra)


def _verdict(acc: dict, findings: list[Finding], rules: dict) -> dict | None:
    r = reference_rank(acc)
    if r is None:
        return None
    info = acc["ranks"][r]
    step, proj = info["step_us"], info["projected_step_us"]
    cl = [c for c in info["claims"] if c["us"] >= 0.005 * step]
    largest = next((c for c in cl if not c.get("after")), None)
    if largest:
        f = next((x for x in findings if x.id == largest["id"]), None)
        largest = {"id": largest["id"], "us": largest["us"], "severity": f.severity if f else None,
                   "title": f.title if f else None}
        parts = ", ".join(f"{rules[c['id']].label} {_ms(c['us'])}"
                          + (f" after the {rules[c['after']].label} fix" if c.get("after") else "")
                          for c in cl[:4])
        more = f", +{len(cl) - 4} more" if len(cl) > 4 else ""
        text = f"{_ms(step)} -> ~{_ms(proj, 2)} if fixed: {parts}{more}"
    else:
        text = f"{_ms(step)}: no time at stake found"
    # The largest claim left uncounted because an untimed loader's pinning thread may not feed a shorter step.
    open_ = [(float(f.extra["loader_bound"].get("cut_us") or 0.0), f.id) for f in findings
             if not rules[f.id].claim.symptom
             and f.extra.get("claim_rank") == r and (f.extra.get("loader_bound") or {}).get("estimated")]
    if open_ and max(open_)[0] >= 0.05 * step:
        cut, fid = max(open_)
        text += (f"; not counted: up to {_ms(cut)} more ({rules[fid].label}) if the DataLoader's pinning "
                 f"thread, which the trace does not show, keeps up")
    return {"rank": r, "step_us": step, "projected_step_us": proj, "largest": largest, "text": text}


def _ms(us: float, digits: int = 3) -> str:
    """Milliseconds with about ``digits`` significant figures (86.7 ms, 4.12 ms, 25 ms)."""
    v = us / 1000
    if digits == 2:
        return f"{v:.0f} ms" if v >= 10 else f"{v:.1f} ms"
    return f"{v:.1f} ms" if v >= 10 else f"{v:.2f} ms"
