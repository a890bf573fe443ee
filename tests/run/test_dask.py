"""The Dask executor gives the same report as the local one (a LocalCluster with 2 workers, real traces)."""

from __future__ import annotations

import shutil

import pytest

from traceinspect.run.api import analyze_path
from traceinspect.config import Config

from public_traces import DDP_2RANK, DIFF_CONTROL, DIFF_TEST, need, only_file

pytestmark = pytest.mark.slow  # starts Dask clusters

distributed = pytest.importorskip("dask.distributed", reason="dask.distributed not installed")


def _strip(d: dict) -> dict:
    d = dict(d)
    d.pop("source")
    return d


def test_dask_equals_local(tmp_path):
    for f in (DIFF_CONTROL, DIFF_TEST, DDP_2RANK):
        need(f)
    # Three real ranks' files of different runs side by side: the report (kept ranks, skipped files) must match.
    shutil.copy(only_file(DIFF_CONTROL), tmp_path / "control.json.gz")
    shutil.copy(only_file(DIFF_TEST), tmp_path / "test.json.gz")
    shutil.copy(only_file(DDP_2RANK), tmp_path / "ddp.json.gz")
    (tmp_path / "broken.json").write_text("{")
    cfg = Config(use_cache=False)
    local = analyze_path(tmp_path, cfg).to_dict()
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cl, \
            distributed.Client(cl) as client:
        from traceinspect.load.discover import list_traces
        from traceinspect.run.dask import analyze_with_dask

        remote = analyze_with_dask(list_traces(tmp_path), cfg.options, cfg.limits, cfg.thresholds,
                                   client=client).to_dict()
    assert _strip(remote) == _strip(local)
    # Three runs: the report is about the most recent (the 2-rank DDP run's rank 0), the others are listed.
    assert local["runs"]["count"] == 3 and [r["rank"] for r in local["ranks"]] == [0]
    assert any("broken.json" in s["file"] for s in local["skipped"])
