"""Capture real CPU (gloo) DDP traces for tests: the same torchrun path as ``traceinspect capture``.

Tests import it as ``from cpu_capture import capture_cpu`` (pytest puts tests/ on
sys.path). Sizes default to what keeps a 2-rank capture to a few seconds on a
2-core machine; any knob can be overridden.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any, Mapping

#: Knob values every test capture starts from: small batches, no loader worker processes.
CPU_SMALL: dict[str, Any] = {"batch_size": 8, "num_workers": 0}

#: Sample delay for the slow-loader capture: 32 samples per step x 15 ms ~ 480 ms of loading per step, against
#: ~20-60 ms of compute for the small mlp of conftest.py's ``cpu_slow_loader_run`` (several times that on 2 cores shared with other work: the loading
#: must still dominate there).
SLOW_ITEM_DELAY_MS = 15.0
#: Sample delay on the slow rank of the straggler captures (8 samples x 4 micro-batches: 384 ms per step), an order
#: of magnitude above the lateness a busy 2-core host gives a rank at random (tens of ms).
STRAGGLER_ITEM_DELAY_MS = 12.0
#: Sample delay of the loader-worker captures (8 samples a batch: 80 ms a batch per worker), well above what a busy
#: host adds to a batch.
WORKER_ITEM_DELAY_MS = 10.0

#: Seconds after which a capture is stopped (a hung gloo rendezvous must not hang the suite).
CAPTURE_TIMEOUT_S = 240


def capture_cpu(out_dir: str | Path, preset: str = "optimized", nproc: int = 2, model: str = "mlp",
                overrides: Mapping[str, Any] | None = None, wait: int = 1, warmup: int = 1,
                active: int = 3, repeat: int = 1, steps: int = 0, **capture_kwargs: Any) -> Path:
    """Run the workload under torchrun into ``out_dir`` (replacing traces there) and return the folder.

    ``overrides`` are workload knobs applied over :data:`CPU_SMALL`;
    ``capture_kwargs`` go to :func:`traceinspect.cli.capture.run_capture`
    (``record_shapes=True``, ``gzip=False``, ...). torchrun ``--standalone``
    picks a free port for every capture, so captures may run side by side.
    """
    from traceinspect.cli.capture import run_capture

    knobs = {**CPU_SMALL, **dict(overrides or {})}
    out = Path(out_dir)
    run_capture(out, preset=preset, nproc=nproc, overrides=knobs, model=model, steps=steps, wait=wait,
                warmup=warmup, active=active, repeat=repeat, overwrite=True,
                timeout=capture_kwargs.pop("timeout", CAPTURE_TIMEOUT_S), **capture_kwargs)
    return out


def load_trace(path: str | Path) -> dict[str, Any]:
    """Parse one Chrome trace file (.json or .json.gz) with the standard library."""
    path = Path(path)
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as fh:
        return json.load(fh)


def trace_files(folder: str | Path) -> list[Path]:
    """The ``rank*.pt.trace.json[.gz]`` files of a capture folder, sorted by name."""
    return sorted(Path(folder).glob("rank*.pt.trace.json*"))
