"""Session fixtures: real CPU captures, made once per test session into temporary folders, and the test tiers.

Captures are lazy (a fixture runs only when a test asks for it) and cached for
the session, so the suite pays for each distinct capture once (a few seconds
each on 2 cores). Without torch, every test that needs a capture is skipped.

Fixtures:
  cpu_clean_run        optimized preset, 2 ranks, loader in-process (num_workers=0)
  cpu_baseline_run     baseline preset, 2 ranks, num_workers=0 (sync every micro-batch, tiny buckets, ...)
  cpu_slow_loader_run  optimized, num_workers=0, a sleep per sample: the loader dominates the step
  cpu_capture_factory  call it with capture_cpu's arguments (minus out_dir) for any other capture
  comm_capture         ``comm_capture(name)``: the communication captures of comm_captures.SPECS
  comm_report          ``comm_report(name)``: their analyses, made once
  no_ddp_run           a plain-torch loop without DDP, two windows (script_captures.NO_DDP_LOOP)
  closure_fused_run    a loop stepping inside ``optimizer.step(closure)``, fused AdamW (script_captures.CLOSURE_LOOP)
  closure_single_run   the same loop with a per-parameter AdamW
  allreduce_job_run    tests/allreduce_job.py under torchrun: all-reduces without DDP

Tiers (markers, pyproject.toml): a test that asks for any of these fixtures is marked ``capture`` here, so the
default run (``pytest -q``), which deselects ``capture``, ``slow`` and ``timing``, makes no capture at all.
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

from cpu_capture import SLOW_ITEM_DELAY_MS, capture_cpu  # noqa: E402  (tests/ is on sys.path under pytest)
from script_captures import capture_allreduce_job, capture_closure, capture_no_ddp  # noqa: E402

try:  # property tests check results, not how fast one example runs: a busy 2-core machine must not fail them
    from hypothesis import settings as _hypothesis_settings

    _hypothesis_settings.register_profile("traceinspect", deadline=None)
    _hypothesis_settings.load_profile("traceinspect")
except ImportError:  # the property tests skip without hypothesis
    pass


def _worker(config) -> bool:
    """This process is a pytest-xdist worker (the run's controller made the cache folder)."""
    return hasattr(config, "workerinput")


def pytest_configure(config) -> None:
    """Every cache the suite writes goes to a temporary folder: never ~/.cache, never fixtures/ or a trace folder.
    An environment variable, so subprocesses (the CLI tests) inherit it, and so do the xdist workers: they share
    the controller's folder (entries are written whole and renamed into place), so a folder one worker reported is
    a cache hit for the other."""
    import os
    import tempfile

    if not (_worker(config) and os.environ.get("TRACEINSPECT_CACHE_DIR")):
        os.environ["TRACEINSPECT_CACHE_DIR"] = tempfile.mkdtemp(prefix="traceinspect-test-cache-")


def pytest_unconfigure(config) -> None:
    import os
    import shutil

    if not _worker(config):  # the controller removes it, once every worker is done
        shutil.rmtree(os.environ.pop("TRACEINSPECT_CACHE_DIR", ""), ignore_errors=True)

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


@pytest.fixture(scope="session")
def comm_capture(cpu_capture_factory: Callable[..., Path]) -> Callable[[str], Path]:
    """``comm_capture(name) -> folder`` for the communication captures of tests/comm_captures.py (SPECS)."""
    from comm_captures import spec

    return lambda name: cpu_capture_factory(**spec(name))


@pytest.fixture(scope="session")
def comm_report(comm_capture: Callable[[str], Path]) -> Callable[[str], Any]:
    """``comm_report(name) -> analysis`` of a communication capture, analyzed once per session."""
    from traceinspect.config import Config
    from traceinspect.load.reader import load
    from traceinspect.run.stages import analyze

    nocache = Config(use_cache=False, workers=1)
    done: dict[str, Any] = {}

    def report(name: str) -> Any:
        if name not in done:
            folder = comm_capture(name)
            done[name] = analyze(load(folder, nocache), nocache)
        return done[name]

    return report


@pytest.fixture(scope="session")
def no_ddp_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A training loop without DDP, one process, profiled with a repeating schedule: two windows, the second ending
    in a stub of a step (script_captures.NO_DDP_LOOP)."""
    _need_torch()
    return capture_no_ddp(tmp_path_factory.mktemp("no_ddp") / "run")


@pytest.fixture(scope="session")
def closure_fused_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The training step in ``optimizer.step(closure)`` with a fused AdamW (script_captures.CLOSURE_LOOP)."""
    _need_torch()
    return capture_closure(tmp_path_factory.mktemp("closure_fused"), "fused")


@pytest.fixture(scope="session")
def closure_single_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same closure loop with a per-parameter AdamW (foreach=False)."""
    _need_torch()
    return capture_closure(tmp_path_factory.mktemp("closure_single"), "single")


@pytest.fixture(scope="session")
def allreduce_job_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/allreduce_job.py under torchrun (2 gloo ranks): all-reduces with torch.distributed, no DDP."""
    _need_torch()
    out = tmp_path_factory.mktemp("allreduce_job")
    p = capture_allreduce_job(out)
    assert p.returncode == 0, p.stderr[-2000:]
    return out


#: The fixtures that make a capture: a test that asks for one (directly, through another fixture, or by name as a
#: parameter it passes to ``request.getfixturevalue``) is in the ``capture`` tier.
CAPTURE_FIXTURES = frozenset({"cpu_capture_factory", "cpu_clean_run", "cpu_baseline_run", "cpu_slow_loader_run",
                              "comm_capture", "comm_report", "no_ddp_run", "closure_fused_run", "closure_single_run",
                              "allreduce_job_run"})


def pytest_collection_modifyitems(config, items) -> None:
    """Mark ``capture`` every test whose fixtures make a capture, so the tier follows the fixtures a test asks for.
    A helper that reaches a capture by a name the test does not pass (``analyzed_runs.real_cpu_run``) is marked by
    hand."""
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        named = {v for v in params.values() if isinstance(v, str)}
        if CAPTURE_FIXTURES & (set(getattr(item, "fixturenames", ())) | named):
            item.add_marker(pytest.mark.capture)
