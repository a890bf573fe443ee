"""The cross-rank analysis on real CPU gloo captures (comm_captures.SPECS, made once per session) and the public NCCL
traces: a collective missing on one rank, a rank's file missing, matching by sequence numbers. Tests marked
CONSTRUCTED edit real analysis tables by hand to pin one behaviour."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from traceinspect.analyze.cross_rank import cross_rank_analysis
from traceinspect.config import Config
from traceinspect.load.reader import load
from traceinspect.run.stages import analyze

from comm_captures import findings_of
from public_traces import DDP_2RANK, need, only_file

NOCACHE = Config(use_cache=False, workers=1)


@pytest.mark.timing
def test_cross_rank_reports_a_collective_missing_on_one_rank(comm_report):
    """CONSTRUCTED from a real capture: one all-reduce row removed from rank 1's table."""
    rep = comm_report("slow_rank_2")
    ranks = copy.deepcopy(rep.ranks)
    r1 = next(r for r in ranks if r.rank == 1)
    c = r1.tables["collectives"]
    dropped = c.iloc[0]
    r1.tables["collectives"] = c.iloc[1:].reset_index(drop=True)
    cr = cross_rank_analysis(ranks, NOCACHE)
    json.dumps(cr, allow_nan=False)
    assert cr["unmatched_count"] == 1
    (u,) = cr["unmatched"]
    assert u["step"] == int(dropped["step"]) and u["ranks_missing"] == [1] and u["ranks_present"] == [0]
    assert cr["matched"] == rep.cross_rank["matched"] - 1


@pytest.mark.timing
def test_cross_rank_works_on_the_ranks_present(comm_capture):
    """A 4-rank run with rank 3's file missing: the analysis uses ranks 0-2 and still finds rank 2."""
    trace = load(comm_capture("slow_rank_4"), NOCACHE)
    trace.ranks = [r for r in trace.ranks if r.rank != 3]
    rep = analyze(trace, NOCACHE)
    assert rep.cross_rank["ranks"] == [0, 1, 2]
    (f,) = findings_of(rep, "straggler")
    assert f.ranks == [2]


@pytest.mark.timing
def test_cross_rank_matches_by_seq_when_present(comm_report):
    """CONSTRUCTED from a real capture: Seq numbers added (as newer torch writes them), with rank 1's first
    collective renumbered so that only (pg, seq) and not the order can pair it."""
    rep = comm_report("slow_rank_2")
    ranks = copy.deepcopy(rep.ranks)
    for ra in ranks:
        c = ra.tables["collectives"]
        c["pg"] = "0"
        c["seq"] = np.arange(len(c)) + 1
    r1 = next(r for r in ranks if r.rank == 1)
    c1 = r1.tables["collectives"]
    c1.loc[0, "seq"] = 1000  # rank 1's first collective no longer pairs with rank 0's first
    cr = cross_rank_analysis(ranks, NOCACHE)
    assert cr["match_by"] == "seq"
    assert cr["unmatched_count"] == 2  # seq 1 only on rank 0, seq 1000 only on rank 1
    assert cr["matched"] == len(c1) - 1


def test_public_single_rank_traces_have_no_cross_rank():
    f = only_file(need(DDP_2RANK))
    rep = analyze(load(f, NOCACHE), NOCACHE)
    assert rep.cross_rank == {} and not findings_of(rep, "straggler")
