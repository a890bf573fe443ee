"""load/prefetch.py: a big plain trace's pieces decoded while the analysis stack is imported give the report the same
columns and the same report; the pieces are only started for a folder of one plain file, with several workers."""

from __future__ import annotations

import gzip
import json
import os

import numpy as np
import pytest

import traceinspect.load.decode as dec
from traceinspect.config import Config
from traceinspect.load import prefetch
from traceinspect.load.discover import list_traces
from traceinspect.load.reader import decode_file
from traceinspect.run import services
from traceinspect.run import report_folder

from load_helpers import plain_control
from public_traces import DIFF_CONTROL, need, only_file


@pytest.fixture
def plain(tmp_path, monkeypatch):
    """The public A100 trace, uncompressed (only plain files are read by byte range), cut into 1 MB pieces."""
    return plain_control(tmp_path, monkeypatch)


@pytest.fixture
def takes(monkeypatch):
    """Every ``take`` of the reader, and whether it found the pieces started."""
    seen = []
    orig = prefetch.Started.take

    def spy(self, path):
        got = orig(self, path)
        seen.append((path, got is not None))
        return got

    monkeypatch.setattr(prefetch.Started, "take", spy)
    return seen


@pytest.fixture
def pools(monkeypatch):
    """Every ``Started`` the report makes (to see its workers stopped after)."""
    made = []
    orig = prefetch.Started.__init__

    def spy(self, *a, **kw):
        orig(self, *a, **kw)
        made.append(self)

    monkeypatch.setattr(prefetch.Started, "__init__", spy)
    return made


def _started(path, cfg):
    """``prefetch.started`` with the run's workers and cache handed in, as the report does (run/__init__.py)."""
    return services.started(list_traces(path).files, cfg.options, cfg.limits)


def _report(path, workers):
    cfg = Config(use_cache=False, workers=workers)
    return json.dumps(report_folder(path, cfg).to_dict(), sort_keys=True)


def test_prefetched_report_equals_the_one_process_report(plain, takes, pools):
    one = _report(plain.parent, 1)
    assert takes == [] and pools == []  # one worker: nothing started
    two = _report(plain.parent, 2)
    assert takes == [(str(plain), True)]
    assert two == one
    assert len(pools) == 1 and pools[0].stopped and not pools[0].files  # the workers are gone after the report


def test_started_columns_equal_the_file_decoded_here(plain):
    here = decode_file(str(plain)).columns
    with _started(plain.parent, Config(use_cache=False, workers=2)) as pre:
        assert str(os.path.realpath(plain)) in pre.files
        there = decode_file(str(plain), taken=pre.take(str(plain))).columns
    assert pre.stopped
    assert set(there) == set(here)
    for c in dec.NUM_COLS:
        np.testing.assert_array_equal(there[c], here[c])
    for c in dec.STR_COLS:
        np.testing.assert_array_equal(there[c][0], here[c][0])
        assert there[c][1] == here[c][1]


def test_a_file_changed_since_the_start_is_decoded_again(plain, takes):
    with _started(plain.parent, Config(use_cache=False, workers=2)) as pre:
        st = plain.stat()
        os.utime(plain, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
        cols = decode_file(str(plain), taken=pre.take(str(plain))).columns
    assert takes == [(str(plain), False)]
    assert cols["n"] > 0


def test_a_forked_child_never_waits_on_the_parents_pieces(plain, monkeypatch):
    with _started(plain.parent, Config(use_cache=False, workers=2)) as pre:
        real_pid = os.getpid()
        monkeypatch.setattr(prefetch.os, "getpid", lambda: real_pid + 1)
        try:
            assert pre.take(str(plain)) is None
        finally:
            monkeypatch.undo()  # the parent again: it stops its workers
    assert pre.stopped


@pytest.mark.parametrize("case", ["gzip", "as many files as workers", "two files, four workers", "cached columns",
                                  "dask"])
def test_nothing_is_started_where_the_report_would_not_cut_the_file(plain, tmp_path, case):
    cfg = Config(use_cache=False, workers=2)
    if case == "gzip":
        gz = plain.parent / "rank3.pt.trace.json.gz"
        gz.write_bytes(gzip.compress(plain.read_bytes(), compresslevel=1))
        plain.unlink()
    elif case in ("as many files as workers", "two files, four workers"):
        (plain.parent / "rank4.pt.trace.json").write_bytes(plain.read_bytes())
        cfg = Config(use_cache=False, workers=2 if case.startswith("as many") else 4)
    elif case == "cached columns":
        report_folder(plain.parent, Config(workers=1, cache_dir=str(tmp_path / "cache")))  # fills the cache
        cfg = Config(workers=2, cache_dir=str(tmp_path / "cache"))
    else:
        cfg = Config(use_cache=False, workers=2, executor="dask")
    with _started(plain.parent, cfg) as pre:
        assert pre is None
