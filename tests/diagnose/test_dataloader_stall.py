"""dataloader-stall: the fix fits the run: no GPU advice (pin_memory) on a CPU-only run."""

from __future__ import annotations

import pytest

from _real import GPU, findings, raw_files


@pytest.mark.timing
def test_cpu_only_run_gets_no_pin_memory(cpu_slow_loader_run):
    # independently: the capture has no GPU activity at all
    for d in raw_files(cpu_slow_loader_run):
        assert not [e for e in d["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    f = findings(cpu_slow_loader_run)["dataloader-stall"]
    assert "pin_memory" not in f["fix"] and "GPU" not in f["fix"]
    assert "num_workers" in f["fix"]


def test_gpu_run_keeps_pin_memory_only_where_it_is_off():
    """pin_memory=True is advised to a GPU run whose loader does not pin; not repeated where the capture had it on."""
    for name, on in (("slow_loader", True), ("baseline", False)):
        (raw,) = raw_files(GPU / name)
        assert raw["traceinspect"]["dataloader"]["pin_memory"] is on  # independently, from the capture metadata
        fix = findings(GPU / name)["dataloader-stall"]["fix"]
        assert ("pin_memory=True" in fix) is (not on), (name, fix)
