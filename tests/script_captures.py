"""Captures of small plain-torch training loops, one process each (no torchrun): what conftest's session fixtures
``no_ddp_run``, ``closure_fused_run``, ``closure_single_run`` and ``allreduce_job_run`` run, once per test session."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# A training loop without DDP profiled with a repeating schedule (two windows) through tensorboard_trace_handler.
# Its DataLoader runs out right after prof.step() opens step 7, so the second window ends in a stub of step 7.
NO_DDP_LOOP = """
import sys, torch
from torch.profiler import profile, schedule, tensorboard_trace_handler, ProfilerActivity
from torch.utils.data import DataLoader, TensorDataset
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
opt = torch.optim.SGD(m.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(7 * 64, 256)), batch_size=64)
with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=2, repeat=2),
             on_trace_ready=tensorboard_trace_handler(sys.argv[1])) as p:
    for (x,) in loader:
        loss = m(x).sum(); opt.zero_grad(); loss.backward(); opt.step(); p.step()
"""

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


def capture_no_ddp(out: Path) -> Path:
    """NO_DDP_LOOP into ``out`` (two windows through tensorboard_trace_handler)."""
    subprocess.run([sys.executable, "-c", NO_DDP_LOOP, str(out)], check=True, capture_output=True, timeout=240)
    return out


def capture_closure(out: Path, impl: str) -> Path:
    """CLOSURE_LOOP into ``out``/rank0.pt.trace.json with a ``fused`` or a per-parameter (``single``) AdamW."""
    script = out.parent / f"closure_loop_{impl}.py"
    script.write_text(CLOSURE_LOOP)
    subprocess.run([sys.executable, str(script), str(out / "rank0.pt.trace.json"), impl], check=True, timeout=240,
                   capture_output=True)
    return out


def capture_allreduce_job(out: Path) -> subprocess.CompletedProcess:
    """tests/allreduce_job.py under torchrun, 2 gloo ranks, into ``out``; the completed process (check its code)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for _ in range(3):
        p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                            str(ROOT / "tests" / "allreduce_job.py"), str(out)], capture_output=True, text=True,
                           timeout=240, env=env)
        # About one run in eight, a rank aborts in gloo's teardown after its trace is written ("terminate called
        # without an active exception", torch 2.13 CPU): the job ran; run it again for a clean exit.
        if p.returncode == 0 or "terminate called without an active exception" not in p.stderr:
            return p
        for f in Path(out).glob("*.json*"):
            f.unlink()
    return p
