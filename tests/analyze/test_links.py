"""links.py and events.py join (window, id) pairs as one integer; against the two-column pandas joins and the
per-call scan they replace, on real captures (one with two profiling windows), and on both of their paths."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, strategies as st

from traceinspect.analyze import events as E, links as L
from traceinspect.config import Config
from traceinspect.load.reader import load
from traceinspect.load.trace import Kind

from public_traces import DDP_2RANK, DIFF_CONTROL, need

FIXTURES = __import__("pathlib").Path(__file__).resolve().parents[2] / "fixtures"
TRACES = [FIXTURES / "gpu_pairs" / "two_windows", FIXTURES / "gpu" / "baseline", DDP_2RANK, DIFF_CONTROL]


def _ref_launch_calls(ev):
    rt = E.linked_runtime_rows(ev)
    return pd.DataFrame({"window": ev["window"].to_numpy()[rt], "corr": ev["corr"].to_numpy()[rt],
                         "rt": rt}).drop_duplicates(["window", "corr"])


def _ref_ops(ev, cpu):
    ops = pd.DataFrame({"window": ev["window"].to_numpy()[cpu], "ext": ev["ext"].to_numpy()[cpu], "op": cpu,
                        "odur": ev["dur"].to_numpy()[cpu]})
    return ops[ops["ext"] >= 0].sort_values("odur", kind="stable").drop_duplicates(["window", "ext"])


def _ref_enclosing(ev, calls, ext=None):
    """Two-column merge by External id, then for the rest a scan back over the thread's ops, one call at a time."""
    out = np.full(len(calls), -1, np.int64)
    cpu = np.flatnonzero(ev["kind"].to_numpy() == int(Kind.CPU_OP))
    ts, dur, tid, win = (ev[c].to_numpy() for c in ("ts", "dur", "tid", "window"))
    ext = ev["ext"].to_numpy()[calls] if ext is None else ext
    q = pd.DataFrame({"window": win[calls], "ext": ext, "pos": np.arange(len(calls))})
    m = q.merge(_ref_ops(ev, cpu)[["window", "ext", "op"]], on=["window", "ext"])
    pos, op = m["pos"].to_numpy(), m["op"].to_numpy()
    rr = calls[pos]
    ok = (ts[op] <= ts[rr]) & (ts[rr] <= ts[op] + dur[op]) & (tid[op] == tid[rr])
    out[pos[ok]] = op[ok]
    for i in np.flatnonzero(out < 0):
        r = calls[i]
        cand = cpu[(win[cpu] == win[r]) & (tid[cpu] == tid[r])]
        cand = cand[np.argsort(ts[cand], kind="stable")]
        j = np.searchsorted(ts[cand], ts[r], side="right") - 1
        for k in range(j, max(j - 256, -1), -1):
            if ts[cand[k]] + dur[cand[k]] >= ts[r]:
                out[i] = cand[k]
                break
    return out


def _ref_launching(ev, gpu):
    win, corr, ext = (ev[c].to_numpy()[gpu] for c in ("window", "corr", "ext"))
    q = pd.DataFrame({"window": win, "corr": corr, "pos": np.arange(len(gpu))})
    rt = q.merge(_ref_launch_calls(ev), on=["window", "corr"], how="left").sort_values("pos")["rt"]
    rt = rt.fillna(-1).to_numpy().astype(np.int64)
    out = np.full(len(gpu), -1, np.int64)
    has = rt >= 0
    out[has] = _ref_enclosing(ev, rt[has], ext[has])
    rest = np.flatnonzero(~has)
    cpu = np.flatnonzero(ev["kind"].to_numpy() == int(Kind.CPU_OP))
    m = pd.DataFrame({"window": win[rest], "ext": ext[rest], "pos": rest}).merge(_ref_ops(ev, cpu),
                                                                               on=["window", "ext"])
    out[m["pos"].to_numpy()] = m["op"].to_numpy()
    return out


@pytest.fixture(scope="module", params=TRACES, ids=lambda p: p.name)
def events(request):
    return load(need(request.param), Config(use_cache=False, workers=1)).ranks[0].events


@pytest.mark.slow  # every event of the 8-rank A100 trace joined twice
@pytest.mark.parametrize("one_key", [True, False], ids=["one-integer", "two-columns"])
def test_joins_equal_the_two_column_joins(events, one_key, monkeypatch):
    if not one_key:  # ids too large for one integer: the functions fall back to joining on both columns
        monkeypatch.setattr(L, "pair_keys", lambda pairs: None)
        monkeypatch.setattr(E, "pair_keys", lambda pairs: None)
    ev = events
    kind = ev["kind"].to_numpy()
    rt = np.flatnonzero(E.runtime_mask(ev))
    gpu = np.flatnonzero(kind >= int(Kind.KERNEL))
    np.testing.assert_array_equal(L.launch_calls(ev).to_numpy(), _ref_launch_calls(ev).to_numpy())
    found = L.enclosing_ops(ev, rt)
    np.testing.assert_array_equal(found, _ref_enclosing(ev, rt))
    assert (found >= 0).mean() > 0.5  # the join finds ops: the comparison is not of two empty results
    np.testing.assert_array_equal(L.launching_ops(ev, gpu), _ref_launching(ev, gpu))
    k = np.flatnonzero(kind == int(Kind.KERNEL))
    want = rt[pd.MultiIndex.from_arrays([ev["window"].to_numpy()[rt], ev["corr"].to_numpy()[rt]]).isin(
        pd.MultiIndex.from_arrays([ev["window"].to_numpy()[k], ev["corr"].to_numpy()[k]]))]
    np.testing.assert_array_equal(E.rows_sharing_corr(ev, rt, k), want)


def test_the_two_window_capture_links_events_in_both_windows():
    """The capture checked above has linked events in both windows, so its keys carry the window (pair_keys with
    more than one window; equal ids in two windows are covered by the constructed pairs below)."""
    ev = load(FIXTURES / "gpu_pairs" / "two_windows", Config(use_cache=False, workers=1)).ranks[0].events
    assert sorted(ev.loc[ev["corr"] >= 0, "window"].unique()) == [0, 1]


pairs_st = st.lists(st.tuples(st.integers(0, 3), st.integers(-1, 1 << 40)), min_size=1, max_size=30)


@given(pairs_st, pairs_st)
def test_pair_keys_are_equal_exactly_when_the_pairs_are(a, b):
    """Constructed (window, id) pairs: equal keys across the two sets exactly where window and id are equal."""
    wa, ia = (np.array(x, np.int64) for x in zip(*a))
    wb, ib = (np.array(x, np.int64) for x in zip(*b))
    ka, kb = E.pair_keys([(wa.astype(np.int16), ia), (wb.astype(np.int16), ib)])
    same = (wa[:, None] == wb[None, :]) & (ia[:, None] == ib[None, :])
    np.testing.assert_array_equal(ka[:, None] == kb[None, :], same)


def test_pair_keys_refuse_ids_too_large_to_share_an_integer():
    w = np.array([0, 1], np.int16)
    assert E.pair_keys([(w, np.array([0, 1 << 62]))]) is None
    assert E.pair_keys([(np.zeros(2, np.int16), np.array([0, 1 << 62]))]) is not None  # one window: the id alone


event_st = st.tuples(st.sampled_from([int(Kind.CPU_OP), int(Kind.RUNTIME), int(Kind.KERNEL)]),
                     st.integers(0, 40), st.integers(0, 12), st.integers(0, 1), st.integers(0, 1),
                     st.integers(-1, 5), st.integers(-1, 5))


@given(st.lists(event_st, min_size=1, max_size=40))
def test_joins_equal_the_reference_on_constructed_events(rows):
    """Constructed events with ids shared by several ops (the shortest op wins, the first of equals), calls in no
    op, and the same ids in two windows."""
    kind, ts, dur, tid, win, ext, corr = (np.array(c) for c in zip(*rows))
    ev = pd.DataFrame({"kind": kind.astype(np.uint8), "ts": ts.astype(float), "dur": dur.astype(float), "tid": tid,
                       "window": win.astype(np.int16), "ext": ext, "corr": corr})
    calls = np.flatnonzero(E.runtime_mask(ev))
    gpu = np.flatnonzero(kind == int(Kind.KERNEL))
    np.testing.assert_array_equal(L.enclosing_ops(ev, calls), _ref_enclosing(ev, calls))
    np.testing.assert_array_equal(L.launching_ops(ev, gpu), _ref_launching(ev, gpu))
    np.testing.assert_array_equal(L.launch_calls(ev).to_numpy(), _ref_launch_calls(ev).to_numpy())


@given(st.lists(st.integers(-1, 1 << 40), max_size=30), st.lists(st.integers(-1, 1 << 40), max_size=30),
       st.booleans())
def test_isin_equals_numpy_isin(values, among, dense):
    """Constructed ids, dense (the table lookup) or spread over a wide range (the hash lookup)."""
    a, b = np.array(values, np.int64), np.array(among, np.int64)
    if dense:
        a, b = a % 1000, b % 1000
    np.testing.assert_array_equal(E.isin(a, b), np.isin(a, b))
