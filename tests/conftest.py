"""Session fixtures: real CPU DDP captures, made once per test session into temporary folders.

Captures are lazy (a fixture runs only when a test asks for it) and cached for
the session, so the suite pays for each distinct capture once (a few seconds
each on 2 cores). Without torch, every test that needs a capture is skipped.

Fixtures:
  cpu_clean_run        optimized preset, 2 ranks, loader in-process (num_workers=0)
  cpu_baseline_run     baseline preset, 2 ranks, num_workers=0 (sync every micro-batch, tiny buckets, ...)
  cpu_slow_loader_run  optimized, num_workers=0, a sleep per sample: the loader dominates the step
  cpu_capture_factory  call it with capture_cpu's arguments (minus out_dir) for any other capture
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any, Callable

import pytest

ROOT = Path(__file__).resolve().parent.parent
if importlib.util.find_spec("traceinspect") is None:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, str(ROOT))

from cpu_capture import capture_cpu  # noqa: E402  (tests/ is on sys.path under pytest)

try:  # property tests check results, not how fast one example runs: a busy 2-core machine must not fail them
    from hypothesis import settings as _hypothesis_settings

    _hypothesis_settings.register_profile("traceinspect", deadline=None)
    _hypothesis_settings.load_profile("traceinspect")
except ImportError:  # the property tests skip without hypothesis
    pass


def pytest_configure(config) -> None:
    """Every cache the suite writes goes to a temporary folder: never ~/.cache, never fixtures/ or a trace folder.
    An environment variable, so subprocesses (the CLI tests) inherit it."""
    import os
    import tempfile

    os.environ["TRACEINSPECT_CACHE_DIR"] = tempfile.mkdtemp(prefix="traceinspect-test-cache-")


def pytest_unconfigure(config) -> None:
    import os
    import shutil

    shutil.rmtree(os.environ.pop("TRACEINSPECT_CACHE_DIR", ""), ignore_errors=True)

#: Sample delay for the slow-loader capture: 32 samples per step x 15 ms ~ 480 ms of loading per step, against
#: ~20-60 ms of compute for the small mlp below (several times that on 2 cores shared with other work: the loading
#: must still dominate there).
SLOW_ITEM_DELAY_MS = 15.0
#: Sample delay on the slow rank of the straggler captures (8 samples x 4 micro-batches: 384 ms per step), an order
#: of magnitude above the lateness a busy 2-core host gives a rank at random (tens of ms).
STRAGGLER_ITEM_DELAY_MS = 12.0
#: Sample delay of the loader-worker captures (8 samples a batch: 80 ms a batch per worker), well above what a busy
#: host adds to a batch.
WORKER_ITEM_DELAY_MS = 10.0


def _need_torch() -> None:
    pytest.importorskip("torch", reason="torch is needed to capture traces: pip install 'traceinspect[capture]'")


@pytest.fixture(scope="session")
def cpu_capture_factory(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """``make(preset=..., overrides={...}, ...) -> folder``; identical requests share one capture."""
    cache: dict[str, Path] = {}

    def make(**kwargs: Any) -> Path:
        _need_torch()
        key = json.dumps(kwargs, sort_keys=True, default=str)
        if key not in cache:
            name = f"cpu_{kwargs.get('preset', 'optimized')}_"
            cache[key] = capture_cpu(tmp_path_factory.mktemp(name), **kwargs)
        return cache[key]

    return make


@pytest.fixture(scope="session")
def cpu_clean_run(cpu_capture_factory: Callable[..., Path]) -> Path:
    """Optimized preset, 2 CPU ranks, wait=1 warmup=1 active=3: one window (steps 2-4) per rank."""
    return cpu_capture_factory(preset="optimized", overrides={"num_workers": 0})


@pytest.fixture(scope="session")
def cpu_baseline_run(cpu_capture_factory: Callable[..., Path]) -> Path:
    """Baseline preset (all-reduce on every micro-batch, 1 MB buckets, fp32, per-param AdamW), 2 ranks."""
    return cpu_capture_factory(preset="baseline", overrides={"num_workers": 0})


@pytest.fixture(scope="session")
def cpu_slow_loader_run(cpu_capture_factory: Callable[..., Path]) -> Path:
    """Optimized preset whose in-process loader sleeps per sample: most of each step waits for data."""
    return cpu_capture_factory(preset="optimized",
                               overrides={"num_workers": 0, "item_delay_ms": SLOW_ITEM_DELAY_MS,
                                          "mlp_hidden": 1024})
