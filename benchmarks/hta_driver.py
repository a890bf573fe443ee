#!/usr/bin/env python3
"""Run Holistic Trace Analysis (HTA) on one run folder, the way its documentation shows.

Why a separate script: HTA lives in its own virtual environment (``benchmarks/.venv-hta``) so its
pins never touch the project's; run.py starts this script with that interpreter and measures the
whole process (interpreter start, imports, parsing, the three analyses), like a user's script.

The work is HTA's documented entry point with its defaults: ``TraceAnalysis(trace_dir=DIR)``
(which finds the rank files by the ``"rank"`` in each file's ``distributedInfo``, parses them with
its default JSON backend, one process per rank up to the core count, and drops the last
ProfilerStep), then ``get_temporal_breakdown``, ``get_comm_comp_overlap`` and
``get_gpu_kernel_breakdown``, all with ``visualize=False``. These three are the HTA counterparts
of traceinspect's per-step time split, overlap and top-kernel sections.

Prints one JSON line on stdout (last line): phase timings and a small summary of the results.
Usage: .venv-hta/bin/python hta_driver.py DIR
"""

from __future__ import annotations

import json
import logging
import sys
import time


def main(trace_dir: str) -> dict:
    t0 = time.perf_counter()
    from importlib.metadata import version

    from hta.trace_analysis import TraceAnalysis

    logging.getLogger("hta").setLevel(logging.WARNING)
    t_import = time.perf_counter()
    analysis = TraceAnalysis(trace_dir=trace_dir)
    t_load = time.perf_counter()
    temporal = analysis.get_temporal_breakdown(visualize=False)
    t_temporal = time.perf_counter()
    overlap = analysis.get_comm_comp_overlap(visualize=False)
    t_overlap = time.perf_counter()
    kernel_types, kernels = analysis.get_gpu_kernel_breakdown(visualize=False)
    t_kernels = time.perf_counter()
    return {
        "hta_version": version("HolisticTraceAnalysis"),
        "ranks": sorted(int(r) for r in analysis.t.traces),
        "seconds": {
            "import": t_import - t0,
            "load": t_load - t_import,
            "temporal_breakdown": t_temporal - t_load,
            "comm_comp_overlap": t_overlap - t_temporal,
            "gpu_kernel_breakdown": t_kernels - t_overlap,
        },
        "summary": {
            "idle_time_pctg": dict(zip(temporal["rank"].astype(int), temporal["idle_time_pctg"].astype(float))),
            "comp_comm_overlap_pctg": dict(
                zip(overlap["rank"].astype(int), overlap["comp_comm_overlap_pctg"].astype(float))
            ),
            "kernel_types": len(kernel_types),
            "kernel_rows": len(kernels),
        },
    }


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    result = main(sys.argv[1])
    print(json.dumps(result, default=str))
