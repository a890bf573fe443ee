"""no-mixed-precision on real traces: quiet on the public V100 (compute capability 7.0), A100 TF32 and H100 bf16
runs; the V100 analysis with its compute capability set to 8.0 (CONSTRUCTED) fires with its own fp32 GEMM time
recomputed from the raw kernels; the H200 fp32 fixture fires, its bf16 and TF32 twins are quiet."""

from __future__ import annotations

import dataclasses

import pytest

from _real import finding, rerun
from gpu_fixtures import gpu_fixture, raw_json, report
from public_traces import BERT, DDP_2RANK, DIFF_CONTROL, DIFF_TEST, need, only_file


@pytest.mark.parametrize("folder", [DIFF_TEST, DIFF_CONTROL, DDP_2RANK, BERT], ids=lambda p: p.name)
def test_no_mixed_precision_quiet_on_public_traces(folder):
    """V100 (cc 7.0, fp32 sgemm), A100 TF32 training, H100 bf16 inference: nothing to flag."""
    need(folder)
    assert finding(report(folder), "no-mixed-precision") is None


def test_no_mixed_precision_compute_capability_is_the_gate():
    """CONSTRUCTED: the real V100 analysis with the device's compute capability changed to 8.0 fires; the
    evidence is the V100's own fp32 GEMM time, recomputed here from the raw kernels (volta_sgemm, gemv...)."""
    need(DIFF_TEST)
    rep = rerun(report(DIFF_TEST), lambda ra: dataclasses.replace(ra, compute_capability=(8, 0)))
    f = finding(rep, "no-mixed-precision")
    assert f is not None and f.severity == "warning"
    ev = raw_json(only_file(DIFF_TEST))["traceEvents"]
    steps = [e for e in ev if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")]
    # kernels launched before the window (no launch call in the file) are backlog, no step's work
    calls = {e["args"]["correlation"] for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")
             and "correlation" in e.get("args", {})}
    sgemm = sum(e["dur"] for e in ev if e.get("cat") == "kernel" and e["args"].get("correlation") in calls
                and ("sgemm" in e["name"] or "gemv2" in e["name"] or "gemmk1" in e["name"]))
    got = f.evidence["per_rank"][0]["fp32_matmul_us_per_step"]
    assert got == pytest.approx(sgemm / len(steps), rel=0.01)  # kernels outside any step are the 1 % slack
    assert f.extra["estimate_us"] == pytest.approx(0.75 * got)  # the rule's own estimate, before the accounting
    assert 0 < f.time_at_stake_us <= f.extra["estimate_us"]


def test_no_mixed_precision_fires_on_fp32_fixture():
    folder = gpu_fixture(amp="none", tf32=False)
    f = finding(report(folder), "no-mixed-precision")
    assert f is not None
    top = f.evidence["per_rank"][0]["top_fp32_kernels"]
    assert top and all("ffma" in k["kernel"] or "sgemm" in k["kernel"] or "f32" in k["kernel"] for k in top)


@pytest.mark.parametrize("knobs", [{"amp": "bf16"}, {"amp": "none", "tf32": True}], ids=["bf16", "tf32"])
def test_no_mixed_precision_quiet_on_fixture(knobs):
    assert finding(report(gpu_fixture(**knobs)), "no-mixed-precision") is None
