"""Which explains a step-time change, the work or the rate, and the regression gate built on it (pure).

``explain`` reads the step-time comparison (``overall``), the work and rate rows (``report/diff_work.py``) and, where
the traces were read, the kernels by name, and returns the verdict:

* ``none``: the step did not change beyond the noise; ``unknown``: the noise could not be measured;
* ``machine``: the work is the same (no work metric and no kernel name's count changed): the step changed because
  the same work went faster or slower; the verdict names the rate whose time effect is the largest in the direction
  of the change;
* ``code``: the work changed; the verdict lists what changed and estimates the time it explains on the side that
  bounds the step: the host (the GPU busy less than ``GPU_BOUND_SHARE`` of the step: the launches changed times the
  base host time per launch, plus the change in sync waits) or the GPU (the changed kernels' GPU time by name, or the
  change of GPU busy time beyond the same kernels' rate change).

``gate`` trips when NEW is slower than BASE by more than ``pct`` % of BASE's step, beyond the noise, and the verdict
is ``code`` (or any verdict with ``count_machine``).
"""

from __future__ import annotations

GPU_BOUND_SHARE = 0.85

_SUBJECT = {
    "host_per_launch_us": "the host issued it", "cpu_per_launch_us": "the host issued it",
    "host_issue_us": "the host issued it", "gpu_per_kernel_us": "the GPU ran it",
    "gpu_per_matmul_us": "the GPU ran its matrix multiplies", "gpu_busy_us": "the GPU ran it",
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


def work_estimate(work: list[dict], rates: list[dict], kernels: dict, bound: str | None) -> float | None:
    """The step time the work change explains, on the side that bounds the step (module docstring)."""
    w, r = _rows(work), _rows(rates)
    if bound == "host":
        est = 0.0
        if "launch_count" in w and "host_per_launch_us" in r:
            est += w["launch_count"]["delta"] * r["host_per_launch_us"]["base"]
        if "sync_us" in r and "sync_count" in w and w["sync_count"]["changed"]:
            est += r["sync_us"]["new"] - r["sync_us"]["base"]
        return est
    if bound == "gpu":
        if kernels.get("available"):
            return kernels["changed_delta_us"]
        if "gpu_busy_us" in r and "gpu_per_kernel_us" in r:
            return (r["gpu_busy_us"]["new"] - r["gpu_busy_us"]["base"]) - r["gpu_per_kernel_us"]["effect_us"]
    return None


def _work_items(work: list[dict], kernels: dict, ops: dict) -> list[str]:
    items = [f"{row['label']} {_num(row['base'] or 0, row['unit'])} -> {_num(row['new'] or 0, row['unit'])}"
             for row in work if row["changed"]]
    for inv in (kernels, ops):
        if inv.get("available") and inv["changed_names"]:
            top = inv["changed"][:2]
            names = ", ".join(f"{c['name'][:60]} {_num(c['base_count'], 'count')} -> {_num(c['new_count'], 'count')}"
                              for c in top)
            items.append(f"{inv['changed_names']} {inv['what']} name(s) changed count ({names})")
    return items


def explain(overall: dict | None, work: list[dict], rates: list[dict], kernels: dict, ops: dict) -> dict:
    """The verdict (module docstring): ``kind``, ``text``, ``bound``, ``work_changed``, ``work_items``,
    ``work_explains_us``, ``rates`` (the keys of the rates named)."""
    work_changed = any(r["changed"] for r in work) or bool(kernels.get("available") and kernels["changed_names"])
    out = {"kind": "unknown", "text": "", "bound": None, "work_changed": work_changed,
           "work_items": _work_items(work, kernels, ops), "work_explains_us": None, "rates": []}
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
        est = work_estimate(work, rates, kernels, bound)
        out["work_explains_us"] = est
        out["kind"] = "code"
        head = f"the work changed: {'; '.join(out['work_items'][:4])}"
        share = f" ({_ms(est)} of the {_ms(delta)} change, on the {bound} side that bounds the step)" \
            if est is not None and bound else ""
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


def gate(overall: dict | None, verdict: dict, pct: float, count_machine: bool = False) -> dict:
    """Whether NEW is a regression against BASE: slower by more than ``pct`` % of the base step and beyond the
    noise, and explained by the work (or by anything, with ``count_machine``). ``reasons``: what tripped it or why
    it did not."""
    out = {"pct": pct, "count_machine": count_machine, "tripped": False, "reasons": []}
    if not overall or overall.get("delta_us") is None or not overall["base"]["mean_us"]:
        out["reasons"].append("no step time on both sides: nothing to gate")
        return out
    rel = overall["delta_us"] / overall["base"]["mean_us"]
    slower = rel > pct / 100.0
    beyond = bool(overall.get("significant"))
    why = f"step {overall['base']['mean_us'] / 1000:.2f} -> {overall['new']['mean_us'] / 1000:.2f} ms ({100 * rel:+.1f} %)"
    if not slower:
        out["reasons"].append(f"{why}: not slower by more than {pct:g} %")
        return out
    if not beyond:
        noise = overall.get("threshold_us")
        out["reasons"].append(f"{why}: within the noise" + (f" ({noise / 1000:.2f} ms)" if noise else ""))
        return out
    if verdict["kind"] == "code" or count_machine:
        out["tripped"] = True
        out["reasons"].append(f"{why}, beyond the noise ({overall['threshold_us'] / 1000:.2f} ms): {verdict['text']}")
        return out
    out["reasons"].append(f"{why}, beyond the noise, but {verdict['text']} (not counted: --count-machine counts it)")
    return out
