"""The pipeline and tensor-parallel findings' claims against the saving measured when only their knob changes
(fixtures/cpu_strategies: one-knob pairs captured in one job, their windows alternating, so both saw the same load).

The measured side comes from the raw trace JSON (tests/strategy_raw.py, standard library only): the mean step over
the ranks and, for the pipeline, the mean bubble (the training thread's union of sends and receives). A claim must
lie within 30 % of the measured saving or within its noise, whichever is larger, as in test_pairs.py. The claim is
the finding's time at stake on the problem run: pipeline-bubble's saving of the micro-batch count it recommends
(the twin's), its GPipe -> 1F1B saving (0), and tp-exposed-comm's exposed time beyond what the twin still has.
docs/communication.md has the table.
"""

from __future__ import annotations

from functools import lru_cache

import pytest

import statistics

from strategy_raw import FIXTURES, P2P, capture_extra, per_step, saving
from analyses import doc_of

pytestmark = pytest.mark.slow  # the pipeline and tensor-parallel pairs analyzed: claims against measured savings

STEP, BUBBLE = 0, 1
OPTIMIZER_STEP = frozenset({"Optimizer.step#AdamW.step"})
MATMULS = frozenset({"aten::mm", "aten::addmm"})


@lru_cache(maxsize=None)
def report(name: str) -> dict:
    return doc_of(FIXTURES / name)


def found(name: str, rule: str) -> dict | None:
    return next((f for f in report(name)["findings"] if f["id"] == rule), None)


def microbatch_claim(problem: str, twin: str) -> float:
    """pipeline-bubble on the problem run recommends the twin's micro-batch count and claims its saving."""
    f = found(problem, "pipeline-bubble")
    assert f is not None
    twin_mb = report(twin)["strategy"]["pp_microbatches"]
    assert f["evidence"]["suggested_microbatches"] == twin_mb
    return f["time_at_stake_us"]


def schedule_claim(problem: str, twin: str) -> float:
    f = found(problem, "pipeline-bubble")
    return f["evidence"]["saving_if_1f1b_us_per_step"] if f else 0.0


def tp_claim(problem: str, twin: str) -> float:
    claims = [(found(n, "tp-exposed-comm") or {}).get("time_at_stake_us") or 0.0 for n in (problem, twin)]
    return max(claims[0] - claims[1], 0.0)


# problem, twin, what the claim is, the reason a pair is a known miss (None: it must hold)
PAIRS = [
    ("pp4_m8", "pp4_m4", microbatch_claim, None),
    ("pp2_m8", "pp2_m4", microbatch_claim,
     "at 2 ranks each stage's compute also grows with the micro-batches (126 / 150 -> 155 / 213 ms per step). "
     "Even all of the m8 stages' compute outside their matmuls taken as a cost per micro-batch (49.8 / 81.8 ms per "
     "step, 6.2 / 10.2 ms per micro-batch: an upper bound, elementwise work scales with the rows) adds only "
     "32.9 ms: 69 ms claimed against 107 +- 35 ms measured. The rest is the matmuls themselves, 14 / 22 ms "
     "slower as 8 x 64 rows than as 4 x 128 (a per-call cost one trace cannot part from the rows' work), and "
     "the optimizer step, the same work, 6 ms slower in the m8 windows; the bubble part holds"),
    ("pp2_gpipe", "pp2_1f1b", schedule_claim, None),
    ("tp2_replicate", "tp2_rowwise", tp_claim, None),
]


def _judge(pred: float, m: dict) -> bool:
    s, noise, tol = m["saving_us"], m["noise_us"], m["tolerance_us"]
    if s < -noise:  # the problem run was faster: only an upper bound
        return pred <= tol
    return abs(pred - s) <= tol


def _case(p):
    marks = [pytest.mark.xfail(strict=True, reason=p[3])] if p[3] else []
    return pytest.param(*p[:3], id=p[0], marks=marks)


@pytest.mark.parametrize("problem,twin,claim", [_case(p) for p in PAIRS])
def test_claim_matches_measured_step_saving(problem, twin, claim):
    pred, m = claim(problem, twin), saving(problem, twin, STEP)
    assert _judge(pred, m), (f"{problem}: predicted {pred / 1000:.1f} ms, measured {m['saving_us'] / 1000:.1f} ms "
                             f"(noise {m['noise_us'] / 1000:.1f} ms)")


@pytest.mark.parametrize("problem,twin", [("pp4_m8", "pp4_m4"), ("pp2_m8", "pp2_m4")])
def test_claim_matches_measured_bubble_saving(problem, twin):
    """What the micro-batch claim is made of: the bubble the recommended count removes, measured from the raw
    events. (Not for GPipe -> 1F1B: on 2 shared cores a stage blocked in a receive gives its core to the other, so
    the split between bubble and compute moves with the schedule while the step does not: 186 vs 107 ms of bubble,
    the same step within noise.)"""
    pred, m = microbatch_claim(problem, twin), saving(problem, twin, BUBBLE)
    assert _judge(pred, m), (f"{problem}: predicted {pred / 1000:.1f} ms, measured bubble "
                             f"{m['saving_us'] / 1000:.1f} ms (noise {m['noise_us'] / 1000:.1f} ms)")


def test_the_twins_are_one_knob_apart():
    """The capture metadata (never read by the analysis) says each pair differs in the one option."""
    for problem, twin, _, _ in PAIRS:
        a, b = capture_extra(problem), capture_extra(twin)
        assert a["twin"]["option"] == b["twin"]["option"] and a["twin"]["rounds"] >= 3
        sa, sb = a["strategy"], b["strategy"]
        assert len({k for k in sa.keys() | sb.keys() if sa.get(k) != sb.get(k)}) == 1, (sa, sb)


def test_the_pp2_miss_is_not_the_micro_batches_cpu_work_alone():
    """Why pp2_m8 -> pp2_m4 stays a known miss: from the m8 trace alone (raw events), each stage's pipelined compute
    (the step less its sends and receives and its optimizer step) outside its matmuls, taken whole as a cost per
    micro-batch, an upper bound of the fixed cost, would add what halving the micro-batches removes of it; the claim
    with that added is still below the measured saving less its tolerance."""
    m, m2 = 8, 4
    bubble, opt, mm = per_step("pp2_m8", P2P), per_step("pp2_m8", OPTIMIZER_STEP), per_step("pp2_m8", MATMULS)
    added = []
    for r in sorted({r for r, _ in bubble}):
        keys = [k for k in bubble if k[0] == r]
        compute = statistics.fmean(bubble[k][0] - bubble[k][1] - opt[k][1] for k in keys)
        outside = compute - statistics.fmean(mm[k][1] for k in keys)
        assert outside > 0
        added.append(outside * (1 - m2 / m))
    bound = microbatch_claim("pp2_m8", "pp2_m4") + statistics.fmean(added)
    s = saving("pp2_m8", "pp2_m4", STEP)
    assert bound < s["saving_us"] - s["tolerance_us"], (bound, s)
