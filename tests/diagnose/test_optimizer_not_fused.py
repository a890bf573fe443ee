"""optimizer-not-fused on real traces: the CPU baseline capture (per-parameter AdamW, zero-filling zero_grad) fires
with the ops counted in the raw JSON, the optimized one is quiet, as are the public runs' foreach and fused
optimizers; the H200 per-parameter fixture fires and its fused twin is quiet. The fix keeps the optimizer class, and
a fused update that runs after the last recorded step's window (the profiler's step boundary inside
``optimizer.step(closure)``, as Lightning does) is not read as a per-parameter optimizer."""

from __future__ import annotations

from pathlib import Path

import pytest

from _real import finding, findings, raw_files
from gpu_fixtures import gpu_fixture, report
from public_traces import DDP_2RANK, DIFF_CONTROL, DIFF_TEST, PUBLIC, need, raw_events

RESNET = PUBLIC / "kineto_pt18_resnet50"

def test_sgd_stays_sgd():
    need(RESNET)
    (d,) = raw_files(RESNET)
    names = {e["name"] for e in d["traceEvents"] if str(e.get("name", "")).startswith("Optimizer.step#")}
    assert names == {"Optimizer.step#SGD.step"}
    f = findings(RESNET)["optimizer-not-fused"]
    assert "torch.optim.SGD(" in f["fix"] and "AdamW" not in f["fix"]
    assert "set_to_none=True" in f["fix"]  # the zero-filling zero_grad was seen too


def test_fused_update_after_the_last_window_is_not_per_parameter(closure_fused_run):
    (d,) = raw_files(closure_fused_run)
    ev = [e for e in d["traceEvents"] if e.get("ph") == "X"]
    steps = sorted((e for e in ev if e["name"].startswith("ProfilerStep#")), key=lambda e: e["ts"])
    last_end = steps[-1]["ts"] + steps[-1]["dur"]
    spans = [e for e in ev if e["name"] == "Optimizer.step#AdamW.step"]
    fused = [e for e in ev if e["name"] == "aten::_fused_adamw_"]
    # the shape of the problem, read independently: the last step's optimizer call outlives the recording and
    # holds no fused op; the fused ops of the other steps run in the next step's window
    cut = [s for s in spans if s["ts"] + s["dur"] > last_end]
    assert cut and not [f for f in fused if cut[0]["ts"] <= f["ts"] <= cut[0]["ts"] + cut[0]["dur"]]
    assert fused
    assert "optimizer-not-fused" not in findings(closure_fused_run)


def test_same_loop_with_a_per_parameter_optimizer_still_fires(closure_single_run):
    f = findings(closure_single_run)["optimizer-not-fused"]
    assert "torch.optim.AdamW(" in f["fix"] and "foreach=True" in f["fix"]
    assert "set_to_none" not in f["fix"]  # zero_grad(set_to_none=True) was used: no zero-fill advice


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
