"""Hostile files beside a real rank: each costs bounded memory, gets one line naming it, and the other rank reports.

Every hostile file is built here from rank 1 of a real 2-rank CPU capture (``cpu_clean_run``, made in this test
session) and put beside that capture's untouched rank 0. Memory is the peak resident set of the report's processes
(``hostile.peak_rss``): before the limits (docs/folders.md, "Limits") the 1 GiB bomb peaked at 3.1 GB, the 2 GiB
one and the 3 GiB sparse file at 6.2 GB, and a world size of 10^9 was killed past 21 GB.
"""

from __future__ import annotations

import gzip
import json
import shutil
import zlib
from pathlib import Path

import pytest

from traceinspect.config import Config
from traceinspect.load.reader import load

from hostile_inputs import gzip_bomb, peak_rss, read_trace, report_cmd, sparse_tail, write_trace

GIB = 1 << 30
BOUND = GIB  # far above a report of these files (~130 MB) and far below what the bombs cost before
NOCACHE = Config(use_cache=False, workers=1)


@pytest.fixture()
def beside(cpu_clean_run, tmp_path):
    """``make(build) -> (folder, hostile file, the real rank 1)``: rank 0 copied, rank 1 replaced by
    ``build(real rank 1, dst)``."""
    r0, r1 = sorted(Path(cpu_clean_run).glob("*.json.gz"))

    def make(build, name: str = r1.name):
        folder = tmp_path / "log"
        folder.mkdir(exist_ok=True)
        shutil.copy(r0, folder / r0.name)
        return folder, build(r1, folder / name), r1

    return make


def _report(folder: Path, *extra: str) -> tuple[int, dict | None, str]:
    """(peak bytes, the JSON report, stderr) of ``traceinspect report`` on ``folder``: exit 0 (a skipped file is
    not an error without --strict, README "Exit codes") and no traceback."""
    out = folder.parent / "report.json"
    peak, p = peak_rss(report_cmd(folder, "--json", str(out), "-q", *extra))
    assert "Traceback" not in p.stderr
    if extra == ("--strict",):
        assert p.returncode == 2  # --strict: a skipped file is an input error
        return peak, None, p.stderr
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text())
    out.unlink()
    return peak, doc, p.stderr


def _one_skipped(doc: dict, bad: Path, why: str) -> str:
    """The hostile file is the one skipped, with one line saying ``why``; rank 0 is reported."""
    assert [r["rank"] for r in doc["ranks"]] == [0]
    assert [Path(s["file"]).name for s in doc["skipped"]] == [bad.name]
    reason = doc["skipped"][0]["reason"]
    assert why in reason and "\n" not in reason
    return reason


@pytest.mark.timeout(600)
@pytest.mark.parametrize("inflated", [GIB, 2 * GIB], ids=["1GiB", "2GiB"])
def test_a_gzip_bomb_is_refused_in_bounded_memory(beside, inflated):
    folder, bomb, _ = beside(lambda real, dst: gzip_bomb(real, dst, inflated))
    assert bomb.stat().st_size < inflated / 500  # ~1 MB and ~2 MB on disk
    peak, doc, err = _report(folder)
    _one_skipped(doc, bomb, "max_event_bytes")
    assert peak < BOUND, f"peak {peak / 1e6:.0f} MB"
    if inflated > GIB:
        return
    _, _, err = _report(folder, "--strict")
    assert [line for line in err.splitlines() if bomb.name in line] == [f"traceinspect: skipped {bomb}: "
                                                                        f"{doc['skipped'][0]['reason']}"]


def _repeated_event_bomb(real: Path, dst: Path, inflated: int) -> Path:
    """HOSTILE: ``real`` with one of its CPU events repeated until the text is ``inflated`` bytes; deflate packs
    a periodic text ~1000:1 (built like ``hostile.gzip_bomb``, from one compressed MiB of repeats)."""
    text = gzip.decompress(real.read_bytes()).decode()
    doc = json.loads(text)
    ev = next(e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "cpu_op")
    unit = (json.dumps(ev) + ",").encode()
    at = text.index("[", text.index('"traceEvents"')) + 1
    head, tail = text[:at].encode(), text[at:].encode()
    chunk = unit * ((1 << 20) // len(unit))
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    with open(dst, "wb") as out:
        out.write(c.compress(head) + c.flush(zlib.Z_FULL_FLUSH))
        packed = c.compress(chunk) + c.flush(zlib.Z_FULL_FLUSH)
        for _ in range(inflated // len(chunk)):
            out.write(packed)
        out.write(c.compress(tail) + c.flush())  # the gzip trailer's CRC is wrong: the bomb is refused before it
    return dst


@pytest.mark.timeout(600)
def test_a_bomb_of_repeated_events_stops_at_the_inflate_ratio(beside):
    folder, bomb, _ = beside(lambda real, dst: _repeated_event_bomb(real, dst, GIB))
    size = bomb.stat().st_size
    assert size < GIB / 200
    peak, doc, _ = _report(folder)
    reason = _one_skipped(doc, bomb, "max_inflate_ratio")
    assert "decompression bomb" in reason
    assert peak < BOUND, f"peak {peak / 1e6:.0f} MB"


@pytest.mark.timeout(600)
def test_a_sparse_file_is_refused_at_its_first_nul_byte(beside):
    folder, sparse, _ = beside(lambda real, dst: sparse_tail(real, dst, 3 * GIB), name="rank1.pt.trace.json")
    assert sparse.stat().st_size == 3 * GIB and sparse.stat().st_blocks * 512 < 64 << 20
    peak, doc, _ = _report(folder)
    _one_skipped(doc, sparse, "NUL byte")
    assert peak < BOUND, f"peak {peak / 1e6:.0f} MB"


def _edit(real: Path, dst: Path, change) -> Path:
    doc = read_trace(real)
    change(doc)
    return write_trace(doc, dst)


@pytest.mark.timeout(600)
def test_a_world_size_of_a_billion_is_a_note_not_an_allocation(cpu_clean_run, tmp_path):
    """Both ranks say 10^9 (distributedInfo and the capture metadata): before, the report was killed past 21 GB."""
    folder = tmp_path / "log"
    folder.mkdir()
    for f in sorted(Path(cpu_clean_run).glob("*.json.gz")):
        def absurd(doc):
            doc["distributedInfo"]["world_size"] = 10**9
            doc["traceinspect"]["world_size"] = 10**9
        _edit(f, folder / f.name, absurd)
    peak, doc, _ = _report(folder)
    assert [r["rank"] for r in doc["ranks"]] == [0, 1] and doc["skipped"] == []
    assert doc["world_size"] is None and doc["missing_ranks"] == []
    note = "world size 1,000,000,000 is implausible (above max_world_size 1,048,576): read as unknown"
    assert doc["runs"]["notable"] and note in doc["runs"]["summary"] and "\n" not in doc["runs"]["summary"]
    assert peak < BOUND, f"peak {peak / 1e6:.0f} MB"


def _step_events(doc: dict) -> list[dict]:
    return [e for e in doc["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("number", ["1" + "0" * 30, "9" * (1 << 20)], ids=["1e30", "MB-of-digits"])
def test_a_step_number_no_profiler_writes_is_not_a_step(beside, number):
    """Before: a traceback, exit 1. The renamed step is not a step; the rank's other steps are reported."""
    real_steps: list = []

    def rename_first(doc):
        first = min(_step_events(doc), key=lambda e: e["ts"])
        real_steps.extend(sorted({int(e["name"].split("#")[1]) for e in _step_events(doc)}))
        for e in _step_events(doc):  # the CPU annotation and its GPU copy, if any
            if e["name"] == first["name"]:
                e["name"] = "ProfilerStep#" + number
    folder, bad, _ = beside(lambda real, dst: _edit(real, dst, rename_first))
    _, doc, _ = _report(folder)
    assert [r["rank"] for r in doc["ranks"]] == [0, 1] and doc["skipped"] == []
    steps = {r["rank"]: [s["step"] for s in r["steps"]] for r in doc["ranks"]}
    assert steps[1] and set(steps[1]) <= set(real_steps[1:]) and real_steps[0] not in steps[1]


@pytest.mark.parametrize("indent", [None, 1], ids=["one-line", "indented"])
def test_nan_and_infinity_drop_their_events_only(beside, indent):
    """Python's json.dumps writes NaN / Infinity for non-finite floats (not JSON; msgspec refuses them): the file
    is read, and exactly the events with a non-finite time are gone."""
    def poison(real: Path, dst: Path) -> Path:
        doc = read_trace(real)
        cpu = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
        cpu[3]["ts"], cpu[4]["dur"], cpu[5]["ts"] = float("nan"), float("inf"), float("-inf")
        dst.write_bytes(gzip.compress(json.dumps(doc, indent=indent).encode(), 1))  # read whole / in pieces
        return dst
    folder, bad, real = beside(poison)
    assert b"NaN" in gzip.decompress(bad.read_bytes())
    trace = load(folder, NOCACHE)
    assert [r.rank for r in trace.ranks] == [0, 1] and trace.skipped == []
    assert len(trace.ranks[1].events) == len(load([str(real)], NOCACHE).ranks[0].events) - 3


def test_duplicate_keys_the_last_wins_but_two_event_arrays_are_refused(beside):
    def doubled(real: Path, dst: Path) -> Path:
        text = json.dumps(read_trace(real), indent=1)
        # Every event's ts written twice, the first value absurd; distributedInfo twice, the first one absurd.
        text = text.replace('"ts":', '"ts": 1e300, "ts":')
        text = text.replace('"distributedInfo":', '"distributedInfo": {"rank": 7, "world_size": 1000000000}, '
                                                  '"distributedInfo":', 1)
        dst.write_bytes(gzip.compress(text.encode(), 1))
        return dst
    folder, bad, r1 = beside(doubled)
    trace = load(folder, NOCACHE)
    real = load([str(r1)], NOCACHE).ranks[0]
    assert [r.rank for r in trace.ranks] == [0, 1] and trace.world_size == 2
    assert len(trace.ranks[1].events) == len(real.events)
    assert trace.ranks[1].events["ts"].max() == real.events["ts"].max()

    text = gzip.decompress(bad.read_bytes()).decode()
    bad.write_bytes(gzip.compress((text.rstrip()[:-1] + ', "traceEvents": []}').encode(), 1))
    trace = load(folder, NOCACHE)
    assert [r.rank for r in trace.ranks] == [0]
    assert [s.reason for s in trace.skipped] == ["the 'traceEvents' key appears twice: which array holds the "
                                                 "events is unknown"]


@pytest.mark.parametrize("where", ["metadata", "event args"])
def test_json_nested_a_hundred_thousand_levels_is_one_line(beside, where):
    deep = "[" * 100_000 + "]" * 100_000

    def nest(real: Path, dst: Path) -> Path:
        doc = read_trace(real)
        if where == "metadata":
            doc["deep"] = "@DEEP@"
        else:
            next(e for e in doc["traceEvents"] if e.get("ph") == "X").setdefault("args", {})["deep"] = "@DEEP@"
        dst.write_bytes(gzip.compress(json.dumps(doc, indent=1).replace('"@DEEP@"', deep).encode(), 1))
        return dst
    folder, bad, _ = beside(nest)
    _, doc, _ = _report(folder)
    _one_skipped(doc, bad, "JSON nested too deeply to read")


def test_a_name_of_a_megabyte_is_kept_whole_and_loading_stays_bounded(beside):
    long = "aten::" + "x" * (1 << 20)

    def rename(real: Path, dst: Path) -> Path:
        return _edit(real, dst, lambda doc: next(e for e in doc["traceEvents"]
                                                 if e.get("cat") == "cpu_op").__setitem__("name", long))
    folder, bad, _ = beside(rename)
    trace = load(folder, NOCACHE)
    assert [r.rank for r in trace.ranks] == [0, 1]
    assert long in set(trace.ranks[1].events["name"].cat.categories)
    peak, doc, _ = _report(folder)
    assert [r["rank"] for r in doc["ranks"]] == [0, 1]
    assert peak < BOUND


@pytest.mark.timeout(600)
def test_peak_memory_is_a_small_multiple_of_the_largest_file():
    """Above what a report of a tiny trace takes (the interpreter, pandas, the analyses: ~130 MB), a report of the
    public 8-rank run's rank 3 takes under 4 times its 34.8 MB of text (2.6x measured; 5.2x before decompression
    was streamed in bounded blocks)."""
    from public_traces import DIFF_CONTROL, PUBLIC, need, only_file

    tiny, control = need(PUBLIC / "hta_mi250_rocm"), need(DIFF_CONTROL)
    text = len(gzip.decompress(only_file(control).read_bytes()))
    base, p0 = peak_rss(report_cmd(tiny, "-q"))
    peak, p1 = peak_rss(report_cmd(control, "-q"))
    assert p0.returncode == 0 and p1.returncode == 0
    assert peak - base < 4 * text, f"{(peak - base) / text:.1f} x the largest file"
