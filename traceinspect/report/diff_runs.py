"""The diff of several captures per side: work vs rate, the noise across runs, the verdict and the gate (pure).

``diff_runs(bases, news, ...)`` takes lists of report dicts (one per capture of the same job) and returns the diff
document of ``report/diff.py`` for the first capture of each side (per-rank tables, findings), with the step-time
comparison (``overall``) over all captures (``report/diff_noise.py``), and these sections:

* ``runs``: the captures of each side and whether run-to-run variation is measured;
* ``work`` / ``rate``: what the program did and how fast, on the compared ranks (``report/diff_work.py``); the
  work includes the DataLoader's configuration (batches from worker processes, the recorded settings);
* ``names``: kernels and CPU ops whose count per step changed, and kernels by name and launch shape (only where the
  traces were read: ``inventories``; ``report/diff_shapes.py``); the GPU time of the kernels of the same name and
  shape joins ``rate`` as ``gpu_same_kernels_us``;
* ``throughput`` / ``memory``: samples/s, tokens/s, achieved TFLOP/s, MFU, GPU-hours per million samples and peak
  memory of the compared ranks (and the job's throughput), base against new (``report/diff_figures.py``);
* ``verdict``: which explains the step-time change (``report/diff_explain.py``);
* ``gate``: only when ``fail_on_regression`` is given.
"""

from __future__ import annotations

from .diff import MIN_SHARE, SE_FACTOR, _real_steps, _slowest, describe, diff_reports
from .diff_doc import check
from .diff_explain import explain, gate
from .diff_figures import figure_rows, per_sample
from .diff_noise import compare_runs
from .diff_shapes import same_kernel_rate, shape_rows
from .diff_work import loader_rows, name_rows, rate_rows, work_rows


def _rank_of(d: dict, rank: int | None) -> dict | None:
    if rank is not None:
        for r in d.get("ranks", []):
            if r["rank"] == rank and _real_steps(r):
                return r
    return _slowest(d)


def _side_steps(reports: list[dict], rank: int | None) -> tuple[list[list[dict]], list[int | None]]:
    runs, ranks = [], []
    for d in reports:
        r = _rank_of(d, rank)
        runs.append(_real_steps(r) if r is not None else [])
        ranks.append(r["rank"] if r is not None else None)
    return runs, ranks


def _setups(reports: list[dict], ranks: list[int | None]) -> list[dict | None]:
    """The setup (docs/setup.md) of the compared rank of each capture (None where not read)."""
    out = []
    for d, rank in zip(reports, ranks):
        r = next((x for x in d.get("ranks", []) if x["rank"] == rank), None)
        out.append((r or {}).get("setup"))
    return out


def _inventory(inventories: list[dict] | None, ranks: list[int | None], what: str) -> list[dict] | None:
    if not inventories or len(inventories) != len(ranks):
        return None
    out = []
    for inv, rank in zip(inventories, ranks):
        one = (inv or {}).get(rank)
        if not one:
            return None
        if one.get(what) is None:
            return None
        out.append(one[what])
    return out


def diff_runs(bases: list[dict], news: list[dict], pairs: list[tuple[int, int]] | None = None,
              inventories: tuple[list[dict] | None, list[dict] | None] | None = None,
              fail_on_regression: float | None = None, count_machine: bool = False) -> dict:
    """The diff document of several captures per side (module docstring). ``inventories``: per side, one
    ``analyze.inventory.report_inventory`` per capture (or None where a side is a saved report)."""
    if not bases or not news:
        raise ValueError("each side needs at least one run")
    dd = diff_reports(bases[0], news[0], pairs)
    o = dd.get("overall")
    rank_a = o["base_rank"] if o else None
    rank_b = o["new_rank"] if o else None
    if pairs:
        rank_a, rank_b = pairs[0]
    base_runs, ranks_a = _side_steps(bases, rank_a)
    new_runs, ranks_b = _side_steps(news, rank_b)
    if any(base_runs) and any(new_runs):
        step_us = describe([s.get("wall_us") for s in base_runs[0]])["mean_us"]
        walls = lambda runs: [[s.get("wall_us") for s in steps] for steps in runs]  # noqa: E731
        dd["overall"] = {"base_rank": rank_a, "new_rank": rank_b, "metric": "wall",
                         **compare_runs(walls(base_runs), walls(new_runs), step_us, SE_FACTOR, MIN_SHARE)}
    inv_a, inv_b = inventories or (None, None)
    dd["runs"] = {"base": [d.get("source") for d in bases], "new": [d.get("source") for d in news],
                  "ranks": {"base": ranks_a, "new": ranks_b},
                  "measured": bool(dd.get("overall") and dd["overall"].get("runs", {}).get("measured"))}
    dd["work"] = work_rows(base_runs, new_runs) + loader_rows(base_runs, new_runs, _setups(bases, ranks_a),
                                                              _setups(news, ranks_b))
    dd["rate"] = rate_rows(base_runs, new_runs)
    dd["names"] = {"kernels": name_rows(_inventory(inv_a, ranks_a, "kernels"), _inventory(inv_b, ranks_b, "kernels"),
                                        "kernel"),
                   "ops": name_rows(_inventory(inv_a, ranks_a, "ops"), _inventory(inv_b, ranks_b, "ops"), "CPU op",
                                    loader=True),
                   "kernel_shapes": shape_rows(_inventory(inv_a, ranks_a, "kernel_shapes"),
                                               _inventory(inv_b, ranks_b, "kernel_shapes"))}
    same = same_kernel_rate(dd["names"]["kernel_shapes"])
    if same is not None:
        dd["rate"].append(same)
    dd["verdict"] = explain(dd.get("overall"), dd["work"], dd["rate"], dd["names"]["kernels"], dd["names"]["ops"],
                            dd["names"]["kernel_shapes"])
    dd.update(figure_rows(bases, news, ranks_a, ranks_b))
    walls = lambda runs: [[s.get("wall_us") for s in steps] for steps in runs]  # noqa: E731
    ps = per_sample(dd["throughput"], walls(base_runs), walls(new_runs), SE_FACTOR, MIN_SHARE)
    if fail_on_regression is not None:
        dd["gate"] = gate(dd.get("overall"), dd["verdict"], fail_on_regression, count_machine, ps)
    check(dd)
    return dd
