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


# The pinning pairs whose loader does not pin (fixtures/gpu_setup, fixtures/gpu_repeats_h100: the same small step
# with pin_memory=False and non_blocking=False against both on): the loop waits for its batches there, and pinning
# takes that wait away with the copies' cost.
UNPINNED_PAIRS = [("gpu_setup/small_pageable", "gpu_setup/small_pinned", "setup_small"),
                  ("gpu_repeats_h100/w8_pageable_a", "gpu_repeats_h100/w8_pinned_a", "setup_small")]


@pytest.mark.parametrize("problem, twin, family", UNPINNED_PAIRS)
def test_the_loader_wait_the_fix_may_take_is_named_not_claimed(problem, twin, family):
    """The claim stays the copies' own; the finding names the loop's wait for batches from a loader that does not
    pin, which is the DataLoader's claim. Together the two claims hold against what pinning measurably saved."""
    import pairs
    from test_pairs import report

    d, t = report(problem), report(twin)
    f = next(x for x in d["findings"] if x["id"] == "pageable-memcpy")
    wait = f["evidence"]["per_rank"][0]["unpinned_loader_wait_us_per_step"]
    stall = next(x for x in d["findings"] if x["id"] == "dataloader-stall")
    # the same wait, over this finding's steps (the DataLoader's finding averages over its own)
    assert wait == pytest.approx(stall["evidence"]["per_rank"][0]["dataloader_us_per_step"], rel=0.15)
    assert "dataloader-stall" in f["evidence"]["claim_note"] and f"{wait / 1000:.2f} ms" in f["evidence"]["claim_note"]
    m = pairs.measured(problem, twin, family)
    both = f["time_at_stake_us"] + stall["time_at_stake_us"]
    assert abs(both - m["saving_us"]) <= m["tolerance_us"], (both, m)
    assert f["time_at_stake_us"] < m["saving_us"] - m["noise_us"] / 2  # the copies alone explain little of it
    assert "dataloader-stall" not in {x["id"] for x in t["findings"] if x["severity"] != "info"}


def test_no_loader_note_where_the_loader_pins():
    f = findings(GPU / "big_baseline")["pageable-memcpy"]
    assert f["evidence"]["per_rank"][0]["dataloader_pin_memory"] is False or f["evidence"]["claim_note"] is None
    for name in ("gpu_pairs/big_pageable",):
        import pairs
        from test_pairs import report

        g = next(x for x in report(name)["findings"] if x["id"] == "pageable-memcpy")
        pin = g["evidence"]["per_rank"][0]["dataloader_pin_memory"]
        assert (g["evidence"]["claim_note"] is None) == (pin is not False), pin
        assert pairs.folder(name).is_dir()
