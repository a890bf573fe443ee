"""load/spill.py: a file whose columns pass the memory bound is decoded into memory-mapped spill files, with the
same columns (values, order, string tables) and the same report as when it is held in memory; the pieces in flight
are bounded by the one setting, whatever the number of workers."""

from __future__ import annotations

import json
import mmap

import numpy as np
import pytest

from traceinspect.config import Config, RunOptions
from traceinspect.load.columns import NUM_COLS, RAW_COLS, STR_COLS
from traceinspect.load.limits import PIECE_COST, Limits
from traceinspect.load.reader import decode_file
from traceinspect.load.spill import _TRIM
from traceinspect.run import report_folder
from traceinspect.run.pool import process_pool

from load_helpers import plain_control
from public_traces import DIFF_CONTROL, need, only_file

SMALL = Limits(memory_limit_bytes=1 << 20)  # columns past 256 KiB spill: every piece here


@pytest.fixture
def plain(tmp_path, monkeypatch):
    """The public A100 trace, uncompressed (read by byte range), cut into 1 MB pieces."""
    return plain_control(tmp_path, monkeypatch)


def _mapped(arr: np.ndarray) -> bool:
    return isinstance(getattr(arr.base, "obj", None), mmap.mmap)  # np.frombuffer's base: a view of the map


def _same_columns(a: dict, b: dict) -> None:
    assert a["n"] == b["n"] > 10_000
    for col in NUM_COLS:
        assert a[col].dtype == b[col].dtype and np.array_equal(a[col], b[col]), col
    for col in STR_COLS:
        assert a[col][1] == b[col][1], col  # the same strings, in the same order
        assert np.array_equal(a[col][0], b[col][0]), col
    for col in RAW_COLS:
        assert (a[col] is None) == (b[col] is None), col
        if a[col] is not None:
            assert list(a[col]) == list(b[col]), col


def test_spilled_columns_equal_the_held_ones_plain_and_gzip(plain):
    for path in (str(plain), str(only_file(need(DIFF_CONTROL)))):
        held = decode_file(path).columns
        spilled = decode_file(path, limits=SMALL).columns
        assert not _mapped(held["ts"])
        assert all(_mapped(spilled[c]) for c in NUM_COLS) and _mapped(spilled["name"][0])
        _same_columns(held, spilled)


def test_spilled_columns_in_worker_processes(plain):
    with process_pool(2) as pool:
        spilled = decode_file(str(plain), pool=pool, workers=2, limits=SMALL).columns
    _same_columns(decode_file(str(plain)).columns, spilled)
    assert _mapped(spilled["dur"])


def test_spilled_report_equals_the_held_report(plain):
    def report(memory):
        cfg = Config(use_cache=False, workers=1, memory_limit_bytes=memory)
        return json.dumps(report_folder(plain.parent, cfg).to_dict(), sort_keys=True)

    assert report(1 << 20) == report(Config().memory_limit_bytes)


def test_each_analysis_holds_a_bounded_share_per_event(plain):
    """What each stage of the per-rank analysis allocates on top of the (spilled, mapped) columns stays under
    ``PART_BYTES_PER_EVENT`` a event of the rank: the figure the fan-out plans memory with. Measured with
    ``tracemalloc`` (numpy's arrays included) on the public A100 trace; before the sweep was made compact and the
    end-time columns were computed per row, the CPU-issue analysis took 240 bytes an event, the idle split 112."""
    import tracemalloc

    from traceinspect.analyze import rank as rank_stage
    from traceinspect.analyze.attribution import attribute
    from traceinspect.analyze.steps import find_steps
    from traceinspect.run import services
    from traceinspect.run.stages import load

    cfg = Config(use_cache=False, workers=1, memory_limit_bytes=1 << 20)
    rank = load(plain.parent, cfg).ranks[0]
    events = len(rank.events)
    ts = rank.events["ts"].to_numpy()
    while not _mapped(ts) and isinstance(ts.base, np.ndarray):  # the frame's view of the mapped column
        ts = ts.base
    assert _mapped(ts)
    peaks: dict[str, float] = {}
    tracemalloc.start()
    try:
        def measured(label, f):
            tracemalloc.reset_peak()
            before = tracemalloc.get_traced_memory()[0]
            out = f()
            peaks[label] = (tracemalloc.get_traced_memory()[1] - before) / events
            return out

        steps = measured("steps", lambda: find_steps(rank))
        table = measured("step table", lambda: attribute(rank, steps, cfg.thresholds))
        measured("base tables", lambda: rank_stage._base_part(rank, steps))
        for part in rank_stage._rank_parts():
            out = measured(part.__module__, lambda: rank_stage._run_part(part, rank, steps, table, cfg.thresholds))
            assert not out.errors, out.errors
    finally:
        tracemalloc.stop()
    assert max(peaks.values()) <= services.PART_BYTES_PER_EVENT, peaks
    assert max(peaks.values()) > 10  # measured at all


def test_pieces_in_flight_are_shared_by_the_workers():
    one_gib = Limits()
    assert one_gib.spill_bytes == 1 << 28
    assert one_gib.inflight(2) == 4
    # 64 workers share the same bound: no more pieces than it leaves room for, not 2 a worker
    assert one_gib.inflight(64) == ((1 << 30) - (1 << 28)) // PIECE_COST == 8
    assert SMALL.inflight(8) == 1


def test_pages_of_spilled_columns_leave_the_process(plain):
    cols = decode_file(str(plain), limits=SMALL).columns
    arrays = [cols[c] for c in NUM_COLS]
    mapped = sum(a.nbytes for a in arrays)
    assert mapped > 4 << 20
    total = sum(float(a.sum()) for a in arrays)  # every page of every column touched
    before = _TRIM.trim(budget=1 << 62)  # measures only
    _TRIM.trim(budget=0)  # releases the maps' pages
    later = _TRIM.trim(budget=1 << 62)
    assert before - later > mapped // 2  # the pages left this process...
    assert sum(float(a.sum()) for a in arrays) == total  # ...and the columns read the same from the file again


def test_a_rank_past_the_bound_runs_its_parts_in_one_process():
    import os

    from traceinspect.run import services

    parts = [os.getpid] * 5
    events = 2 * services.PARALLEL_MIN_EVENTS  # a big rank: its parts fork workers while the bound has room
    two = RunOptions(workers=2)
    tight = services.rank_fan_out(two, Limits(memory_limit_bytes=events * services.PART_BYTES_PER_EVENT))(parts, events)
    assert set(tight) == {os.getpid()}  # each worker would hold its own share: not side by side


def test_a_big_rank_runs_its_parts_side_by_side(tmp_path):
    """Two parts that each wait for the other to have started: they end at once only when they run in two
    processes at the same time (one after the other, the first would wait out its minute)."""
    import functools
    import os
    import time

    from traceinspect.run import services

    two = RunOptions(workers=2)
    if not services.workers(two).can_fork():
        pytest.skip("side-by-side parts need fork")

    def meet(i: int) -> tuple[int, float]:
        (tmp_path / str(i)).write_text(str(os.getpid()))
        t0 = time.monotonic()
        while len(list(tmp_path.iterdir())) < 2 and time.monotonic() - t0 < 60:
            time.sleep(0.01)
        return os.getpid(), time.monotonic() - t0

    parts = [functools.partial(meet, i) for i in range(2)] + [os.getpid] * 3
    out = services.rank_fan_out(two, Limits())(parts, 2 * services.PARALLEL_MIN_EVENTS)
    assert out[0][0] != out[1][0]  # the two waits ran in two processes...
    assert max(out[0][1], out[1][1]) < 30  # ...at the same time
    assert len(out) == 5 and all(isinstance(p, int) for p in out[2:])  # every part's result, in the parts' order


def test_pieces_handed_over_as_codes_join_into_the_columns_of_the_whole_file(plain):
    """A piece crosses the pipe with its process, thread and rarely present argument columns as codes into their
    few distinct values (``columns.LOOKUPS``); joined held or spilled, and beside a piece whose columns came whole
    (as the slower decoders give them), they are the columns of the file decoded at once."""
    from traceinspect.load.columns import LOOKUPS, expanded
    from traceinspect.load.decode import decode_range, decode_whole, plan_ranges
    from traceinspect.load.spill import ColumnSink

    whole = decode_whole(str(plain))[0]
    ranges = plan_ranges(str(plain))["ranges"]
    assert len(ranges) > 3
    for limits, whole_piece in [(Limits(), None), (Limits(), 1), (SMALL, None), (SMALL, 1)]:
        sink = ColumnSink(limits)
        for i, (a, b) in enumerate(ranges):
            piece = decode_range(str(plain), a, b)
            assert {c for _, values in piece[LOOKUPS] for c in values} == {
                "pid", "tid", "stream", "bytes", "in_nelems", "out_nelems", "group_size", "seq"}
            sink.add(expanded(piece) if i == whole_piece else piece)
        _same_columns(whole, sink.finish())
        sink.close()
