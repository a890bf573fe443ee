"""What the program did (work) and how fast it was done (rate), per step, for the diff (pure; no I/O).

*Work* is what a code change changes and a machine change does not: the kernels, launches, copies and their bytes,
collectives and their bytes, DataLoader batches and blocking syncs of a step (``WORK``, each the mean per step of a
step field of the JSON report), and, where the traces were read, the kernels and CPU ops by name and count
(``inventory``). *Rate* is how fast that work went: CPU time per launch call, the host's time per launch, GPU time
per kernel (of the same name, where the names are known), the waits (``RATE``).

One side is a list of runs (captures of the same job); each run is a list of step dicts of one rank. Every value
is the mean over a run's steps, then the mean over the side's runs; ``spread`` is the range of the run means.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple


class Metric(NamedTuple):
    key: str
    label: str
    unit: str  # "count", "bytes", "us"
    get: Callable[[dict], float | None]


def _field(name: str) -> Callable[[dict], float | None]:
    return lambda s: s.get(name)


def _ratio(num: Callable[[dict], float | None], den: Callable[[dict], float | None]):
    """A rate of a step: num / den (None where den is 0 or either is missing)."""
    def get(s: dict) -> float | None:
        a, b = num(s), den(s)
        if a is None or b is None or not b:
            return None
        return float(a) / float(b)
    return get


def _host_issue_us(s: dict) -> float | None:
    """The training thread's step time outside its waits: cpu_step_us - sync_us - dataloader_us."""
    cpu = s.get("cpu_step_us")
    if cpu is None:
        return None
    return max(0.0, float(cpu) - float(s.get("sync_us") or 0.0) - float(s.get("dataloader_us") or 0.0))


#: The work of a step (step fields of the JSON report, docs/metrics.md).
WORK: tuple[Metric, ...] = tuple(Metric(k, lab, unit, _field(k)) for k, lab, unit in (
    ("kernel_count", "kernels", "count"),
    ("launch_count", "kernel launches", "count"),
    ("graph_launch_count", "graph replays", "count"),
    ("matmul_count", "matmul kernels", "count"),
    ("h2d_count", "H2D copies", "count"),
    ("h2d_bytes", "H2D bytes", "bytes"),
    ("pageable_h2d_bytes", "pageable H2D bytes", "bytes"),
    ("d2h_count", "D2H copies", "count"),
    ("d2h_bytes", "D2H bytes", "bytes"),
    ("d2d_bytes", "D2D bytes", "bytes"),
    ("comm_calls", "collectives", "count"),
    ("comm_bytes", "bytes communicated", "bytes"),
    ("bucket_count", "buckets per round", "count"),
    ("allreduce_rounds", "all-reduce rounds", "count"),
    ("dataloader_count", "DataLoader batches", "count"),
    ("sync_count", "blocking syncs", "count"),
))

#: The DataLoader's configuration (``loader_rows``): a code or config change, never a machine's. The batches drawn
#: from worker processes per step (a step field: the fetches of ``_MultiProcessingDataLoaderIter``, read from the
#: trace), and the settings the capture recorded in the rank's setup (docs/setup.md), where both sides know them.
LOADER_STEP = Metric("dataloader_worker_count", "DataLoader batches from worker processes", "count",
                     _field("dataloader_worker_count"))
LOADER_SETUP = (("num_workers", "DataLoader workers (num_workers)"), ("pin_memory", "DataLoader pin_memory"))
#: The CPU ops of a DataLoader fetch (``analyze/events.py``'s LOADER_FETCH): where the loader's configuration
#: changed, they are priced by the DataLoader wait they add, not by name.
LOADER_FETCH = "enumerate(DataLoader)"

#: How fast the work went (us). ``per`` names the work metric a rate is per unit of (its time effect is that
#: work's count times the change of the rate).
RATE: tuple[Metric, ...] = (
    Metric("cpu_per_launch_us", "CPU time per launch call", "us",
           _ratio(_field("launch_call_us"), _field("launch_count"))),
    Metric("host_per_launch_us", "CPU time per launch", "us", _ratio(_host_issue_us, _field("launch_count"))),
    Metric("gpu_per_kernel_us", "GPU per kernel", "us",
           _ratio(_field("compute_kernel_time_us"), _field("compute_kernel_count"))),
    Metric("gpu_per_matmul_us", "GPU per matmul", "us",
           _ratio(_field("matmul_us"), _field("matmul_count"))),
    Metric("gpu_busy_us", "GPU busy", "us", _field("gpu_busy_us")),
    Metric("host_issue_us", "host outside waits", "us", _host_issue_us),
    Metric("sync_us", "sync wait", "us", _field("sync_us")),
    Metric("dataloader_us", "DataLoader wait", "us", _field("dataloader_us")),
)
RATE_PER = {"cpu_per_launch_us": "launch_count", "host_per_launch_us": "launch_count",
            "gpu_per_kernel_us": "compute_kernel_count", "gpu_per_matmul_us": "matmul_count"}

# A count or byte total per step counts as changed when it moved by more than this share of the larger side and by
# at least half a unit per step, and by more than the spread of its run means on either side.
WORK_TOLERANCE = 0.02
WORK_FLOOR = 0.5
# A rate counts as changed when it moved by more than this share.
RATE_TOLERANCE = 0.05


def _mean(vals) -> float | None:
    v = [float(x) for x in vals if x is not None and not (isinstance(x, float) and math.isnan(x))]
    return sum(v) / len(v) if v else None


def side_value(runs: list[list[dict]], get: Callable[[dict], float | None]) -> dict:
    """A metric over one side: the mean of its runs' per-step means, and the range of those run means."""
    means = [m for m in (_mean(get(s) for s in steps) for steps in runs) if m is not None]
    if not means:
        return {"value": None, "runs": 0, "spread": None}
    return {"value": sum(means) / len(means), "runs": len(means), "spread": max(means) - min(means)}


def _changed(a: dict, b: dict, tolerance: float, floor: float) -> bool | None:
    va, vb = a["value"], b["value"]
    if va is None and vb is None:
        return None
    va, vb = va or 0.0, vb or 0.0
    delta = abs(vb - va)
    spread = max(a["spread"] or 0.0, b["spread"] or 0.0)
    return delta > tolerance * max(abs(va), abs(vb)) and delta >= floor and delta > spread


def work_rows(base: list[list[dict]], new: list[list[dict]]) -> list[dict]:
    """One row per work metric present on either side: per-step value on each side, delta, changed."""
    rows = []
    for m in WORK:
        a, b = side_value(base, m.get), side_value(new, m.get)
        ch = _changed(a, b, WORK_TOLERANCE, WORK_FLOOR)
        if ch is None:
            continue
        rows.append({"key": m.key, "label": m.label, "unit": m.unit, "base": a["value"], "new": b["value"],
                     "delta": (b["value"] or 0.0) - (a["value"] or 0.0), "spread": {"base": a["spread"],
                     "new": b["spread"]}, "changed": ch})
    return rows


def _setting(setup: dict | None, key: str) -> float | None:
    v = ((setup or {}).get("loader") or {}).get(key)
    return None if v is None or isinstance(v, str) else float(v)


def loader_rows(base: list[list[dict]], new: list[list[dict]], base_setups: list[dict | None],
                new_setups: list[dict | None]) -> list[dict]:
    """The DataLoader's configuration as work rows (``LOADER_STEP``, ``LOADER_SETUP``): the batches from worker
    processes per step, where every capture of both sides has the step field (a report saved before it existed
    has none: not a change); each setting, where every capture of both sides recorded it (``setup.loader``), keyed
    ``loader.<setting>``, changed when the sides differ."""
    rows = []
    has = lambda runs: all(steps and all(LOADER_STEP.key in s for s in steps) for steps in runs)  # noqa: E731
    if has(base) and has(new):
        a, b = side_value(base, LOADER_STEP.get), side_value(new, LOADER_STEP.get)
        ch = _changed(a, b, WORK_TOLERANCE, WORK_FLOOR)
        if ch is not None:
            rows.append({"key": LOADER_STEP.key, "label": LOADER_STEP.label, "unit": "count", "base": a["value"],
                         "new": b["value"], "delta": (b["value"] or 0.0) - (a["value"] or 0.0),
                         "spread": {"base": a["spread"], "new": b["spread"]}, "changed": ch})
    for key, label in LOADER_SETUP:
        va, vb = [_setting(x, key) for x in base_setups], [_setting(x, key) for x in new_setups]
        if not va or not vb or None in va or None in vb:
            continue
        ma, mb = sum(va) / len(va), sum(vb) / len(vb)
        rows.append({"key": f"loader.{key}", "label": label, "unit": "count", "base": ma, "new": mb,
                     "delta": mb - ma, "spread": {"base": max(va) - min(va), "new": max(vb) - min(vb)},
                     "changed": set(va) != set(vb)})
    return rows


def rate_rows(base: list[list[dict]], new: list[list[dict]]) -> list[dict]:
    """One row per rate present on both sides: value on each side, relative change, whether it changed, and its
    time effect per step (the new side's count of the work it is per, times the change of the rate)."""
    rows = []
    for m in RATE:
        a, b = side_value(base, m.get), side_value(new, m.get)
        if a["value"] is None or b["value"] is None:
            continue
        rel = (b["value"] - a["value"]) / a["value"] if a["value"] else None
        per = RATE_PER.get(m.key)
        if per is not None:
            count = side_value(new, _field(per))["value"] or 0.0
            effect = count * (b["value"] - a["value"])
        else:
            effect = b["value"] - a["value"]
        rows.append({"key": m.key, "label": m.label, "unit": m.unit, "base": a["value"], "new": b["value"],
                     "rel_change": rel, "effect_us": effect,
                     "changed": rel is not None and abs(rel) > RATE_TOLERANCE})
    return rows


# --------------------------------------------------------------------------------------------------- by name


def at_base_rate(row: dict, index: float) -> float:
    """What a name's count change costs at the base's own rate: the change in calls per step times the base's time
    per call; a name only in the new run is priced at its new time per call divided by ``index`` (the new time of
    the names whose count did not change over their base-rate time: how much faster or slower the new run went)."""
    dc = row["new_count"] - row["base_count"]
    if row["base_count"]:
        return dc * row["base_us"] / row["base_count"]
    return dc * (row["new_us"] / row["new_count"]) / (index or 1.0) if row["new_count"] else 0.0


def name_rows(base: list[dict] | None, new: list[dict] | None, what: str, top: int = 8, loader: bool = False) -> dict:
    """Kernels (or CPU ops) by name: ``base``/``new`` are inventories, one dict per run ``{name: [count per step,
    time per step us]}``. Returns the names whose count per step changed (largest time first, at most ``top``),
    the names whose count did not change with their time per call on each side (``same``: most time first, at
    most ``top``), the price index of those (their new counts at the base and at the new time per call), and the
    totals; with ``loader`` (CPU ops), the changed names' cost of the DataLoader's fetches apart."""
    if not base or not new:
        return {"what": what, "available": False}

    def pooled(invs: list[dict]) -> dict:
        names = set().union(*invs)
        out = {}
        for n in names:
            cs = [inv.get(n, (0.0, 0.0)) for inv in invs]
            out[n] = (sum(c for c, _ in cs) / len(cs), sum(t for _, t in cs) / len(cs),
                      max(c for c, _ in cs) - min(c for c, _ in cs))
        return out

    a, b = pooled(base), pooled(new)
    changed, same = [], []
    at_base = at_new = 0.0
    for n in set(a) | set(b):
        ca, ta, sa = a.get(n, (0.0, 0.0, 0.0))
        cb, tb, sb = b.get(n, (0.0, 0.0, 0.0))
        if _changed({"value": ca, "spread": sa}, {"value": cb, "spread": sb}, WORK_TOLERANCE, WORK_FLOOR):
            changed.append({"name": n, "base_count": ca, "new_count": cb, "base_us": ta, "new_us": tb,
                            "delta_us": tb - ta})
        elif ca and cb:
            at_base += cb * (ta / ca)
            at_new += tb
            same.append({"name": n, "count": cb, "base_us_per_call": ta / ca, "new_us_per_call": tb / cb,
                         "rel_change": (tb / cb) / (ta / ca) - 1 if ta else None, "new_us": tb})
    changed.sort(key=lambda r: -abs(r["delta_us"]))
    same.sort(key=lambda r: -r["new_us"])
    index = at_new / at_base if at_base else 1.0
    out = {"what": what, "available": True, "changed_names": len(changed), "changed": changed[:top],
           "changed_delta_us": sum(r["delta_us"] for r in changed),
           "changed_at_base_rate_us": sum(at_base_rate(r, index) for r in changed),
           "same": same[:top], "same_names_base_rate_us": at_base, "same_names_new_us": at_new,
           "same_names_rel_change": (at_new - at_base) / at_base if at_base else None,
           "base_total": {"count": sum(v[0] for v in a.values()), "us": sum(v[1] for v in a.values())},
           "new_total": {"count": sum(v[0] for v in b.values()), "us": sum(v[1] for v in b.values())}}
    if loader:
        out["loader_at_base_rate_us"] = sum(at_base_rate(r, index) for r in changed if r["name"].startswith(LOADER_FETCH))
    return out
