"""The communication captures: the reference workload (traceinspect.capture.workload) on CPU with gloo, one process
per rank under torchrun, made once per test session through conftest's ``comm_capture`` fixture (identical requests
share one capture with every other user of ``cpu_capture_factory``).

Deep narrow model (48 x Linear(64, 64)): ~0.8 MB of fp32 gradients in many small parameters; 4 micro-batches per
optimizer step; shapes recorded so gloo's work carries its sizes; steps 1-2 recorded (after DDP's bucket rebuild in
step 0). Each takes ~10 s.
"""

from __future__ import annotations

import re
from pathlib import Path

from cpu_capture import STRAGGLER_ITEM_DELAY_MS
from public_traces import raw_events

BASE = {"num_workers": 0, "batch_size": 8, "accum_steps": 4}
SPECS = {
    # name: (ranks, knobs on top of BASE)
    # small-buckets fires; its twin default_sync differs only in bucket_cap_mb
    "tiny_buckets": (2, {"bucket_cap_mb": 0.05, "no_sync": False}),
    # sync-every-microstep fires; no slow rank (the straggler control)
    "default_sync": (2, {"bucket_cap_mb": 25.0, "no_sync": False}),
    # no_sync on all micro-batches but the last (the sync-every-microstep twin), rank 1's loader sleeps 12 ms
    # per sample (8 samples x 4 micro-batches: 384 ms per step), only on rank 1
    "slow_rank_2": (2, {"bucket_cap_mb": 25.0, "no_sync": True, "slow_rank": 1, "item_delay_ms": STRAGGLER_ITEM_DELAY_MS}),
    "slow_rank_4": (4, {"bucket_cap_mb": 25.0, "no_sync": True, "slow_rank": 2, "item_delay_ms": STRAGGLER_ITEM_DELAY_MS}),
}
INJECTED_DELAY_US = 8 * STRAGGLER_ITEM_DELAY_MS * 4 * 1000  # batch_size x item_delay_ms x accum_steps
GRAD_BYTES = (48 * (64 * 64 + 64) + 64 * 2 + 2) * 4  # the deep model's fp32 gradients, from its definition
MIB = 1024 * 1024


def spec(name: str) -> dict:
    """capture_cpu arguments of capture ``name``."""
    nproc, knobs = SPECS[name]
    return dict(preset="baseline", nproc=nproc, model="deep", overrides={**BASE, **knobs},
                wait=0, warmup=1, active=2, record_shapes=True)


def raw_of(folder: Path, rank: int) -> dict:
    """The raw JSON of rank ``rank``'s file in a capture folder (standard library)."""
    return raw_events(next(p for p in folder.iterdir() if p.name.startswith(f"rank{rank}.")))


def findings_of(rep, rule_id: str) -> list:
    """The findings of one rule in an analysis."""
    return [f for f in rep.findings if f.id == rule_id]


def x_events(raw: dict) -> list[dict]:
    """The complete ("X") events of a raw trace."""
    return [e for e in raw["traceEvents"] if e.get("ph") == "X"]


def profiler_steps(raw: dict) -> list[dict]:
    """The ``ProfilerStep#N`` annotations of a raw trace, in time order."""
    return sorted((e for e in x_events(raw) if e.get("cat") == "user_annotation"
                   and re.fullmatch(r"ProfilerStep#\d+", e["name"])), key=lambda e: e["ts"])
