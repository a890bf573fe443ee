"""The columns of every real trace against a straightforward reference: the standard library's JSON reader and one
plain Python loop over the events, field by field, as trace.py documents the columns. The fast decoder reads
values that repeat as joint tuples; these tests say it loses or moves nothing, on every capture we have."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import msgspec
import numpy as np
import pytest

from traceinspect.load import columns as C
from traceinspect.load import decode as dec
from traceinspect.load.reader import decode_file
from traceinspect.load.trace import CATEGORY_KIND

from load_helpers import GPU, PAIRS
from public_traces import PUBLIC, raw_events

FILES = sorted([*GPU.glob("*/*.json*"), *PAIRS.glob("*/*.json*"), *PUBLIC.glob("*/*.json*")])
INT_ARGS = {"corr": "correlation", "stream": "stream", "bytes": "bytes", "in_nelems": "In msg nelems",
            "out_nelems": "Out msg nelems", "group_size": "Group size", "seq": "Seq"}
STR_ARGS = {"dtype": "dtype", "coll": "Collective name", "pg": "Process Group Name"}


def _int(v) -> int:
    if isinstance(v, str) and v.strip().lstrip("-").isdigit():
        v = int(v)
    return v if type(v) is int and -(1 << 63) <= v < (1 << 63) else -1


def _float(v) -> float:
    return float(v) if type(v) in (int, float) else 0.0


def reference(path: Path) -> dict:
    """Per row: the kept events' fields, exactly as documented in load/trace.py, by one loop."""
    doc = raw_events(path)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    rows = []
    for e in events:
        cat = e.get("cat")
        kind = CATEGORY_KIND.get(cat.lower()) if isinstance(cat, str) else None
        if e.get("ph") != "X" or kind is None:
            continue
        a = e.get("args") if isinstance(e.get("args"), dict) else {}
        name = e.get("name", "")
        if kind == 0 and C._STEP_NAME.match(name):
            kind = 1  # the old spelling of a step
        ext = _int(a.get("External id"))
        row = {"kind": int(kind), "name": name, "pid": _int(e.get("pid", -1)), "tid": _int(e.get("tid", -1)),
               "ts": _float(e.get("ts", 0.0)), "dur": _float(e.get("dur", 0.0)),
               "ext": ext if ext >= 0 else _int(a.get("external id"))}
        row.update({col: _int(a.get(key)) for col, key in INT_ARGS.items()})
        row.update({col: a.get(key) for col, key in STR_ARGS.items()})
        shapes = kind <= 1 and C._SHAPE_OPS.search(name) is not None
        row["in_dims"] = a.get("Input Dims") if shapes else None
        row["in_types"] = a.get("Input type") if shapes else None
        row["in_concrete"] = a.get("Concrete Inputs") if shapes else None
        rows.append(row)
    return rows


def _strings(col) -> list:
    codes, table = col
    return [table[c] if c >= 0 else None for c in codes]


@pytest.mark.slow  # a sweep over every trace at hand
@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_columns_equal_the_reference(path):
    ref = reference(path)
    assert all(math.isfinite(r["ts"]) and 0 <= r["dur"] < 1e17 for r in ref)  # nothing to drop in these captures
    cols = decode_file(str(path)).columns
    assert cols["n"] == len(ref) > 0
    for col in C.NUM_COLS:
        want = np.array([r[col] for r in ref], dtype=np.float64 if col in ("ts", "dur") else np.int64)
        np.testing.assert_array_equal(cols[col], want, err_msg=col)
    for col in C.STR_COLS:
        values = [r[col] for r in ref]
        assert _strings(cols[col]) == values, col
        assert cols[col][1] == list(dict.fromkeys(v for v in values if v is not None)), col  # first appearance
    for col in C.RAW_COLS:
        got = cols[col] if cols[col] is not None else [None] * len(ref)
        assert [None if v is None else json.loads(v) for v in got] == [r[col] for r in ref], col


def _events_array(path: Path) -> bytes:
    from traceinspect.load.compressed import iter_bytes

    doc = msgspec.json.decode(b"".join(iter_bytes(str(path))), type=dict[str, msgspec.Raw] | list[msgspec.Raw])
    return bytes(doc["traceEvents"]) if isinstance(doc, dict) else msgspec.json.encode(doc)


def _same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for col, x in a.items():
        y = b[col]
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and np.array_equal(x, y), col
        elif isinstance(x, tuple):
            assert x[0].dtype == y[0].dtype and np.array_equal(x[0], y[0]) and x[1] == y[1], col
        elif isinstance(x, dict):  # the memory instants' columns, the unmodelled counts
            assert isinstance(y, dict), col
            _same(x, y)
        else:
            assert x == y, col


@pytest.mark.slow  # a sweep over every trace at hand
@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_tagged_typed_and_loose_decoders_give_the_same_columns(path):
    """Byte for byte, the three decoders a piece can take agree wherever each of them can decode the events."""
    data = _events_array(path)
    # the slower paths read the memory instants in a second look (decode._with_instants), the tagged one at once
    loose = dec._with_instants(C.columns_from_events(dec._LOOSE.decode(data), loose=True), data)
    try:
        strict = dec._with_instants(C.columns_from_events(dec._STRICT.decode(data)), data)
    except msgspec.ValidationError:  # a file with a value of another type than Kineto writes (the ROCm capture)
        with pytest.raises(msgspec.ValidationError):
            dec._TAGGED.decode(data)
        return
    _same(C.columns_from_tagged(dec._TAGGED.decode(data)), strict)
    _same(strict, loose)


def test_an_unlisted_phase_takes_the_untagged_decoder():
    """Constructed: a phase the tagged decoder does not know fails it; the piece still decodes, the same."""
    events = [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1.0, "dur": 2.0,
               "args": {"stream": 7, "correlation": 5}},
              {"ph": "Z", "cat": "kernel", "name": "odd", "pid": 0, "tid": 7, "ts": 1.0, "dur": 2.0}]
    data = json.dumps(events).encode()
    with pytest.raises(msgspec.ValidationError):
        dec._TAGGED.decode(data)
    cols = dec.decode_array(data)
    assert cols["n"] == 1 and cols["stream"].tolist() == [7] and cols["corr"].tolist() == [5]
    assert _strings(cols["name"]) == ["k"]


def test_a_header_longer_than_a_megabyte_is_still_cut(tmp_path):
    """The public trace with a 3 MB key written before its events (constructed header): the byte-range plan finds
    the array beyond the first megabyte it looks at, and the columns are the file's own."""
    from traceinspect.load.layout import plan_ranges
    from public_traces import DIFF_CONTROL, need, only_file

    src = only_file(need(DIFF_CONTROL))
    text = gzip.decompress(src.read_bytes())
    padded = tmp_path / "padded.json"
    padded.write_bytes(b'{\n  "pad": "' + b"x" * (3 << 20) + b'",' + text.lstrip()[1:])
    plan = plan_ranges(str(padded))
    assert plan is not None and plan["ranges"][0][0] > 3 << 20
    _same(decode_file(str(padded)).columns, decode_file(str(src)).columns)


@pytest.mark.parametrize("tid, addr", [(7, 94_000_000_000), ("12", 5), (7, 1 << 63)],
                         ids=["typed", "thread-named-by-a-string", "int-past-int64"])
def test_memory_instants_read_alike_by_every_decoder(tid, addr):
    """Constructed: the tagged decoder's columns of memory instants (a column at a time where every value is typed,
    value by value where a thread is a string or an int passes int64, both read as -1) equal the slower paths'."""
    mem = {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, "tid": tid, "ts": 3.5,
           "args": {"Total Reserved": 2 << 20, "Total Allocated": 1 << 20, "Bytes": 512, "Addr": addr,
                    "Device Id": 0, "Device Type": 1}}
    oom = dict(mem, name="[OutOfMemory]", ts=4.0, args={"Bytes": 1 << 40, "Device Id": 0, "Device Type": 1})
    events = [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1.0, "dur": 2.0}, mem, oom,
              dict(mem, ts=5.0, args=dict(mem["args"], Bytes=-512))]
    data = json.dumps(events).encode()
    try:
        tagged = C.columns_from_tagged(dec._TAGGED.decode(data))
    except msgspec.ValidationError:  # an int past what msgspec types as int: the slower paths take the piece
        assert addr >= 1 << 63
        tagged = dec.decode_array(data)
    loose = dec._with_instants(C.columns_from_events(dec._LOOSE.decode(data), loose=True), data)
    _same(tagged, loose)
    inst = tagged["instants"]
    assert inst["bytes"].tolist() == [512, 1 << 40, -512] and inst["oom"].tolist() == [False, True, False]
    assert inst["tid"].tolist() == ([7] * 3 if tid == 7 else [-1] * 3)
