"""Every setting ``explain RULE`` lists does something: set to an extreme, it changes that rule's finding on a real
trace (H200 fixtures, a public trace, a CPU capture made here). A setting that changes nothing is removed."""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import pytest

from traceinspect.config import Config
from traceinspect.diagnose import all_rules, thresholds_of
from traceinspect.diagnose.engine import finish
from traceinspect.run import report_folder

from _real import GPU, PAIRS
from public_traces import DIFF_CONTROL, PUBLIC, need

NOCACHE = Config(use_cache=False, workers=1)
STRATEGIES = Path(__file__).resolve().parents[2] / "fixtures" / "cpu_strategies"
# Where each rule fires (the first folder it fires on and a setting changes is enough); a name is a CPU capture
# made by the test (a fixture below); a (folder, settings) pair fires with those settings (a floor sized for a GPU
# lowered for a CPU capture, a share lowered for a public trace whose card is far from full).
WHERE = {
    "pageable-memcpy": [GPU / "big_baseline", PAIRS / "big_pageable"],
    "dataloader-stall": [GPU / "big_baseline"],
    "host-sync": [GPU / "big_baseline", PAIRS / "graph_replay"],
    "gpu-idle": [GPU / "big_baseline"],
    "small-buckets": [GPU / "deep_tiny"],
    "uncaptured-launches": [GPU / "deep_tiny"],
    "straggler": ["straggler_run"],
    "exposed-comm": [DIFF_CONTROL],
    "no-mixed-precision": [PAIRS / "s3_big_fp32_fed", PAIRS / "big_fp32"],
    "launch-bound": [GPU / "baseline"],
    "optimizer-not-fused": [GPU / "single_adamw"],
    "tensor-core-alignment": [GPU / "tf_shapes"],
    "gradscaler-with-bf16": [GPU / "bf16_scaler"],
    "sync-every-microstep": [GPU / "no_sync_off"],
    "fsdp-exposed-allgather": [PAIRS.parent / "cpu_strategies" / "fsdp2_2"],
    "pipeline-bubble": [STRATEGIES / "pp2_m8"],
    "tp-exposed-comm": [STRATEGIES / "tp2_replicate"],
    "allocator-slack": [PUBLIC / "hta_v100_memory"],
    "memory-near-full": [(PUBLIC / "hta_v100_memory", {"memory_near_full_share": 0.3})],
    "memory-headroom": [PUBLIC / "tracelens_mi300_memory"],
    "memory-growth": [("leak_run", {"memory_growth_min_bytes": 512 * 1024})],
    "ddp-gradient-copies": [("copies_run", {"ddp_gradient_copies_min_bytes": 1 << 20})],
}
CASES = [(r.id, n) for r in all_rules() for n in thresholds_of(r)]


@functools.lru_cache(maxsize=None)
def _analysis(folder: Path):
    return report_folder(folder, NOCACHE).analysis


def _extremes(name: str, default):
    """The two ends of a setting's range: 0 and 1 for a share, about 0 and a huge value otherwise."""
    if "share" in name:
        return [0.0, 1.0]
    return [0, 10**12] if isinstance(default, int) else [1e-6, 1e12]


def _finding(rep, rule_id: str, config: Config):
    out = finish(rep.source, list(rep.ranks), list(rep.skipped), rep.world_size, config)
    fs = [f for f in out.findings if f.id == rule_id]
    return [(f.severity, f.title, f.time_at_stake_us, f.fix, repr(f.evidence)) for f in fs]


@pytest.fixture(scope="module")
def straggler_run(cpu_capture_factory):
    """Rank 1's in-process loader sleeps 20 ms per sample (ten times the host noise of a busy machine)."""
    return cpu_capture_factory(preset="optimized", overrides={"num_workers": 0, "item_delay_ms": 20, "slow_rank": 1})


@pytest.fixture(scope="module")
def leak_run(cpu_capture_factory):
    """One CPU rank whose step keeps its output alive (the reference workload's planted leak, 1 MiB a step)."""
    return cpu_capture_factory(preset="optimized", nproc=1, profile_memory=True,
                               overrides={"num_workers": 0, "accum_steps": 1, "keep_outputs": True,
                                          "probe_loader": False, "batch_size": 64, "num_classes": 4096})


@pytest.fixture(scope="module")
def copies_run(cpu_capture_factory):
    """DDP on 2 CPU ranks without gradient bucket views, host memory recorded."""
    return cpu_capture_factory(preset="optimized", nproc=2, profile_memory=True,
                               overrides={"num_workers": 0, "accum_steps": 1, "probe_loader": False,
                                          "mlp_hidden": 1024, "gradient_as_bucket_view": False})


def test_every_rule_with_settings_has_a_fixture():
    assert {rid for rid, _ in CASES} <= set(WHERE)


@pytest.mark.slow  # every threshold of every rule, each on its own analysis
@pytest.mark.parametrize("rule_id, name", CASES, ids=[f"{r}:{n}" for r, n in CASES])
def test_every_listed_threshold_changes_its_rules_finding(rule_id, name, request):
    if DIFF_CONTROL in WHERE[rule_id]:
        need(DIFF_CONTROL)
    folders = []
    for where in WHERE[rule_id]:
        folder, settings = where if isinstance(where, tuple) else (where, {})
        if isinstance(folder, Path) and PUBLIC in folder.parents:
            need(folder)
        folder = request.getfixturevalue(folder) if isinstance(folder, str) else folder
        folders.append(folder)
        rep = _analysis(folder)
        config = NOCACHE.with_overrides(**settings) if settings else NOCACHE
        base = _finding(rep, rule_id, config)
        if not base:
            continue  # the rule does not fire here: the next folder
        for value in _extremes(name, getattr(NOCACHE, name)):
            if _finding(rep, rule_id, dataclasses.replace(config, **{name: value})) != base:
                return
    pytest.fail(f"{name} set to either extreme changes no {rule_id} finding on {[f.name for f in folders]}")
