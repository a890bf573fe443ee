"""Many ranks on Dask: 24 ranks made of copies of a real 2-rank gloo capture whose rank 1 was slowed on purpose.

The copies (``benchmarks/replicate_ranks.py``) keep every event as captured and only renumber the ranks: 23 copies
of the real rank 0 and, as rank 17, the real rank 1, whose DataLoader slept on every sample. The Dask executor must
give the local executor's report, name rank 17 as the straggler with the DataLoader as the cause, and its driver
must hold per-rank summaries only (its peak memory stays far below the traces' size).
"""

from __future__ import annotations

import sys
import tracemalloc
from pathlib import Path

import pytest

from cpu_capture import STRAGGLER_ITEM_DELAY_MS

from traceinspect.config import Config
from traceinspect.run.api import analyze_path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from dask_scale import _Recording  # noqa: E402  (a client that keeps what the driver receives)
from replicate_ranks import replicate  # noqa: E402

distributed = pytest.importorskip("dask.distributed", reason="dask.distributed not installed")

pytestmark = pytest.mark.timing
RANKS, SLOW_AT = 24, 17


@pytest.fixture(scope="module")
def source(cpu_capture_factory) -> Path:
    # The same capture as the straggler rule's tests (one capture per session serves both).
    return cpu_capture_factory(preset="optimized", overrides={"num_workers": 0, "item_delay_ms": STRAGGLER_ITEM_DELAY_MS,
                                                              "slow_rank": 1})


@pytest.fixture(scope="module")
def many_ranks(source, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ranks24")
    files = replicate(source, out, RANKS, slow_at=SLOW_AT)
    assert len(files) == RANKS
    return out


def _strip(d: dict) -> dict:
    d = dict(d)
    d.pop("source")
    return d


def test_copies_are_labelled_and_renumbered(many_ranks):
    from cpu_capture import load_trace

    raws = [load_trace(many_ranks / f"rank{r}.pt.trace.json") for r in range(RANKS)]
    assert [t["distributedInfo"]["rank"] for t in raws] == list(range(RANKS))
    assert {t["distributedInfo"]["world_size"] for t in raws} == {RANKS}
    assert all("not a capture" in t["traceinspect_scaled"]["note"] for t in raws)
    assert [t["traceinspect_scaled"]["source_rank"] for t in raws] == [1 if r == SLOW_AT else 0 for r in range(RANKS)]




def _driver_peak(client, folder: Path, cfg: Config) -> tuple[dict, int]:
    """The report and the driver's peak of traced Python allocations while it was made."""
    from traceinspect.load.discover import list_traces
    from traceinspect.run.dask import analyze_with_dask

    tracemalloc.start()
    try:
        doc = analyze_with_dask(list_traces(folder), cfg.options, cfg.limits, cfg.thresholds, client=client).to_dict()
        return doc, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_dask_many_ranks_same_report_straggler_named_driver_small(source, many_ranks, tmp_path):
    cfg = Config(use_cache=False)
    local = analyze_path(many_ranks, cfg).to_dict()
    few = tmp_path / "ranks8"
    replicate(source, few, 8, slow_at=5)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cl, \
            distributed.Client(cl) as client:
        _driver_peak(client, few, cfg)  # first use: imports and the client's own set-up, not per-rank memory
        _, peak_few = _driver_peak(client, few, cfg)
        rec = _Recording(client)
        remote, peak_many = _driver_peak(rec, many_ranks, cfg)
    assert _strip(remote) == _strip(local)
    assert local["ranks_analyzed"] == RANKS and local["world_size"] == RANKS
    straggler = next(f for f in local["findings"] if f["id"] == "straggler")
    assert straggler["ranks"] == [SLOW_AT]
    assert straggler["evidence"]["cause"]["metric"] == "dataloader_us"
    # The driver decodes nothing: it receives one summary per rank, whose tables hold a fraction of the
    # rank's rows of events, and each more rank costs it well under a megabyte (the traces are 0.9 MB a rank here;
    # real GPU ranks are hundreds of MB, their summaries about the same size as these).
    summaries = [ra for ranks, _skipped in rec.received for ra in ranks]
    assert len(summaries) == RANKS
    for ra in summaries:
        rows = len(ra.steps) + sum(len(t) for t in ra.tables.values())
        # (these CPU ranks hold only ~2,500 events; a summary grows with steps and kernels, not with events)
        assert 0 < rows < ra.event_count / 4, (ra.rank, rows, ra.event_count)
    per_rank = (peak_many - peak_few) / (RANKS - 8)
    assert 0 < per_rank < (1 << 20), per_rank
