"""Every writer's and version's format: old categories, HIP, any JSON layout, compression, a bare event list."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import shutil

import pytest

from traceinspect.config import Config
from traceinspect.load import decode as dec
from traceinspect.load import peek as pk
from traceinspect.load.reader import load
from traceinspect.run.api import analyze_path

from load_helpers import PAIRS, comparable
from public_traces import PUBLIC, need, only_file, raw_events

NOCACHE = Config(use_cache=False, workers=1)
PT18 = PUBLIC / "kineto_pt18_resnet50"
MI250 = PUBLIC / "hta_mi250_rocm"


def step_numbers(raw: dict) -> list[int]:
    return sorted({int(e["name"].split("#")[1]) for e in raw["traceEvents"]
                   if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")
                   and e.get("cat", "").lower() in ("operator", "user_annotation", "cpu_op")})


def test_pytorch_18_steps_from_operator_category():
    need(PT18)
    raw = raw_events(only_file(PT18))
    assert {e["cat"] for e in raw["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")} == {"Operator"}
    assert "baseTimeNanoseconds" not in raw
    assert step_numbers(raw) == [5, 6, 7, 8, 9, 10]
    d = analyze_path(PT18, NOCACHE).to_dict()
    steps = d["ranks"][0]["steps"]
    assert [s["step"] for s in steps] == [5, 6, 7, 8, 9, 10]
    assert not any(s["synthetic"] for s in steps)
    # Steps follow one another: together they span the annotations from the first start to the last end.
    ann = [e for e in raw["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")]
    span = max(e["ts"] + e["dur"] for e in ann) - min(e["ts"] for e in ann)
    # (wall_us leaves out the GPU backlog queued before the window: docs/metrics.md)
    assert sum(s["wall_us"] + (s.get("backlog_us") or 0) for s in steps) >= span - 1e-6
    assert d["runs"]["runs"][0]["start"].startswith("2021-01-11")  # epoch microseconds, no base


def test_rocm_hip_steps():
    need(MI250)
    raw = raw_events(only_file(MI250))
    assert any(e.get("name", "").startswith("hip") for e in raw["traceEvents"])
    d = analyze_path(MI250, NOCACHE).to_dict()
    assert step_numbers(raw) == [1, 2]
    # ProfilerStep#2 is the stub the profiler cut at the window's end: 49 us holding no event, against 9.3 ms for
    # step 1. It is no step (analyze/steps.py, _drop_edge_stubs); step 1 is.
    ann = {e["name"]: e for e in raw["traceEvents"] if e.get("cat") == "user_annotation"
           and e["name"].startswith("ProfilerStep#")}
    two = ann["ProfilerStep#2"]
    inside = [e for e in raw["traceEvents"] if e.get("ph") == "X" and e is not two
              and two["ts"] <= e["ts"] < two["ts"] + two["dur"]]
    assert inside == [] and two["dur"] < 0.1 * ann["ProfilerStep#1"]["dur"]
    assert [s["step"] for s in d["ranks"][0]["steps"]] == [1]
    # ... and the report still says it saw step 2, with its annotation's duration (microsecond times near 4e12
    # keep about 1 ns of resolution in a double).
    assert d["ranks"][0]["partial_steps"] == [{"step": 2, "window": 0, "cpu_us": pytest.approx(two["dur"], abs=1e-3)}]
    assert d["ranks"][0]["device"] == "AMD Radeon Graphics"


# ---- layouts ---------------------------------------------------------------------------------------------------


def _one_event_a_line(raw: dict) -> str:
    head = {k: v for k, v in raw.items() if k != "traceEvents"}
    lines = ",\n".join("  " + json.dumps(e) for e in raw["traceEvents"])
    return "{" + json.dumps(head)[1:-1] + ', "traceEvents": [\n' + lines + "\n]}\n"


def _reversed_keys(raw: dict) -> str:
    def rev(x):
        if isinstance(x, dict):
            return {k: rev(x[k]) for k in reversed(list(x))}
        if isinstance(x, list):
            return [rev(v) for v in x]
        return x

    return json.dumps(rev(raw), indent=3)


LAYOUTS = {
    "compact": lambda raw: json.dumps(raw, separators=(",", ":")),
    "one_event_a_line": _one_event_a_line,
    "indent4": lambda raw: json.dumps(raw, indent=4),
    "tabs": lambda raw: json.dumps(raw, indent="\t"),
    "reversed_keys": _reversed_keys,
    "events_first": lambda raw: json.dumps({"traceEvents": raw["traceEvents"],
                                            **{k: v for k, v in raw.items() if k != "traceEvents"}}, indent=2),
    "crlf": lambda raw: json.dumps(raw, indent=2).replace("\n", "\r\n"),
}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    src = sorted((PAIRS / "two_windows").glob("*.json.gz"))[0]
    folder = tmp_path_factory.mktemp("ref")
    shutil.copy(src, folder / src.name)
    return src, comparable(analyze_path(folder, NOCACHE).to_dict())


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_any_layout_gives_the_same_report(layout, reference, tmp_path, monkeypatch):
    src, ref = reference
    raw = json.loads(gzip.decompress(src.read_bytes()))
    (tmp_path / "rank0.trace.json").write_text(LAYOUTS[layout](raw), newline="")
    assert comparable(analyze_path(tmp_path, NOCACHE).to_dict()) == ref
    # Cut into small pieces (the fast path's work) and with the large-file peek: still the same report.
    monkeypatch.setattr(dec, "PIECE_BYTES", 1 << 16)
    monkeypatch.setattr("traceinspect.load.decode.read_pieces.__defaults__", (1 << 16,))
    monkeypatch.setattr(pk, "WHOLE_BYTES", 1 << 16)
    monkeypatch.setattr(pk, "HEAD_BYTES", 1 << 15)
    monkeypatch.setattr(pk, "TAIL_BYTES", 1 << 15)
    assert comparable(analyze_path(tmp_path, NOCACHE).to_dict()) == ref


@pytest.mark.parametrize("form", ["bom", "bare_list", "gzip", "bz2", "xz"])
def test_bom_bare_list_and_compression(form, reference, tmp_path):
    src, ref = reference
    text = gzip.decompress(src.read_bytes())
    raw = json.loads(text)
    if form == "bare_list":  # no metadata object: no rank, device or clock origin, the same events
        (tmp_path / "t.json").write_text(json.dumps(raw["traceEvents"]))
        tr = load(tmp_path, NOCACHE)
        assert len(tr.ranks[0].events) == len(load(src, NOCACHE).ranks[0].events)
        return
    name, data = {"bom": ("t.json", b"\xef\xbb\xbf" + text), "gzip": ("t.json.gz", gzip.compress(text)),
                  "bz2": ("t.json.bz2", bz2.compress(text)), "xz": ("t.json.xz", lzma.compress(text))}[form]
    (tmp_path / name).write_bytes(data)
    from traceinspect.load.discover import TRACE_SUFFIXES

    if not name.endswith(TRACE_SUFFIXES):
        pytest.fail(f"{name} is not discovered")
    assert comparable(analyze_path(tmp_path, NOCACHE).to_dict()) == ref


def test_zstd_when_installed(reference, tmp_path):
    zstandard = pytest.importorskip("zstandard")
    src, ref = reference
    (tmp_path / "t.json.zst").write_bytes(zstandard.ZstdCompressor().compress(gzip.decompress(src.read_bytes())))
    assert comparable(analyze_path(tmp_path, NOCACHE).to_dict()) == ref


@pytest.mark.parametrize("form", ["gzip_handler_name", "gzip_other_name", "plain"])
def test_peek_ends_equal_peek_whole(form, monkeypatch, tmp_path):
    """The facts read from a large file's two ends (or its head alone) are those of the whole file."""
    orig = sorted((PAIRS / "two_windows").glob("*.json.gz"))[0]
    src = tmp_path / {"gzip_handler_name": orig.name, "gzip_other_name": "rank0.json.gz", "plain": orig.name[:-3]}[form]
    src.write_bytes(gzip.decompress(orig.read_bytes()) if form == "plain" else orig.read_bytes())
    whole = pk.peek(src)
    monkeypatch.setattr(pk, "WHOLE_BYTES", 1 << 16)
    monkeypatch.setattr(pk, "HEAD_BYTES", 1 << 15)
    monkeypatch.setattr(pk, "TAIL_BYTES", 1 << 15)
    ends = pk.peek(src)
    assert ends.error is None and whole.error is None
    for f in ("rank", "world_size", "job", "pid", "first_step", "clock", "name_time_ns"):
        assert getattr(ends, f) == getattr(whole, f), f
    assert abs(ends.start_ns - whole.start_ns) < 1e9 and abs(ends.end_ns - whole.end_ns) < 1e9


def test_accelerators_not_modelled_are_named(tmp_path):
    """Constructed: a real trace plus events in MTIA's runtime category (no MTIA trace is public)."""
    src = sorted((PAIRS / "two_windows").glob("*.json.gz"))[0]
    raw = json.loads(gzip.decompress(src.read_bytes()))
    x = next(e for e in raw["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "cpu_op")
    raw["traceEvents"].append({**x, "cat": "mtia_runtime", "name": "mtiaLaunchKernel"})
    (tmp_path / "rank0.json").write_text(json.dumps(raw, indent=1))
    d = analyze_path(tmp_path, NOCACHE).to_dict()
    assert d["runs"]["runs"][0]["other_devices"] == ["mtia_runtime"]
    assert "mtia_runtime" in d["runs"]["summary"] and d["runs"]["notable"]
