"""Which explains a step-time change, the work or the rate, and the regression gate built on it (pure).

``explain`` reads the step-time comparison (``overall``), the work and rate rows (``report/diff_work.py``) and, where
the traces were read, the kernels by name, and returns the verdict:

* ``none``: the step did not change beyond the noise; ``unknown``: the noise could not be measured;
* ``machine``: the work is the same (no work metric and no kernel name's count changed): the step changed because
  the same work went faster or slower; the verdict names the rate whose time effect is the largest in the direction
  of the change;
* ``code``: the work changed; the verdict lists what changed and what it costs at the base's own rates
  (``work_cost``): the time it adds on the host (the CPU ops whose count changed, each at the base's time per call;
  a name new in NEW at its new time per call over the price index of the unchanged names; without names, the
  launches added times the base host time per launch plus the change in sync waits) and on the GPU (the kernels
  whose count changed, priced the same way; without names, the change of GPU busy time beyond the per-kernel rate's
  effect). The side that bounds the base step (the GPU when busy at least ``GPU_BOUND_SHARE`` of it, else the host)
  takes the whole base step plus its change, the other side its own base time plus its change; the predicted step
  is the larger. No rate of NEW enters it except through a new name's time, corrected by the price index, so a
  faster or slower host does not move it.

``gate`` trips on ``work`` when that cost exceeds ``pct`` % of BASE's step; on ``step`` when NEW is slower than
BASE by more than ``pct`` %, beyond the noise, and the work changed at a cost (a work change that saves time at the
base's rates does not explain a slower step); on ``machine`` (only with ``count_machine``) when the step is slower
so otherwise. Where the samples per step changed (a batch or accumulation change), the step time no longer measures
the speed: ``throughput`` (in place of ``work`` and ``step``) trips when the time per sample (1 / samples/s) rose by
more than ``pct`` % beyond the noise. With the same samples per step, fewer
samples/s is a longer step, and the step triggers gate it.
"""

from __future__ import annotations

from .diff_work import LOADER_STEP

GPU_BOUND_SHARE = 0.85

_SUBJECT = {
    "host_per_launch_us": "the host issued it", "cpu_per_launch_us": "the host issued it",
    "host_issue_us": "the host issued it", "gpu_per_kernel_us": "the GPU ran it",
    "gpu_per_matmul_us": "the GPU ran its matrix multiplies", "gpu_busy_us": "the GPU ran it",
    "gpu_same_kernels_us": "the GPU ran the same kernels (name and shape)",
    "sync_us": "the host waited in syncs", "dataloader_us": "the host waited for the DataLoader",
}
_WAITS = ("sync_us", "dataloader_us")


def _num(v: float, unit: str) -> str:
    if unit == "bytes":
        return f"{v / 1e6:.2f} MB"
    if unit == "us":
        return f"{v:.1f} us"
    return f"{v:.0f}" if abs(v - round(v)) < 0.05 else f"{v:.1f}"


def _ms(us: float) -> str:
    return f"{us / 1000:+.2f} ms"


def _rows(rows: list[dict]) -> dict:
    return {r["key"]: r for r in rows}


def bound_of(rates: list[dict], wall_us: float | None) -> str | None:
    """``gpu`` when the base GPU was busy at least GPU_BOUND_SHARE of the base step, else ``host``; None on
    CPU-only runs."""
    busy = _rows(rates).get("gpu_busy_us")
    if busy is None or not wall_us:
        return None
    return "gpu" if busy["base"] / wall_us >= GPU_BOUND_SHARE else "host"


def _rate_phrase(r: dict) -> str:
    rel = r["rel_change"] or 0.0
    subject = _SUBJECT.get(r["key"], r["label"])
    if r["key"] in _WAITS:
        how = f"{abs(r['new'] - r['base']) / 1000:.2f} ms {'longer' if r['new'] > r['base'] else 'less'}"
    else:
        how = f"{abs(100 * rel):.0f} % {'slower' if rel > 0 else 'faster'}"
    return f"{subject} {how} ({r['label']} {_num(r['base'], 'us')} -> {_num(r['new'], 'us')})"


def machine_rates(rates: list[dict], delta_us: float, bound: str | None) -> list[dict]:
    """The changed rates whose time effect goes the way of the step change, largest first; on a host-bound step
    the GPU's per-kernel rates come after the host's (a faster GPU does not shorten a step it waits in)."""
    same = [r for r in rates if r["changed"] and r["effect_us"] * delta_us > 0 and r["key"] != "host_issue_us"]

    def rank(r):
        gpu_side = r["key"].startswith("gpu_")
        off_bound = (bound == "host" and gpu_side) or (bound == "gpu" and not gpu_side and r["key"] not in _WAITS)
        return (off_bound, -abs(r["effect_us"]))
    return sorted(same, key=rank)


def loader_changed(work: list[dict]) -> bool:
    """Whether the DataLoader's configuration changed (``diff_work.loader_rows``)."""
    return any(row["changed"] for row in work if row["key"] == LOADER_STEP.key or row["key"].startswith("loader."))


def _host_change(w: dict, r: dict, ops: dict, loader: bool) -> tuple[float | None, str]:
    """The host time the work change adds per step at the base's own rates, and what it was priced from. Where
    the DataLoader's configuration changed, its part is the change of the DataLoader wait (its fetches' CPU ops
    leave the by-name sum): a loader with or without workers runs other code, whose base rate no trace shows."""
    wait = (r["dataloader_us"]["new"] - r["dataloader_us"]["base"]) if loader and "dataloader_us" in r else None
    plus = "; the DataLoader's configuration changed: plus the change of its wait" if wait is not None else ""
    if ops.get("available"):
        est = ops["changed_at_base_rate_us"]
        if wait is not None:
            est += wait - ops.get("loader_at_base_rate_us", 0.0)
        return est, "the CPU ops whose count changed, at the base's time per call" + plus
    if "launch_count" in w and "host_per_launch_us" in r:
        est = w["launch_count"]["delta"] * r["host_per_launch_us"]["base"]
        if "sync_us" in r and "sync_count" in w and w["sync_count"]["changed"]:
            est += r["sync_us"]["new"] - r["sync_us"]["base"]
        return est + (wait or 0.0), "the launches added at the base's host time per launch" + plus
    if wait is not None:
        return wait, "the change of the DataLoader wait (its configuration changed)"
    return None, ""


def _gpu_change(r: dict, kernels: dict, shapes: dict) -> tuple[float | None, str]:
    """The GPU time the work change adds per step at the base's own rates, and what it was priced from."""
    if shapes.get("available"):
        return (shapes["changed_at_base_rate_us"],
                "the kernels whose count changed by name and shape, at the base's GPU time per kernel of that shape")
    if kernels.get("available"):
        return kernels["changed_at_base_rate_us"], "the kernels whose count changed, at the base's GPU time per kernel"
    if "gpu_busy_us" in r and "gpu_per_kernel_us" in r:
        return ((r["gpu_busy_us"]["new"] - r["gpu_busy_us"]["base"]) - r["gpu_per_kernel_us"]["effect_us"],
                "the GPU busy change beyond the per-kernel rate's")
    return None, ""


def work_cost(work: list[dict], rates: list[dict], kernels: dict, ops: dict, shapes: dict, bound: str | None,
              wall_us: float | None) -> dict | None:
    """What the work change costs per step at the base's own rates (module docstring): ``us`` (the step change it
    predicts), ``host_us`` / ``gpu_us`` (the time it adds on each side) and what each was priced from. The side
    that bounds the base step takes the whole base step, the other side its own busy time (the base GPU busy, or
    the base host time outside waits), and the step is the larger of the two."""
    w, r = _rows(work), _rows(rates)
    dh, host_from = _host_change(w, r, ops, loader_changed(work))
    dg, gpu_from = _gpu_change(r, kernels, shapes)
    out = {"us": None, "rel": None, "host_us": dh, "gpu_us": dg, "host_from": host_from, "gpu_from": gpu_from}
    if not wall_us:
        return out
    if bound is None:
        out["us"] = dh
    elif bound == "host" and dh is not None:
        gpu = r["gpu_busy_us"]["base"] + (dg or 0.0)
        out["us"] = max(wall_us + dh, gpu) - wall_us
    elif bound == "gpu" and dg is not None:
        host = r["host_issue_us"]["base"] + (dh or 0.0) if "host_issue_us" in r else 0.0
        out["us"] = max(wall_us + dg, host) - wall_us
    out["rel"] = out["us"] / wall_us if out["us"] is not None else None
    return out


def _work_items(work: list[dict], kernels: dict, ops: dict, shapes: dict | None = None) -> list[str]:
    items = [f"{row['label']} {_num(row['base'] or 0, row['unit'])} -> {_num(row['new'] or 0, row['unit'])}"
             for row in work if row["changed"]]
    for inv in (kernels, ops):
        if inv.get("available") and inv["changed_names"]:
            top = inv["changed"][:2]
            names = ", ".join(f"{c['name'][:60]} {_num(c['base_count'], 'count')} -> {_num(c['new_count'], 'count')}"
                              for c in top)
            items.append(f"{inv['changed_names']} {inv['what']} name(s) changed count ({names})")
    shapes = shapes or {}
    if shapes.get("available") and shapes["changed_names"] and not kernels.get("changed_names"):
        top = shapes["changed"][:2]
        names = ", ".join(f"{c['name'][:60]} ({c['shape']}) {_num(c['base_count'], 'count')} -> "
                          f"{_num(c['new_count'], 'count')}" for c in top)
        items.append(f"the same kernel names, {shapes['changed_names']} launch shape(s) changed count ({names})")
    return items


def explain(overall: dict | None, work: list[dict], rates: list[dict], kernels: dict, ops: dict,
            shapes: dict | None = None) -> dict:
    """The verdict (module docstring): ``kind``, ``text``, ``bound``, ``work_changed``, ``work_items``,
    ``work_explains_us``, ``rates`` (the keys of the rates named)."""
    shapes = shapes or {}
    work_changed = any(r["changed"] for r in work) or any(
        bool(inv.get("available") and inv["changed_names"]) for inv in (kernels, shapes))
    out = {"kind": "unknown", "text": "", "bound": None, "work_changed": work_changed,
           "work_items": _work_items(work, kernels, ops, shapes), "work_explains_us": None, "work_cost": None,
           "rates": []}
    if not overall or overall.get("delta_us") is None:
        out["text"] = "no step time on both sides"
        return out
    delta = overall["delta_us"]
    bound = bound_of(rates, overall["base"]["mean_us"])
    out["bound"] = bound
    named = machine_rates(rates, delta, bound)
    out["rates"] = [r["key"] for r in named[:2]]
    rate_text = _rate_phrase(named[0]) if named else ""
    if len(named) > 1:
        r = named[1]
        rate_text += f"; {r['label']} {_num(r['base'], 'us')} -> {_num(r['new'], 'us')}"
    if work_changed:
        cost = work_cost(work, rates, kernels, ops, shapes, bound, overall["base"]["mean_us"])
        est = cost["us"]
        out["work_explains_us"] = est
        out["work_cost"] = cost
        out["kind"] = "code"
        head = f"the work changed: {'; '.join(out['work_items'][:4])}"
        share = (f" (at the base's own rates it costs {_ms(est)} a step, {100 * cost['rel']:+.1f} % of the base "
                 f"step, against a measured {_ms(delta)}; the {bound} bounds the base step)"
                 if est is not None and bound else
                 f" (at the base's own rates it costs {_ms(est)} a step)" if est is not None else "")
        out["text"] = head + share + (f"; and the rate: {rate_text}" if rate_text else "")
        return out
    if overall.get("significant") is None:
        out["text"] = "same work; the noise could not be measured (fewer than 2 steps on a side)"
        return out
    if not overall["significant"]:
        out["kind"] = "none"
        out["text"] = "same work, and the step time did not change beyond the noise"
        return out
    out["kind"] = "machine"
    out["text"] = (f"same work; {rate_text or 'no single rate explains it'}: a machine difference, not a code "
                   f"change")
    return out


def priced(cost: dict) -> str:
    """What a work cost was priced from, per side."""
    sides = [f"{side} {_ms(cost[k])} from {cost[src]}" for side, k, src in
             (("host", "host_us", "host_from"), ("GPU", "gpu_us", "gpu_from")) if cost.get(k) is not None]
    return "; ".join(sides)


def gate(overall: dict | None, verdict: dict, pct: float, count_machine: bool = False,
         per_sample: dict | None = None) -> dict:
    """Whether NEW is a regression against BASE (module docstring). ``tripped_by``: ``work`` (what the work change
    costs at the base's own rates exceeds ``pct`` % of the base step: no machine's speed enters it), ``step`` (the
    step is slower by more than ``pct`` % beyond the noise and the work changed at a cost), ``machine`` (the same
    otherwise, with ``count_machine``). ``reasons``: what tripped it, or why it did not.

    ``per_sample`` (``diff_figures.per_sample``): where the samples per step changed, a step's time no longer
    measures the speed (a step twice as long that trains twice the samples is as fast), so the gate compares per
    sample (``per_sample_gate``)."""
    out = {"pct": pct, "count_machine": count_machine, "tripped": False, "tripped_by": [], "reasons": []}
    if not overall or overall.get("delta_us") is None or not overall["base"]["mean_us"]:
        out["reasons"].append("no step time on both sides: nothing to gate")
        return out
    if per_sample and per_sample.get("changed"):
        return per_sample_gate(out, overall, verdict, pct, per_sample)
    rel = overall["delta_us"] / overall["base"]["mean_us"]
    beyond = bool(overall.get("significant"))
    why = (f"step {overall['base']['mean_us'] / 1000:.2f} -> {overall['new']['mean_us'] / 1000:.2f} ms "
           f"({100 * rel:+.1f} %)")
    cost = verdict.get("work_cost") or {}
    if verdict["work_changed"] and cost.get("rel") is not None and cost["rel"] > pct / 100.0:
        out["tripped_by"].append("work")
        out["reasons"].append(f"the work change costs {_ms(cost['us'])} a step at the base's own rates "
                              f"({100 * cost['rel']:+.1f} % of the base step, over {pct:g} %; {priced(cost)}): "
                              f"{'; '.join(verdict['work_items'][:4])}")
    # the work change, at the base's rates, is not a saving: it can explain a slower step
    explains = verdict["work_changed"] and (cost.get("us") is None or cost["us"] > 0)
    if rel > pct / 100.0 and beyond and (explains or count_machine):
        out["tripped_by"].append("step" if explains else "machine")
        out["reasons"].append(f"{why}, beyond the noise ({overall['threshold_us'] / 1000:.2f} ms): {verdict['text']}")
    out["tripped"] = bool(out["tripped_by"])
    if out["tripped"]:
        return out
    if verdict["work_changed"] and cost.get("rel") is not None:
        out["reasons"].append(f"the work change costs {_ms(cost['us'])} a step at the base's own rates "
                              f"({100 * cost['rel']:+.1f} %): not over {pct:g} %")
    if rel <= pct / 100.0:
        out["reasons"].append(f"{why}: not slower by more than {pct:g} %")
    elif not beyond:
        noise = overall.get("threshold_us")
        out["reasons"].append(f"{why}: within the noise" + (f" ({noise / 1000:.2f} ms)" if noise else ""))
    elif verdict["work_changed"]:
        out["reasons"].append(f"{why}, beyond the noise, but the work change saves time at the base's rates: the "
                              f"machine made it slower (not counted: --count-machine counts it)")
    else:
        out["reasons"].append(f"{why}, beyond the noise, but {verdict['text']} (not counted: --count-machine "
                              f"counts it)")
    return out


def per_sample_gate(out: dict, overall: dict, verdict: dict, pct: float, ps: dict) -> dict:
    """The gate where the samples per step changed (a batch or accumulation change): ``throughput`` trips when the
    measured step per sample (the time per sample, 1 / samples/s) is more than ``pct`` % above the base's, beyond
    the noise (the step time's rule on the steps' times per sample). A samples-per-step change is a change of the
    program, never a machine's, so ``--count-machine`` does not enter it; ``step`` is not used (a longer step that
    carries more samples is not slower), and neither is ``work``: the work cost prices the kernels and ops whose
    count changed at the base's rates, but not what else grows with the batch (the DataLoader's wait, the copies'
    time), so per sample it can be far off either way. It is listed (``per_sample.work_cost_rel``), not gated."""
    sa, sb = ps["samples_per_step"]["base"], ps["samples_per_step"]["new"]
    ta, tb = ps["us_per_sample"]["base"], ps["us_per_sample"]["new"]
    rel = ps["rel_change"]
    head = f"samples per step {sa:,.0f} -> {sb:,.0f}: compared per sample"
    cost = verdict.get("work_cost") or {}
    wall = overall["base"]["mean_us"]
    cost_rel = ((wall + cost["us"]) / sb) / (wall / sa) - 1 if cost.get("us") is not None and wall else None
    out["per_sample"] = {**ps, "work_cost_rel": cost_rel}
    why = f"time per sample {ta:,.2f} -> {tb:,.2f} us ({100 * rel:+.1f} %)" if rel is not None else ""
    beyond = bool(ps.get("significant"))
    if rel is not None and rel > pct / 100.0 and beyond:
        out["tripped_by"].append("throughput")
        out["reasons"].append(f"{head}; {why}, beyond the noise ({ps['threshold_us']:,.2f} us a sample): fewer "
                              f"samples/s")
    elif rel is None:
        out["reasons"].append(f"{head}; the time per sample is not known")
    elif rel <= pct / 100.0:
        out["reasons"].append(f"{head}; {why}: not slower by more than {pct:g} %")
    else:
        thr = ps.get("threshold_us")
        out["reasons"].append(f"{head}; {why}: within the noise" + (f" ({thr:,.2f} us a sample)" if thr else ""))
    if cost_rel is not None:
        out["reasons"].append(f"the work change at the base's own rates: {100 * cost_rel:+.1f} % per sample "
                              f"(not gated where the samples per step changed: docs/diff.md)")
    out["tripped"] = bool(out["tripped_by"])
    return out
