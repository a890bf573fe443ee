"""The README's before/after H200 pair: what big_baseline flags, big_optimized fixes (several rules at once)."""

from __future__ import annotations

from _real import GPU, findings


def test_big_optimized_fixes_what_big_baseline_flags():
    before = findings(GPU / "big_baseline")
    after = findings(GPU / "big_optimized")
    fixed = {"pageable-memcpy", "dataloader-stall", "host-sync", "no-mixed-precision", "sync-every-microstep"}
    assert fixed <= set(before)
    assert not fixed & set(after)
