"""Loading real traces into columns, checked against the standard library's reading of the same files."""

from __future__ import annotations

import gzip
import shutil

import numpy as np
import pytest

from traceinspect.config import Config
from traceinspect.errors import NoUsableTraceError
from traceinspect.load.reader import load
from traceinspect.load.trace import CATEGORY_KIND, Kind
from traceinspect.run.services import column_cache

from public_traces import ALL, BERT, DDP_2RANK, DIFF_CONTROL, need, only_file, raw_events

NOCACHE = Config(use_cache=False, workers=1)


@pytest.mark.parametrize("folder", ALL, ids=lambda p: p.name)
def test_columns_match_stdlib(folder):
    need(folder)
    raw = raw_events(only_file(folder))
    kept = [e for e in raw["traceEvents"] if e.get("ph") == "X" and e.get("cat", "").lower() in CATEGORY_KIND]
    tr = load(folder, NOCACHE)
    assert len(tr.ranks) == 1
    ev = tr.ranks[0].events
    assert len(ev) == len(kept)
    # Same multiset of (kind, name) and exact sums of durations and bytes.
    assert sorted(zip(ev["kind"].tolist(), ev["name"].astype(str))) == sorted(
        (int(CATEGORY_KIND[e["cat"].lower()]), e["name"]) for e in kept
    )
    assert ev["dur"].sum() == pytest.approx(sum(e.get("dur", 0) for e in kept), rel=1e-12)
    copies = [e for e in kept if e["cat"] == "gpu_memcpy"]
    assert int(ev.loc[ev["kind"] == Kind.MEMCPY, "bytes"].sum()) == sum(e["args"]["bytes"] for e in copies)
    corr = sorted(e["args"]["correlation"] for e in kept if "correlation" in e.get("args", {}))
    assert sorted(ev.loc[ev["corr"] >= 0, "corr"].tolist()) == corr


def test_rank_world_and_device():
    need(DDP_2RANK)
    tr = load(DDP_2RANK, NOCACHE)
    r = tr.ranks[0]
    assert (r.rank, r.world_size, tr.world_size) == (0, 2, 2)
    assert r.device_name == "NVIDIA A100-PG509-200" and r.compute_capability == (8, 0)
    assert r.base_ns == 1711964646000000000
    need(DIFF_CONTROL)
    assert load(DIFF_CONTROL, NOCACHE).ranks[0].rank == 3
    need(BERT)
    b = load(BERT, NOCACHE)
    assert b.world_size is None and b.ranks[0].rank == 0


def test_parallel_pieces_equal_whole(tmp_path, monkeypatch):
    """Cutting a file into many small pieces decoded on 2 processes gives exactly the same columns."""
    need(DIFF_CONTROL)
    import traceinspect.load.decode as dec

    whole = load(DIFF_CONTROL, NOCACHE).ranks[0].events
    monkeypatch.setattr(dec, "PIECE_BYTES", 1 << 20)
    monkeypatch.setattr("traceinspect.load.compressed.READ_BYTES", 1 << 18)
    monkeypatch.setattr("traceinspect.load.decode.read_pieces.__defaults__", (1 << 20,))
    cut = load(DIFF_CONTROL, Config(use_cache=False, workers=2)).ranks[0].events
    assert len(cut) == len(whole)
    for c in ("ts", "dur", "corr", "ext", "bytes", "kind"):
        np.testing.assert_array_equal(cut[c].to_numpy(), whole[c].to_numpy())
    assert (cut["name"].astype(str) == whole["name"].astype(str)).all()


def test_cache_roundtrip(tmp_path):
    need(DIFF_CONTROL)
    src = only_file(DIFF_CONTROL)
    shutil.copy(src, tmp_path / src.name)
    cfg = Config(workers=1, cache_dir=str(tmp_path / "cache"))
    # The loader is handed its column cache by the stage runner (run/services.py); here the test hands it in.
    first = load(tmp_path / src.name, cfg, cache=column_cache(cfg)).ranks[0]
    assert list((tmp_path / "cache").rglob("cols-*.parquet"))
    second = load(tmp_path / src.name, cfg, cache=column_cache(cfg)).ranks[0]
    for c in first.events.columns:
        a, b = first.events[c], second.events[c]
        if c in ("name", "dtype", "coll", "pg"):
            assert a.astype(object).fillna("<NA>").tolist() == b.astype(object).fillna("<NA>").tolist(), c
        else:
            assert a.equals(b) or np.array_equal(a.to_numpy(), b.to_numpy()), c
    assert second.world_size == first.world_size and second.device_name == first.device_name


def test_uncuttable_layout(tmp_path):
    """A compact one-line trace (json.dumps without indent) decodes through the whole-file path."""
    need(BERT)
    import json

    raw = raw_events(only_file(BERT))
    (tmp_path / "compact.json").write_text(json.dumps(raw))
    (tmp_path / "bare.json").write_text(json.dumps(raw["traceEvents"]))
    a = load(tmp_path / "compact.json", NOCACHE).ranks[0]
    b = load(tmp_path / "bare.json", NOCACHE).ranks[0]
    ref = load(BERT, NOCACHE).ranks[0]
    assert len(a.events) == len(b.events) == len(ref.events)
    assert a.device_name == ref.device_name


# ---- bad input -------------------------------------------------------------------------------------------------


def _bad_files(tmp_path, good_src):
    data = gzip.decompress(good_src.read_bytes())
    (tmp_path / "truncated.json").write_bytes(data[: len(data) // 2])
    (tmp_path / "truncated.json.gz").write_bytes(good_src.read_bytes()[:5000])
    (tmp_path / "notjson.json").write_text("this is not json\n")
    (tmp_path / "notgzip.json.gz").write_text('{"traceEvents": []}')
    (tmp_path / "empty.json").write_bytes(b"")
    (tmp_path / "noevents.json").write_text('{"schemaVersion": 1, "other": [1, 2]}')
    (tmp_path / "emptyevents.json").write_text('{"traceEvents": [\n  ]}')


def test_bad_files_are_skipped_with_reasons(tmp_path):
    need(DIFF_CONTROL)
    good = only_file(DIFF_CONTROL)
    _bad_files(tmp_path, good)
    shutil.copy(good, tmp_path / "rank3.json.gz")
    tr = load(tmp_path, NOCACHE)
    assert [r.rank for r in tr.ranks] == [3]
    reasons = {s.file.rsplit("/", 1)[-1]: s.reason for s in tr.skipped}
    assert set(reasons) == {"truncated.json", "truncated.json.gz", "notjson.json", "notgzip.json.gz", "empty.json",
                            "noevents.json", "emptyevents.json"}
    assert "truncated" in reasons["truncated.json"]
    assert "gzip" in reasons["truncated.json.gz"]
    assert "not JSON" in reasons["notjson.json"]
    assert "not a gzip" in reasons["notgzip.json.gz"]
    assert "empty" in reasons["empty.json"]
    assert "traceEvents" in reasons["noevents.json"]
    assert "no usable trace events" in reasons["emptyevents.json"]
    assert all("\n" not in r for r in reasons.values())


def test_nothing_usable_raises(tmp_path):
    (tmp_path / "a.json").write_text("{")
    with pytest.raises(NoUsableTraceError, match="no usable trace"):
        load(tmp_path, NOCACHE)
    with pytest.raises(NoUsableTraceError, match="no trace files"):
        load(tmp_path / "sub" if (tmp_path / "sub").mkdir() is None else None, NOCACHE)
    with pytest.raises(NoUsableTraceError, match="no such file"):
        load(tmp_path / "missing", NOCACHE)


def test_mixed_runs_are_told_apart(tmp_path):
    """A copy of a rank's file and a file of another run (another job, another time) in one folder."""
    need(DIFF_CONTROL)
    from public_traces import DIFF_TEST
    from traceinspect.run.api import analyze_path

    need(DIFF_TEST)
    shutil.copy(only_file(DIFF_CONTROL), tmp_path / "a.json.gz")
    shutil.copy(only_file(DIFF_CONTROL), tmp_path / "b.json.gz")
    shutil.copy(only_file(DIFF_TEST), tmp_path / "c.json.gz")
    def start_ns(raw):  # the clock origin (absent in old traces, whose ts count from the epoch) + the first event
        return raw.get("baseTimeNanoseconds", 0) + 1000 * min(e["ts"] for e in raw["traceEvents"] if e.get("ph") == "X")

    assert start_ns(raw_events(only_file(DIFF_TEST))) > start_ns(raw_events(only_file(DIFF_CONTROL)))
    d = analyze_path(tmp_path, NOCACHE).to_dict()
    assert [(r["rank"], r["world_size"]) for r in d["ranks"]] == [(1, 2)]
    assert d["runs"]["count"] == 2 and d["runs"]["selected"] == 2
    reasons = {s["file"].rsplit("/", 1)[-1]: s["reason"] for s in d["skipped"]}
    assert set(reasons) == {"b.json.gz"}
    assert "overlapping" in reasons["b.json.gz"] and "a.json.gz" in reasons["b.json.gz"]
    assert d["missing_ranks"] == [0]
    first = analyze_path(tmp_path, NOCACHE, run=1).to_dict()
    assert [r["rank"] for r in first["ranks"]] == [3]
    assert first["missing_ranks"] == [0, 1, 2, 4, 5, 6, 7]


def test_planned_byte_ranges_equal_streaming(tmp_path, monkeypatch):
    """A plain file decoded by workers reading byte ranges gives exactly the streamed columns."""
    need(DIFF_CONTROL)
    import traceinspect.load.decode as dec

    plain = tmp_path / "rank3.json"
    plain.write_bytes(gzip.decompress(only_file(DIFF_CONTROL).read_bytes()))
    streamed = load(plain, NOCACHE).ranks[0].events
    monkeypatch.setattr(dec, "PIECE_BYTES", 1 << 20)
    monkeypatch.setattr("traceinspect.load.decode.plan_ranges.__defaults__", (1 << 20,))
    plan = dec.plan_ranges(str(plain))
    assert plan is not None and len(plan["ranges"]) > 5
    ranged = load(plain, Config(use_cache=False, workers=2)).ranks[0].events
    assert len(ranged) == len(streamed)
    for c in ("ts", "dur", "corr", "ext", "bytes", "kind", "in_nelems"):
        np.testing.assert_array_equal(ranged[c].to_numpy(), streamed[c].to_numpy())
    assert (ranged["name"].astype(str) == streamed["name"].astype(str)).all()
