"""The analysis runs with NumPy's 2 MB pages off (``run/pool.ordinary_pages``), and puts NumPy's setting back."""

from __future__ import annotations

import numpy as np
import pytest

from traceinspect.run import pool

setter = getattr(getattr(np, "_core", None), "multiarray", None)
setter = getattr(setter, "_set_madvise_hugepage", None)
pytestmark = pytest.mark.skipif(setter is None, reason="this NumPy has no page setting")


def _now() -> bool:
    before = setter(True)
    setter(before)
    return before


@pytest.mark.parametrize("start", [True, False])
def test_pages_are_ordinary_inside_and_as_before_after(monkeypatch, start):
    monkeypatch.delenv(pool.HUGEPAGE_ENV, raising=False)
    was = setter(start)
    try:
        with pool.ordinary_pages():
            assert _now() is False
        assert _now() is start
        with pytest.raises(KeyError), pool.ordinary_pages():  # put back when the block fails, too
            raise KeyError
        assert _now() is start
    finally:
        setter(was)


def test_the_users_choice_stands(monkeypatch):
    monkeypatch.setenv(pool.HUGEPAGE_ENV, "1")
    was = setter(True)
    try:
        with pool.ordinary_pages():
            assert _now() is True
    finally:
        setter(was)


def test_a_report_runs_with_ordinary_pages(monkeypatch):
    """The report's analysis is inside the block: an analysis step sees the pages off, the caller after sees them
    as it had them."""
    from traceinspect.analyze import rank as R
    from traceinspect.config import Config
    from traceinspect.run import report_folder

    from public_traces import DDP_2RANK, need

    monkeypatch.delenv(pool.HUGEPAGE_ENV, raising=False)
    seen = []
    real = R.find_steps
    monkeypatch.setattr(R, "find_steps", lambda rank: seen.append(_now()) or real(rank))
    was = setter(True)
    try:
        report_folder(need(DDP_2RANK), Config(use_cache=False, workers=1))
        assert seen and not any(seen)
        assert _now() is True
    finally:
        setter(was)
