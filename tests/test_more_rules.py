"""The precision / launch / optimizer rules on REAL traces: each fires on a real positive and stays quiet on a real
negative, with its evidence checked against the raw JSON.

Where the traces come from:
- public traces in ../shared (skipped when absent): H100 bf16 inference (launch-bound, tensor-core-alignment
  positives), A100 TF32 training, A100 DDP, V100 fp32 (compute capability 7.0: no-mixed-precision must not fire);
- CPU gloo DDP captures of traceinspect.capture.workload made in this test session (conftest): ``baseline`` runs the
  per-parameter AdamW with ``zero_grad(set_to_none=False)``, ``optimized`` runs foreach AdamW with
  ``set_to_none=True``: the optimizer-not-fused pair;
- H200 fixtures (fixtures/, picked by the capture metadata in each trace), skipped until they are captured: the
  positives of no-mixed-precision (fp32, no TF32), gradscaler-with-bf16 (bf16 + GradScaler) and the GPU positive
  of optimizer-not-fused.
Tests marked CONSTRUCTED edit one field of a real analysis to pin a gate.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from pathlib import Path

import pytest

from traceinspect.diagnose.engine import finish
from traceinspect.config import Config
from traceinspect.diagnose import RULE_MODULES, doc_of, get_rule

from public_traces import BERT, DDP_2RANK, DIFF_CONTROL, DIFF_TEST, need, only_file, raw_events
from test_precision import gpu_fixture, raw_json, report

NOCACHE = Config(use_cache=False, workers=1)
MINE = {
    "no_mixed_precision": "no-mixed-precision",
    "gradscaler_with_bf16": "gradscaler-with-bf16",
    "launch_bound": "launch-bound",
    "optimizer_not_fused": "optimizer-not-fused",
    "tensor_core_alignment": "tensor-core-alignment",
}


def finding(rep, rule_id):
    found = [f for f in rep.findings if f.id == rule_id]
    assert len(found) <= 1
    return found[0] if found else None


def rerun(rep, edit):
    """CONSTRUCTED: the rules again, over a copy of the real per-rank analyses after ``edit(ra)`` (which edits a
    table in place or returns the changed record)."""
    ranks = [edit(ra) or ra for ra in copy.deepcopy(rep.ranks)]
    return finish(rep.source, ranks, rep.skipped, rep.world_size, NOCACHE)


@pytest.mark.parametrize("module,rule_id", sorted(MINE.items()))
def test_rules_are_registered_and_documented(module, rule_id):
    assert module in RULE_MODULES
    mod = get_rule(rule_id)
    assert mod is not None and mod.ID == rule_id and mod.TITLE
    doc = doc_of(mod)
    assert doc.startswith(rule_id + ":")
    for part in ("**Condition**", "**Fix**", "::"):
        assert part in doc


# --------------------------------------------------------------------------------------------------------------
# no-mixed-precision


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


# --------------------------------------------------------------------------------------------------------------
# gradscaler-with-bf16


@pytest.mark.parametrize("folder", [DIFF_CONTROL, BERT], ids=lambda p: p.name)
def test_gradscaler_quiet_without_scaler(folder):
    need(folder)
    assert len(report(folder).ranks[0].tables["amp_ops"]) == 0
    assert finding(report(folder), "gradscaler-with-bf16") is None


def test_gradscaler_fires_on_bf16_fixture():
    folder = gpu_fixture(amp="bf16", grad_scaler="on")
    rep = report(folder)
    f = finding(rep, "gradscaler-with-bf16")
    assert f is not None
    for r, ra in zip(f.evidence["per_rank"], rep.ranks):
        raw = [e for p in ra.files for e in raw_events(Path(p))["traceEvents"]]
        n_steps = sum(1 for e in raw if e.get("cat") == "user_annotation" and re.fullmatch(r"ProfilerStep#\d+", e["name"]))
        n_unscale = sum(1 for e in raw if e.get("cat") == "cpu_op"
                        and e["name"] == "aten::_amp_foreach_non_finite_check_and_unscale_")
        ops = r["scaler_ops_per_step"]
        assert ops["aten::_amp_foreach_non_finite_check_and_unscale_"]["count"] == pytest.approx(n_unscale / n_steps)
        assert r["fp16_matmul_us_per_step"] == 0 and r["bf16_matmul_us_per_step"] > 0


@pytest.mark.parametrize("knobs", [{"amp": "fp16"}, {"amp": "bf16", "grad_scaler": "auto"}], ids=["fp16", "bf16-no-scaler"])
def test_gradscaler_quiet_on_fixture(knobs):
    assert finding(report(gpu_fixture(**knobs)), "gradscaler-with-bf16") is None


# --------------------------------------------------------------------------------------------------------------
# launch-bound


def raw_step_counts(folder):
    """Per ProfilerStep: kernels launched inside it and the kernel-launch calls made inside it."""
    ev = raw_json(only_file(folder))["traceEvents"]
    steps = sorted((e for e in ev if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")),
                   key=lambda e: e["ts"])
    rt = [e for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})]
    kcorr = {e["args"]["correlation"] for e in ev if e.get("cat") == "kernel"}
    out = []
    for s in steps:
        inside = [e for e in rt if s["ts"] <= e["ts"] < s["ts"] + s["dur"]]
        launches = [e for e in inside if e["args"]["correlation"] in kcorr]
        out.append(len(launches))
    return out


@pytest.mark.parametrize("folder", [BERT, DDP_2RANK], ids=lambda p: p.name)
def test_launch_bound_fires_on_cpu_bound_gpu_traces(folder):
    """H100 inference of a small BERT (60 kernels of ~5 us in a 4.4 ms step) and the A100 DDP rank (GPU idle
    three quarters of the step while the CPU issues 900 kernels)."""
    need(folder)
    f = finding(report(folder), "launch-bound")
    assert f is not None
    r = f.evidence["per_rank"][0]
    counts = raw_step_counts(folder)
    assert r["kernels_per_step"] == pytest.approx(sum(counts) / len(counts))
    assert r["launch_calls_per_step"] == pytest.approx(sum(counts) / len(counts))
    assert r["median_kernel_us"] < r["cpu_us_per_kernel"]
    assert r["idle_other_share"] >= 0.2
    # The claim: the launch wait while the CPU ran what a CUDA graph of the model removes (less what a finding
    # claiming before it from the same idle took: the per-parameter optimizer), never all of the idle.
    before = sum(g.time_at_stake_us or 0.0 for g in report(folder).findings if g.id == "optimizer-not-fused")
    cap = r["idle_launch_capturable_us_per_step"]
    assert cap - before - 1.0 <= f.time_at_stake_us <= cap + 1e-6
    assert cap < r["idle_launch_us_per_step"] <= r["idle_other_us_per_step"] + 1e-6


def test_launch_bound_fires_on_deep_gpu_fixture():
    """H200, 48 Linear(64, 64) layers: thousands of ~1 us kernels per step."""
    folder = gpu_fixture(model="deep", optimizer_impl="fused")
    f = finding(report(folder), "launch-bound")
    assert f is not None
    r = f.evidence["per_rank"][0]
    assert r["kernels_per_step"] > 1000 and r["median_kernel_us"] < 5


@pytest.mark.parametrize("folder", [DIFF_TEST, DIFF_CONTROL], ids=lambda p: p.name)
def test_launch_bound_quiet_on_busy_gpus(folder):
    """V100 / A100 recommendation-model training: the GPU is busy 80 % of the step or more in most steps."""
    need(folder)
    assert finding(report(folder), "launch-bound") is None
    s = report(folder).ranks[0].steps
    assert ((s["idle_other_us"] / s["wall_us"]) < 0.2).sum() * 2 > len(s)


# --------------------------------------------------------------------------------------------------------------
# optimizer-not-fused


def raw_inside(folder: Path, prefix: str) -> list[list[str]]:
    """Names of the cpu_ops that start inside each record named ``prefix...``, on its thread (all rank files)."""
    out = []
    for f in sorted(Path(folder).glob("rank*.pt.trace.json*")):
        ev = [e for e in raw_events(f)["traceEvents"] if e.get("ph") == "X"]
        # The CPU record only: on GPU runs torch writes a gpu_user_annotation copy on the GPU timeline too.
        for w in (e for e in ev if e["name"].startswith(prefix) and e.get("cat") in ("user_annotation", "cpu_op")):
            out.append([e["name"] for e in ev if e.get("cat") == "cpu_op" and e["tid"] == w["tid"]
                        and w["ts"] <= e["ts"] <= w["ts"] + w["dur"] and e is not w])
    return out


def test_optimizer_not_fused_fires_on_cpu_baseline(cpu_baseline_run):
    """Baseline = AdamW(foreach=False) + zero_grad(set_to_none=False): both patterns, as the raw JSON shows."""
    steps = raw_inside(cpu_baseline_run, "Optimizer.step#")
    zeros = raw_inside(cpu_baseline_run, "Optimizer.zero_grad#")
    assert steps and all(not any(n.startswith(("aten::_foreach_", "aten::_fused_")) for n in s) for s in steps)
    assert all("aten::addcdiv_" in s for s in steps)  # AdamW's update, one call per parameter
    assert zeros and all("aten::zero_" in z for z in zeros)
    rep = report(cpu_baseline_run)
    f = finding(rep, "optimizer-not-fused")
    assert f is not None and set(f.evidence["patterns"]) == {"per-parameter", "zero-fill"}
    for r, ra in zip(f.evidence["per_rank"], rep.ranks):
        opt = ra.tables["optimizer"]
        st = opt[opt["kind"] == "step"]
        assert r["per_parameter_step"]["AdamW"]["ops"] == pytest.approx(st["ops"].sum() / len(ra.steps))
        assert r["basis"] == "cpu"
    # Per step and rank, the ops counted inside Optimizer.step equal the raw JSON's (every step was recorded).
    table_ops = sorted(int(x) for ra in rep.ranks for x in ra.tables["optimizer"].query("kind == 'step'")["ops"])
    assert table_ops == sorted(len(s) for s in steps)


def test_optimizer_not_fused_quiet_on_cpu_optimized(cpu_clean_run):
    """Optimized on CPU = AdamW(foreach=True) + zero_grad(set_to_none=True)."""
    steps = raw_inside(cpu_clean_run, "Optimizer.step#")
    zeros = raw_inside(cpu_clean_run, "Optimizer.zero_grad#")
    assert steps and all(any(n.startswith("aten::_foreach_") for n in s) for s in steps)
    assert all(not any(n in ("aten::zero_", "aten::_foreach_zero_") for n in z) for z in zeros)
    assert finding(report(cpu_clean_run), "optimizer-not-fused") is None


@pytest.mark.parametrize("folder", [DDP_2RANK, DIFF_CONTROL, DIFF_TEST], ids=lambda p: p.name)
def test_optimizer_not_fused_quiet_on_public_traces(folder):
    """A100 DDP: SGD with foreach ops; A100/V100 training: a FusedAdam that launches multi_tensor_apply kernels."""
    need(folder)
    assert finding(report(folder), "optimizer-not-fused") is None
    opt = report(folder).ranks[0].tables["optimizer"]
    st = opt[opt["kind"] == "step"]
    assert ((st["foreach_ops"] > 0) | (st["multi_tensor_kernels"] > 0)).all()


def test_optimizer_not_fused_fires_on_gpu_fixture():
    folder = gpu_fixture(optimizer_impl="single", zero_grad_set_to_none=False)
    f = finding(report(folder), "optimizer-not-fused")
    assert f is not None and set(f.evidence["patterns"]) == {"per-parameter", "zero-fill"}
    step = next(iter(f.evidence["per_rank"][0]["per_parameter_step"].values()))
    assert step["kernel_count"] > 0 and step["multi_tensor_kernels"] == 0
    # Each parameter gets its own kernels: far more launches in the step than a fused step's one or two.
    steps = raw_inside(folder, "Optimizer.step#")
    assert all(s.count("aten::addcdiv_") >= 2 and not any(n.startswith("aten::_fused_") for n in s) for s in steps)


def test_optimizer_not_fused_quiet_on_fused_gpu_fixture():
    folder = gpu_fixture(optimizer_impl="fused", zero_grad_set_to_none=True, amp="bf16", grad_scaler="auto")
    assert all(any(n.startswith("aten::_fused_adamw") for n in s) for s in raw_inside(folder, "Optimizer.step#"))
    assert finding(report(folder), "optimizer-not-fused") is None


# --------------------------------------------------------------------------------------------------------------
# tensor-core-alignment


def test_alignment_fires_on_bert():
    """H100 bf16 BERT: sequence length 141 in every GEMM, vocabulary 30522 in the output projection, whose
    kernel is an ``align2`` one (the rest found ``align8`` kernels)."""
    need(BERT)
    f = finding(report(BERT), "tensor-core-alignment")
    # The rule fires; its claim (tens of us on a 4.4 ms step) is below the warning line (docs/findings.md).
    assert f is not None and f.severity == "info" and f.time_at_stake_us <= f.extra["estimate_us"]
    assert "below the warning line" in f.extra["severity_reason"]
    r = f.evidence["per_rank"][0]
    assert r["misaligned_share"] == pytest.approx(1.0)
    shapes = {(s["m"], s["n"], s["k"]): s for s in r["shapes"]}
    vocab = shapes[(141, 30522, 512)]
    assert "align2" in vocab["kernel"]
    raw = raw_json(only_file(BERT))["traceEvents"]
    align2 = sum(e["dur"] for e in raw if e.get("cat") == "kernel" and "gemm" in e["name"] and "_align2" in e["name"])
    assert r["narrow_kernel_us_per_step"] == pytest.approx(align2)
    assert f.extra["estimate_us"] == pytest.approx(0.5 * align2)


def test_alignment_fires_on_transformer_fixture():
    """H200 bf16 transformer captured with record_shapes and widths not multiple of 8: the shapes in the
    evidence are the ones the ops recorded (``Input Dims`` of the addmm / mm ops, read here from the raw JSON)."""
    folder = gpu_fixture(model="transformer", amp="bf16", record_shapes=True)
    rep = report(folder)
    f = finding(rep, "tensor-core-alignment")
    assert f is not None
    recorded = set()
    for p in rep.ranks[0].files:
        for e in raw_events(Path(p))["traceEvents"]:
            if e.get("cat") == "cpu_op" and e["name"] in ("aten::addmm", "aten::mm") \
                    and "c10::BFloat16" in (e["args"].get("Input type") or []):
                d = [x for x in e["args"]["Input Dims"] if len(x) == 2]
                a, b = d[-2], d[-1]
                recorded.add((a[0], b[1], a[1]))
    for r in f.evidence["per_rank"]:
        for sh in r["shapes"]:
            assert (sh["m"], sh["n"], sh["k"]) in recorded
            assert sh["m"] % 8 or sh["n"] % 8 or sh["k"] % 8


def test_alignment_quiet_when_shapes_are_multiples_of_8():
    """CONSTRUCTED: the same BERT analysis with its GEMM table's M padded to 144: nothing left to flag."""
    need(BERT)

    def pad(ra):
        g = ra.tables["gemm_shapes"]
        g["m"] = 144
        g["n"] = (g["n"] + 7) // 8 * 8
        g["aligned8"] = True

    assert finding(rerun(report(BERT), pad), "tensor-core-alignment") is None


@pytest.mark.parametrize("folder", [DIFF_CONTROL, DDP_2RANK], ids=lambda p: p.name)
def test_alignment_quiet_without_16bit_gemms(folder):
    """A100 TF32 GEMMs with shapes (not 16-bit), and a trace without record_shapes."""
    need(folder)
    assert finding(report(folder), "tensor-core-alignment") is None


# --------------------------------------------------------------------------------------------------------------
# CPU traces: no crash, the GPU rules say nothing


@pytest.mark.parametrize("run", ["cpu_baseline_run", "cpu_clean_run"])
def test_gpu_rules_quiet_on_cpu_traces(run, request):
    rep = report(request.getfixturevalue(run))
    assert not rep.errors
    ids = {f.id for f in rep.findings}
    assert not ids & {"no-mixed-precision", "gradscaler-with-bf16", "launch-bound", "tensor-core-alignment"}
