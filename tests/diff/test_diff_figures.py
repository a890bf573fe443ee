"""``traceinspect diff``'s throughput, MFU, GPU-hours and memory rows, and the gate per sample, on real traces: the
H200 fixture pairs (fixtures/gpu, fixtures/gpu_diff) and the public traces (../shared/traces/public). Every figure
is checked against a computation made here from the two reports' own steps and fields, not against the diff's
code."""

from __future__ import annotations

import functools
import html
import math
from pathlib import Path

import jsonschema
import pytest

from gpu_diff_fixtures import analysed as analysed_diff_fixture
from public_traces import DIFF_CONTROL, DIFF_TEST, PUBLIC, need

from traceinspect.render.diff_pages import render_diff_html, render_diff_markdown
from traceinspect.render.diff_work_text import render_work_rate_text
from traceinspect.report.diff_doc import diff_json_schema
from traceinspect.report.diff_runs import diff_runs

GPU = Path(__file__).resolve().parents[2] / "fixtures" / "gpu"
MEMORY_A = PUBLIC / "tracelens_mi300_memory"
MEMORY_B = PUBLIC / "hta_v100_memory"


@functools.lru_cache(maxsize=None)
def report(folder: str) -> dict:
    from traceinspect.config import Config
    from traceinspect.run import report_folder

    return report_folder(folder, Config(use_cache=False)).to_dict()


def side(name: str) -> dict:
    if name.startswith("gpu_diff/"):
        return analysed_diff_fixture(name.split("/", 1)[1])[0]
    if name.startswith("public/"):
        return report(str(need(PUBLIC / name.split("/", 1)[1])))
    return report(str(GPU / name))


def diff(base: str, new: str, pct: float | None = 5.0) -> dict:
    return diff_runs([side(base)], [side(new)], fail_on_regression=pct)


def row(dd: dict, key: str) -> dict:
    return next(r for r in dd["throughput"] + dd["memory"] if r["key"] == key)


def expected(d: dict, rank: int) -> dict:
    """The figures of one rank, computed here from its steps and the report's batch, accumulation, FLOPs and peak
    (docs/metrics.md): samples/s = S / mean step, GPU-hours per million samples = mean step / 3600 / S x 10^6,
    achieved TFLOP/s = FLOPs per step / mean step / 10^12, MFU = achieved / peak."""
    r = next(x for x in d["ranks"] if x["rank"] == rank)
    walls = [s["wall_us"] for s in r["steps"] if not s["synthetic"]] or [s["wall_us"] for s in r["steps"]]
    step_s = sum(walls) / len(walls) / 1e6
    t = r["throughput"]
    s = t["batch"] * t["accum_steps"] if t["batch"] and t["accum_steps"] else None
    flops = t["model_flops_per_step"]
    achieved = flops / step_s / 1e12 if flops else None
    return {"throughput.samples_per_step": s,
            "throughput.samples_per_s": s / step_s if s else None,
            "throughput.gpu_hours_per_million_samples": step_s / 3600 / s * 1e6 if s else None,
            "throughput.model_flops_per_step": flops,
            "throughput.achieved_tflops": achieved,
            "throughput.mfu": achieved / t["peak_tflops"] if achieved and t["peak_tflops"] else None,
            "job.samples_per_s": s / step_s * (d["world_size"] or 1) if s else None,
            "job.achieved_tflops": achieved * (d["world_size"] or 1) if achieved else None}


PAIRS = [("baseline", "optimized"), ("big_baseline", "big_optimized"), ("gpu_diff/gpu_a", "gpu_diff/gpu_single"),
         ("public/hta_diff_control", "public/hta_diff_test")]


@pytest.mark.slow
@pytest.mark.parametrize("base,new", PAIRS, ids=["gpu", "gpu-big", "gpu-diff-single", "public-a100-v100"])
def test_each_figure_is_the_reports_own_computed_again(base, new):
    dd = diff(base, new)
    a, b = side(base), side(new)
    ea, eb = expected(a, dd["runs"]["ranks"]["base"][0]), expected(b, dd["runs"]["ranks"]["new"][0])
    for key in ea:
        r = row(dd, key)
        for got, want in ((r["base"], ea[key]), (r["new"], eb[key])):
            assert (got is None) == (want is None), (key, got, want)
            if want is not None:
                assert math.isclose(got, want, rel_tol=1e-6), (key, got, want)
        if ea[key] and eb[key] is not None:
            assert math.isclose(r["rel_change"], eb[key] / ea[key] - 1, rel_tol=1e-6, abs_tol=1e-12)
            assert math.isclose(r["delta"], eb[key] - ea[key], rel_tol=1e-6, abs_tol=1e-9)
    # unknown is null with the report's reason, never zero
    for r in dd["throughput"]:
        for s in ("base", "new"):
            if r[s] is None:
                assert r["reason"][s], (r["key"], s)
    jsonschema.validate(dd, diff_json_schema())


def test_the_fixture_pairs_change_as_their_steps_say():
    """samples/s and GPU time per sample move inversely with the step at the same samples per step."""
    dd = diff("big_baseline", "big_optimized")
    sps, gh = row(dd, "throughput.samples_per_s"), row(dd, "throughput.gpu_hours_per_million_samples")
    o = dd["overall"]
    assert row(dd, "throughput.samples_per_step")["delta"] == 0
    assert math.isclose(sps["new"] / sps["base"], o["base"]["mean_us"] / o["new"]["mean_us"], rel_tol=1e-6)
    assert math.isclose(gh["new"] / gh["base"], o["new"]["mean_us"] / o["base"]["mean_us"], rel_tol=1e-6)
    assert sps["assessment"] == "better" and gh["assessment"] == "better" and sps["rel_change"] > 5
    # record_shapes was off on the H200 fixtures: tokens, FLOPs and MFU are unknown on both sides, and say why
    for key in ("throughput.tokens_per_s", "throughput.achieved_tflops", "throughput.mfu"):
        r = row(dd, key)
        assert r["base"] is None and r["new"] is None and r["assessment"] is None
        assert "record_shapes was off" in r["reason"]["base"]
    for r in dd["memory"]:
        assert r["base"] is None and "[memory] events" in r["reason"]["new"]
    slower = diff("gpu_diff/gpu_a", "gpu_diff/gpu_single")
    assert row(slower, "throughput.samples_per_s")["assessment"] == "worse"
    assert "per_sample" not in slower["gate"] and "step" in slower["gate"]["tripped_by"]


def test_the_public_pair_compares_mfu_and_the_job():
    """The public A100 (8 ranks) and V100 (2 ranks) traces: FLOPs from their recorded shapes, the job's figures."""
    need(DIFF_CONTROL), need(DIFF_TEST)
    dd = diff("public/hta_diff_control", "public/hta_diff_test")
    a, b = side("public/hta_diff_control"), side("public/hta_diff_test")
    mfu = row(dd, "throughput.mfu")
    assert mfu["base"] > 0 and mfu["new"] > 0 and mfu["assessment"] == ("worse" if mfu["new"] < mfu["base"] else
                                                                        "better")
    assert row(dd, "job.mfu")["base"] == a["throughput"]["mfu"] and row(dd, "job.mfu")["new"] == b["throughput"]["mfu"]
    job = row(dd, "job.samples_per_s")
    assert math.isclose(job["base"], row(dd, "throughput.samples_per_s")["base"] * a["world_size"], rel_tol=1e-6)
    assert math.isclose(job["new"], row(dd, "throughput.samples_per_s")["new"] * b["world_size"], rel_tol=1e-6)
    text = render_work_rate_text(dd, width=140)
    assert "job samples/s" in text and "MFU" in text


@pytest.mark.slow
def test_peak_memory_where_recorded_and_its_reasons_where_not():
    """Two public traces recorded with profile_memory: peak allocated and reserved are the largest of the steps'
    (the report's per-step memory rows), the capacity the device's; the V100 trace has no batch, so its
    samples/s is null with the report's reason."""
    need(MEMORY_A), need(MEMORY_B)
    dd = diff("public/tracelens_mi300_memory", "public/hta_v100_memory")
    for name, s in (("public/tracelens_mi300_memory", "base"), ("public/hta_v100_memory", "new")):
        d = side(name)
        m = next(r for r in d["ranks"] if r["rank"] == dd["runs"]["ranks"][s][0])["memory"]
        alloc = max(x["peak_allocated_bytes"] for x in m["steps"] if x["peak_allocated_bytes"] is not None)
        reserved = max(x["peak_reserved_bytes"] for x in m["steps"] if x["peak_reserved_bytes"] is not None)
        assert row(dd, "memory.peak_allocated_bytes")[s] == alloc
        assert row(dd, "memory.peak_reserved_bytes")[s] == reserved
        assert math.isclose(row(dd, "memory.peak_share")[s], reserved / m["capacity_bytes"], rel_tol=1e-9)
    assert row(dd, "memory.peak_allocated_bytes")["assessment"] == "worse"
    sps = row(dd, "throughput.samples_per_s")
    assert sps["base"] > 0 and sps["new"] is None and sps["delta"] is None and sps["assessment"] is None
    assert "no batch size" in sps["reason"]["new"]
    md = render_diff_markdown(dd)
    assert "| peak allocated | 272.6 MB | 6.63 GB |" in md
    page = render_diff_html(dd)
    assert "<td>peak reserved</td>" in page and html.escape("no batch size in the capture metadata") in page


def test_the_gate_compares_per_sample_where_the_samples_per_step_changed():
    """baseline (batch 256 x 4) and big (1024 x 4) presets of fixtures/gpu: the time per sample, computed here
    from each side's steps, decides; a step no longer than the base's with a quarter of the samples trips it."""
    def per_sample(name):
        d = side(name)
        r = d["ranks"][0]
        walls = [s["wall_us"] for s in r["steps"] if not s["synthetic"]]
        return sum(walls) / len(walls) / (r["throughput"]["batch"] * r["throughput"]["accum_steps"])

    cases = {("big_optimized", "optimized"): True, ("optimized", "big_optimized"): False,
             ("baseline", "big_baseline"): True, ("big_baseline", "baseline"): False}
    for (base, new), trips in cases.items():
        dd = diff(base, new)
        g = dd["gate"]
        ps = g["per_sample"]
        ta, tb = per_sample(base), per_sample(new)
        assert ps["changed"] is True
        assert math.isclose(ps["us_per_sample"]["base"], ta, rel_tol=1e-9)
        assert math.isclose(ps["us_per_sample"]["new"], tb, rel_tol=1e-9)
        assert math.isclose(ps["rel_change"], tb / ta - 1, rel_tol=1e-9)
        assert g["tripped"] is trips, (base, new, g["reasons"])
        assert g["tripped_by"] == (["throughput"] if trips else []), g["reasons"]
        assert "step" not in g["tripped_by"] and "work" not in g["tripped_by"]
    # the step of big_optimized -> optimized is within 5 %: only the time per sample shows the regression
    dd = diff("big_optimized", "optimized")
    assert abs(dd["overall"]["rel_change"]) < 0.05
    jsonschema.validate(dd, diff_json_schema())
    assert "Samples per step changed (4,096 -> 1,024)" in render_work_rate_text(dd, width=140)


CPU_MEMORY = Path(__file__).resolve().parents[2] / "fixtures" / "cpu_memory"


@pytest.mark.slow
def test_tokens_flops_and_host_memory_on_a_cpu_pair_of_two_batch_sizes():
    """fixtures/cpu_memory: the same transformer at batch 8 and 16 (record_shapes, profile_memory). Tokens per step
    = batch x seq_len x micro-batches from the capture metadata (read here with the standard library); peak
    allocated = the largest of the report's per-step peaks; MFU and the capacity are null with their reasons (no
    GPU); the gate compares per sample, the time per sample computed here from the steps."""
    import gzip
    import json

    dd = diff_runs([report(str(CPU_MEMORY / "tf_b8"))], [report(str(CPU_MEMORY / "tf_b16"))], fail_on_regression=5)
    for name, s in (("tf_b8", "base"), ("tf_b16", "new")):
        (f,) = (CPU_MEMORY / name).glob("*.json.gz")
        w = json.load(gzip.open(f, "rt"))["traceinspect"]["workload"]
        d = report(str(CPU_MEMORY / name))
        r = d["ranks"][0]
        walls = [x["wall_us"] for x in r["steps"] if not x["synthetic"]]
        step_s = sum(walls) / len(walls) / 1e6
        tokens = w["batch_size"] * w["seq_len"] * w["accum_steps"]
        assert row(dd, "throughput.tokens_per_step")[s] == tokens
        assert row(dd, "throughput.tokens_per_s")[s] == pytest.approx(tokens / step_s, rel=1e-9)
        assert row(dd, "throughput.samples_per_s")[s] == pytest.approx(
            w["batch_size"] * w["accum_steps"] / step_s, rel=1e-9)
        flops = r["throughput"]["model_flops_per_step"]
        assert flops > 0 and row(dd, "throughput.achieved_tflops")[s] == pytest.approx(flops / step_s / 1e12)
        peak = max(x["peak_allocated_bytes"] for x in r["memory"]["steps"])
        assert row(dd, "memory.peak_allocated_bytes")[s] == peak
        assert dd["gate"]["per_sample"]["us_per_sample"][s] == pytest.approx(
            step_s * 1e6 / (w["batch_size"] * w["accum_steps"]), rel=1e-9)
    # twice the batch: twice the tokens and FLOPs per step, more peak memory
    assert row(dd, "throughput.tokens_per_step")["rel_change"] == pytest.approx(1.0)
    assert row(dd, "throughput.model_flops_per_step")["rel_change"] == pytest.approx(1.0, rel=1e-3)
    assert row(dd, "memory.peak_allocated_bytes")["assessment"] == "worse"
    for key, why in (("throughput.mfu", "no GPU device"), ("memory.capacity_bytes", "CPU-only run"),
                     ("memory.peak_reserved_bytes", "no reserved bytes")):
        r = row(dd, key)
        assert r["base"] is None and r["new"] is None and why in r["reason"]["base"], (key, r["reason"])
    ps = dd["gate"]["per_sample"]
    assert ps["changed"] and ps["samples_per_step"] == {"base": 32, "new": 64}
    assert dd["gate"]["tripped"] is (ps["rel_change"] > 0.05 and bool(ps["significant"]))
    jsonschema.validate(dd, diff_json_schema())
    assert "| tokens/s |" in render_diff_markdown(dd)
