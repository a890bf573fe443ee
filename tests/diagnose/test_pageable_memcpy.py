"""pageable-memcpy on real H200 fixtures: it fires with the exact bytes and bandwidth of the pageable copies read
from the raw JSON, and stays quiet once the copies are pinned."""

from __future__ import annotations

import pytest

from _real import GPU, findings, launched_in, raw_one, steps_of


@pytest.mark.parametrize("name", ["baseline", "big_baseline"])
def test_pageable_memcpy_fires_with_exact_bytes(name):
    folder = GPU / name
    ev = raw_one(folder)["traceEvents"]
    f = findings(folder)["pageable-memcpy"]
    per = f["evidence"]["per_rank"][0]
    steps = steps_of(ev)
    per_step = []
    for s in steps:
        corr = launched_in(ev, s)
        per_step.append(sum(e["args"]["bytes"] for e in ev if e.get("cat") == "gpu_memcpy"
                            and e["name"] == "Memcpy HtoD (Pageable -> Device)" and e["args"]["correlation"] in corr))
    assert per_step and all(b > 0 for b in per_step)
    assert per["pageable_h2d_bytes_per_step"] == pytest.approx(sum(per_step) / len(per_step))
    copies = [e for e in ev if e.get("cat") == "gpu_memcpy" and "Pageable" in e["name"]]
    gbps = sum(e["args"]["bytes"] for e in copies) / sum(e["dur"] for e in copies) / 1e3
    assert per["pageable_h2d_gbps"] == pytest.approx(gbps, rel=1e-6)
    assert f["steps"] == [int(s["name"].split("#")[1]) for s in steps]
    assert "pin_memory=True" in f["fix"] and "non_blocking=True" in f["fix"]
    assert per["dataloader_pin_memory"] is False  # the capture's metadata, quoted as evidence


@pytest.mark.parametrize("name", ["pinned", "optimized", "big_optimized"])
def test_pageable_memcpy_quiet_once_pinned(name):
    ev = raw_one(GPU / name)["traceEvents"]
    assert not any(e.get("cat") == "gpu_memcpy" and "Pageable" in e["name"] for e in ev)
    assert any(e.get("name") == "Memcpy HtoD (Pinned -> Device)" for e in ev)
    assert "pageable-memcpy" not in findings(GPU / name)
