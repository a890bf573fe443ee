"""The memory section's step table shows as many steps as the time section's: all up to 12, else the first, the
last and those of the highest peaks, with a line that says so (render/memory.py)."""

from __future__ import annotations

from pathlib import Path

from msgspec.structs import replace

from traceinspect.config import Config
from traceinspect.render import memory as mem
from traceinspect.render.sections import MAX_STEP_ROWS
from traceinspect.run import report_folder

LEAK = Path(__file__).resolve().parents[2] / "fixtures" / "gpu_memory" / "lm_leak"


def _memory():
    (rank,) = report_folder(LEAK, Config(workers=1)).doc.ranks
    return rank.memory


def test_a_short_run_shows_every_step_and_says_nothing():
    m = _memory()
    assert 1 < len(m.steps) <= MAX_STEP_ROWS
    assert [r[0] for r in mem.step_rows(m)] == [str(s.step) for s in m.steps]
    assert mem.steps_note(m) is None


def test_a_long_run_shows_the_first_the_last_and_the_highest_peaks():
    """The leak's real steps, numbered on as a run of 30 steps: each peak a different size."""
    m = _memory()
    base = m.steps
    steps = [replace(base[i % len(base)], step=100 + i,
                     peak_allocated_bytes=base[i % len(base)].peak_allocated_bytes + (i * 7919) % 30 * 1_000_000)
             for i in range(30)]
    long = replace(m, steps=steps)
    shown = [int(r[0]) for r in mem.step_rows(long)]
    assert len(shown) == MAX_STEP_ROWS and shown == sorted(shown)
    assert shown[0] == 100 and shown[-1] == 129
    middle = sorted(steps[1:-1], key=lambda s: -s.peak_allocated_bytes)[: MAX_STEP_ROWS - 2]
    assert set(shown[1:-1]) == {s.step for s in middle}
    assert mem.steps_note(long).startswith(f"30 steps, {MAX_STEP_ROWS} shown")
