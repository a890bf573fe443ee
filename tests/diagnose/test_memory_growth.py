"""memory-growth on real CPU captures made in the test session (``profile_memory``): the reference workload's planted
leak (``keep_outputs``: one micro-batch's fp32 output kept per step) is found with its size and the op that leaks;
the same run without the leak grows by nothing."""

from __future__ import annotations

import numpy as np

from traceinspect.config import Config

NOCACHE = Config(use_cache=False, workers=1)


def test_a_planted_leak_names_its_op(cpu_capture_factory):
    from traceinspect.run import report_folder

    folder = cpu_capture_factory(preset="optimized", nproc=1, profile_memory=True,
                                 overrides={"num_workers": 0, "accum_steps": 1, "keep_outputs": True,
                                            "probe_loader": False, "batch_size": 64, "num_classes": 4096})
    rep = report_folder(str(folder), NOCACHE.with_overrides(memory_growth_min_bytes=512 * 1024))
    d = rep.to_dict()
    (f,) = [f for f in d["findings"] if f["id"] == "memory-growth"]
    ev = f["evidence"]["per_rank"][0]
    out_bytes = 64 * 4096 * 4  # the kept fp32 output of one micro-batch
    assert abs(ev["growth_bytes_per_step"] - out_bytes) <= 0.05 * out_bytes
    assert ev["growers"][0]["op"] == "aten::linear" and ev["growers"][0]["phase"] == "forward"
    assert f["bytes_at_stake"] == ev["end_allocated_bytes"][-1] - ev["end_allocated_bytes"][0]
    clean = cpu_capture_factory(preset="optimized", nproc=1, profile_memory=True,
                                overrides={"num_workers": 0, "accum_steps": 1, "probe_loader": False,
                                           "batch_size": 64, "num_classes": 4096})
    d2 = report_folder(str(clean), NOCACHE.with_overrides(memory_growth_min_bytes=512 * 1024)).to_dict()
    assert not [f for f in d2["findings"] if f["id"] == "memory-growth"]
    assert np.isclose(d2["ranks"][0]["memory"]["growth_bytes_per_step"], 0.0, atol=out_bytes / 10)
