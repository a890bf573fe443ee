"""optimizer-not-fused: the fix keeps the optimizer class, and a fused update that runs after the last recorded
step's window (the profiler's step boundary inside ``optimizer.step(closure)``, as Lightning does) is not read as a
per-parameter optimizer."""

from __future__ import annotations

import subprocess
import sys

import pytest

from _real import findings, raw_files
from public_traces import PUBLIC, need

RESNET = PUBLIC / "kineto_pt18_resnet50"

# A real capture: the training step runs in the closure of optimizer.step, and the profiler's step boundary is
# at the end of the training step (inside the closure), so each fused update runs after its step's window.
CLOSURE_LOOP = r'''
import sys, torch
from torch.profiler import profile, schedule, ProfilerActivity
torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(8)])
kw = {"fused": True} if sys.argv[2] == "fused" else {"foreach": False}
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, **kw)
with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=3),
             on_trace_ready=lambda p: p.export_chrome_trace(sys.argv[1])) as prof:
    for i in range(6):
        x = torch.randn(32, 64)
        def closure():
            opt.zero_grad(set_to_none=True)
            loss = model(x).square().mean()
            loss.backward()
            prof.step()
            return loss
        opt.step(closure)
'''


def _capture(tmp_path_factory, impl: str):
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp(f"closure_{impl}")
    script = out.parent / f"closure_loop_{impl}.py"
    script.write_text(CLOSURE_LOOP)
    subprocess.run([sys.executable, str(script), str(out / "rank0.pt.trace.json"), impl], check=True, timeout=240,
                   capture_output=True)
    return out


@pytest.fixture(scope="module")
def closure_fused(tmp_path_factory):
    return _capture(tmp_path_factory, "fused")


@pytest.fixture(scope="module")
def closure_single(tmp_path_factory):
    return _capture(tmp_path_factory, "single")


def test_sgd_stays_sgd():
    need(RESNET)
    (d,) = raw_files(RESNET)
    names = {e["name"] for e in d["traceEvents"] if str(e.get("name", "")).startswith("Optimizer.step#")}
    assert names == {"Optimizer.step#SGD.step"}
    f = findings(RESNET)["optimizer-not-fused"]
    assert "torch.optim.SGD(" in f["fix"] and "AdamW" not in f["fix"]
    assert "set_to_none=True" in f["fix"]  # the zero-filling zero_grad was seen too


def test_fused_update_after_the_last_window_is_not_per_parameter(closure_fused):
    (d,) = raw_files(closure_fused)
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
    assert "optimizer-not-fused" not in findings(closure_fused)


def test_same_loop_with_a_per_parameter_optimizer_still_fires(closure_single):
    f = findings(closure_single)["optimizer-not-fused"]
    assert "torch.optim.AdamW(" in f["fix"] and "foreach=True" in f["fix"]
    assert "set_to_none" not in f["fix"]  # zero_grad(set_to_none=True) was used: no zero-fill advice
