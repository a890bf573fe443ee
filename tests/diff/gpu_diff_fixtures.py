"""The committed diff fixtures (fixtures/gpu_diff/: real H200 captures), analysed once per test session: each one's
report dict and its kernels and CPU ops by name (and kernels by name and shape)."""

from __future__ import annotations

import functools
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "gpu_diff"

#: Unchanged jobs and their repeats (fixtures/README.md).
REPEATS = {"deep": ["cpu_a", "cpu_b", "cpu_c"], "tf_bf16": ["gpu_a", "gpu_b", "gpu_c"],
           "tf_fp32": ["gpu_fp32", "gpu_fp32_b", "gpu_fp32_c"]}
#: One-knob regressions of each job.
REGRESSIONS = {"deep": ["cpu_single", "cpu_tiny"], "tf_bf16": ["gpu_fp32", "gpu_item", "gpu_single"],
               "tf_fp32": ["gpu_fp32_single"]}


@functools.lru_cache(maxsize=None)
def analysed(name: str) -> tuple[dict, dict]:
    from traceinspect.cli.diff_sides import inventory
    from traceinspect.config import Config
    from traceinspect.run import report_folder

    r = report_folder(FIXTURES / name, Config(use_cache=False))
    return r.to_dict(), inventory(r)


def diff_of(base: list[str], new: list[str], pct: float | None = 5.0, **kw) -> dict:
    from traceinspect.report.diff_runs import diff_runs

    a, b = [analysed(n) for n in base], [analysed(n) for n in new]
    return diff_runs([x[0] for x in a], [x[0] for x in b], inventories=([x[1] for x in a], [x[1] for x in b]),
                     fail_on_regression=pct, **kw)


def walls(name: str) -> list[float]:
    d = analysed(name)[0]
    return [s["wall_us"] for s in d["ranks"][0]["steps"] if not s["synthetic"]]
