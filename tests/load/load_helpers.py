"""Helpers for the load tests: copying real captures into temporary folders, a plain-torch capture."""

from __future__ import annotations

import gzip
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GPU = ROOT / "fixtures" / "gpu"
PAIRS = ROOT / "fixtures" / "gpu_pairs"

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


def copy_run(src: Path, dst: Path, prefix: str = "") -> list[Path]:
    """Copy a capture's trace files into ``dst`` (optionally renamed with a prefix); returns the copies."""
    dst.mkdir(parents=True, exist_ok=True)
    out = []
    for f in sorted(src.glob("*.json*")):
        t = dst / (prefix + f.name)
        shutil.copy(f, t)
        out.append(t)
    return out


def capture_no_ddp(out: Path) -> Path:
    import pytest

    pytest.importorskip("torch")
    subprocess.run([sys.executable, "-c", NO_DDP_LOOP, str(out)], check=True, capture_output=True, timeout=240)
    return out


def names(paths) -> list[str]:
    return sorted(Path(p).name for p in paths)


def plain_control(tmp_path: Path, monkeypatch) -> Path:
    """The public A100 trace uncompressed (only plain files are read by byte range), cut into 1 MB pieces."""
    from public_traces import DIFF_CONTROL, need, only_file

    folder = tmp_path / "run"
    folder.mkdir()
    f = folder / "rank3.pt.trace.json"
    f.write_bytes(gzip.decompress(only_file(need(DIFF_CONTROL)).read_bytes()))
    monkeypatch.setattr("traceinspect.load.decode.PIECE_BYTES", 1 << 20)
    monkeypatch.setattr("traceinspect.load.decode.plan_ranges.__defaults__", (1 << 20,))
    return f
