"""Helpers for the load tests: copying real captures into temporary folders, comparing two reports of the same
events."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GPU = ROOT / "fixtures" / "gpu"
PAIRS = ROOT / "fixtures" / "gpu_pairs"

def copy_run(src: Path, dst: Path, prefix: str = "") -> list[Path]:
    """Copy a capture's trace files into ``dst`` (optionally renamed with a prefix); returns the copies."""
    dst.mkdir(parents=True, exist_ok=True)
    out = []
    for f in sorted(src.glob("*.json*")):
        t = dst / (prefix + f.name)
        shutil.copy(f, t)
        out.append(t)
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


def comparable(d: dict) -> dict:
    """The report minus what names the file (paths) and where it came from."""
    d = json.loads(json.dumps(d))
    d.pop("source")
    d.pop("runs")
    for r in d["ranks"]:
        r.pop("files")
    return d


def assert_same(got, want, path: str = "report") -> None:
    """Equal reports: the same fields and values, floats equal up to rounding (1e-9 relative)."""
    if isinstance(want, float) and isinstance(got, (int, float)):
        assert got == pytest.approx(want, rel=1e-9, abs=1e-9), path
    elif isinstance(want, dict):
        assert isinstance(got, dict) and set(got) == set(want), path
        for k in want:
            assert_same(got[k], want[k], f"{path}.{k}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), path
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, f"{path}[{i}]")
    else:
        assert got == want, path
