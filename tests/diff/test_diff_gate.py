"""The work-vs-rate diff and the regression gate on real H200 captures (fixtures/gpu_diff/): repeats of three
unchanged jobs and their one-knob regressions. Every expectation is recomputed here from the step times."""

from __future__ import annotations

import itertools
import math
import statistics

import pytest

from gpu_diff_fixtures import REGRESSIONS, REPEATS, analysed, diff_of, walls

PCT = 5.0

REPEAT_PAIRS = [(a, b) for reps in REPEATS.values() for a, b in itertools.permutations(reps, 2)]
REGRESSION_PAIRS = [(a, r) for job, regs in REGRESSIONS.items() for r in regs for a in REPEATS[job]]
POOLED_PAIRS = [(tuple(REPEATS[job]), r) for job, regs in REGRESSIONS.items() for r in regs]


def welch_beyond_noise(a: list[float], b: list[float]) -> bool:
    """The documented rule by hand: |delta| > 2 x Welch SE and > 1 % of the base mean step."""
    delta = statistics.fmean(b) - statistics.fmean(a)
    se = math.sqrt(statistics.variance(a) / len(a) + statistics.variance(b) / len(b))
    return abs(delta) > 2 * se and abs(delta) > 0.01 * statistics.fmean(a)


@pytest.mark.slow
@pytest.mark.parametrize("base,new", REPEAT_PAIRS, ids=lambda x: x)
def test_gate_never_trips_on_repeats_of_an_unchanged_job(base, new):
    dd = diff_of([base], [new])
    assert not dd["verdict"]["work_changed"], dd["verdict"]["work_items"]
    assert dd["verdict"]["work_cost"] is None
    assert dd["names"]["ops"]["changed_names"] == 0 and dd["names"]["kernel_shapes"]["changed_names"] == 0
    same_kernels = {r["key"]: r for r in dd["rate"]}["gpu_same_kernels_us"]
    assert abs(same_kernels["rel_change"]) < 0.01
    assert dd["gate"]["tripped"] is False and dd["gate"]["tripped_by"] == []
    slower = statistics.fmean(walls(new)) > statistics.fmean(walls(base)) * (1 + PCT / 100)
    if slower and welch_beyond_noise(walls(base), walls(new)):  # a machine difference the gate must not count...
        counted = diff_of([base], [new], count_machine=True)
        assert counted["gate"]["tripped"] is True and counted["gate"]["tripped_by"] == ["machine"]  # ...unless asked
        assert "--count-machine" in dd["gate"]["reasons"][-1]


@pytest.mark.slow  # reports every repeat of the fixture pairs
def test_repeats_of_the_host_bound_jobs_differ_beyond_their_step_noise():
    """The problem the verdict exists for: captures of one unchanged job, step times far apart."""
    sig = [(a, b) for a, b in REPEAT_PAIRS if a.startswith(("cpu", "gpu_a", "gpu_b", "gpu_c"))
           and b.startswith(("cpu", "gpu_a", "gpu_b", "gpu_c")) and welch_beyond_noise(walls(a), walls(b))]
    assert len(sig) >= 6


@pytest.mark.parametrize("base,new", [p for p in REPEAT_PAIRS if p[0][:3] == p[1][:3] and "fp32" not in p[0]],
                         ids=lambda x: x)
def test_machine_verdict_names_the_rate_that_changed(base, new):
    dd = diff_of([base], [new])
    v = dd["verdict"]
    if not welch_beyond_noise(walls(base), walls(new)):
        assert v["kind"] == "none"
        return
    assert v["kind"] == "machine" and v["bound"] == "host"
    rates = {r["key"]: r for r in dd["rate"]}
    named = rates[v["rates"][0]]
    delta = statistics.fmean(walls(new)) - statistics.fmean(walls(base))
    # the host-side rate whose time effect (new launches x the change per launch) is the largest, in the direction
    # of the step change
    host = [r for k, r in rates.items() if k in ("host_per_launch_us", "cpu_per_launch_us") and r["changed"]
            and r["effect_us"] * delta > 0]
    assert named is max(host, key=lambda r: abs(r["effect_us"]))
    assert named["label"].startswith("CPU time per launch")
    assert f"{named['label']} {named['base']:.1f} us -> {named['new']:.1f} us" in v["text"]
    assert ("faster" if delta < 0 else "slower") in v["text"] and "machine difference" in v["text"]
    launches = [s["launch_count"] for s in analysed(new)[0]["ranks"][0]["steps"] if not s["synthetic"]]
    per_launch = lambda n: statistics.fmean(  # noqa: E731
        (s["cpu_step_us"] - s["sync_us"] - s["dataloader_us"]) / s["launch_count"]
        for s in analysed(n)[0]["ranks"][0]["steps"] if not s["synthetic"])
    assert rates["host_per_launch_us"]["base"] == pytest.approx(per_launch(base))
    assert rates["host_per_launch_us"]["effect_us"] == pytest.approx(
        statistics.fmean(launches) * (per_launch(new) - per_launch(base)))


@pytest.mark.slow
@pytest.mark.parametrize("base,new", REGRESSION_PAIRS + POOLED_PAIRS, ids=lambda x: str(x))
def test_gate_trips_on_every_regression_that_costs_more_than_pct(base, new):
    """Against every repeat of its job, and against all of them (noise across runs): a regression whose measured
    step change exceeds PCT trips the gate, and the reasons say what tripped it."""
    bases = list(base) if isinstance(base, tuple) else [base]
    dd = diff_of(bases, [new])
    v, g = dd["verdict"], dd["gate"]
    assert v["work_changed"] and v["kind"] == "code"
    base_mean = statistics.fmean(statistics.fmean(walls(b)) for b in bases)
    measured = statistics.fmean(walls(new)) / base_mean - 1
    if measured > PCT / 100:
        assert g["tripped"] is True, (measured, g["reasons"])
    assert g["tripped"] is bool(g["tripped_by"]) and len(g["reasons"]) >= len(g["tripped_by"])
    if "work" in g["tripped_by"]:
        assert v["work_cost"]["rel"] > PCT / 100
        assert g["reasons"][0].startswith("the work change costs ") and "at the base's own rates" in g["reasons"][0]
    if "step" in g["tripped_by"]:
        assert measured > PCT / 100 and dd["overall"]["significant"]
        assert any(r.startswith("step ") and "the work changed" in r for r in g["reasons"])


@pytest.mark.parametrize("job,new", [("deep", "cpu_single"), ("deep", "cpu_tiny")])
def test_the_host_bound_work_regressions_trip_on_their_cost_against_all_repeats(job, new):
    """The CPU-bound job's captures differ by up to 45 %: its regressions (+21 %, +17 % against the mean of the
    repeats) are inside the noise across runs, and the gate trips on what the work change costs instead."""
    dd = diff_of(REPEATS[job], [new])
    assert dd["overall"]["significant"] is False
    assert dd["gate"]["tripped"] is True and dd["gate"]["tripped_by"] == ["work"]
    reason = dd["gate"]["reasons"][0]
    assert "the work change costs" in reason and "CPU ops whose count changed" in reason


def test_the_work_cost_is_the_changed_ops_at_the_base_time_per_call():
    """cpu_tiny (bucket_cap_mb=0.01): 16 more all-reduces a step, no other CPU op changes its count; the cost is
    the added calls at the base's time per call, by hand from the two inventories."""
    inv_a, inv_b = analysed("cpu_a")[1][0]["ops"], analysed("cpu_tiny")[1][0]["ops"]
    changed = {n for n in set(inv_a) | set(inv_b)
               if abs(inv_b.get(n, [0, 0])[0] - inv_a.get(n, [0, 0])[0]) >= 1}
    assert "c10d::allreduce_" in changed and all(inv_a.get(n, [0])[0] > 0 for n in changed)
    by_hand = sum((inv_b[n][0] - inv_a[n][0]) * inv_a[n][1] / inv_a[n][0] for n in changed)
    dd = diff_of(["cpu_a"], ["cpu_tiny"])
    cost = dd["verdict"]["work_cost"]
    assert cost["host_us"] == pytest.approx(by_hand)
    step = statistics.fmean(walls("cpu_a"))
    assert cost["us"] == pytest.approx(by_hand) and cost["rel"] == pytest.approx(by_hand / step)  # host-bound


@pytest.mark.parametrize("job,new", [("deep", "cpu_single"), ("deep", "cpu_tiny"), ("tf_bf16", "gpu_single")])
def test_the_work_cost_does_not_follow_the_speed_of_the_host(job, new):
    """Against each repeat of a host-bound job the measured step change swings by tens of percent (the host's
    speed); the work cost, relative to each base's own step, stays within a fifth of that swing."""
    measured, costs = [], []
    for base in REPEATS[job]:
        dd = diff_of([base], [new])
        measured.append(dd["overall"]["rel_change"])
        costs.append(dd["verdict"]["work_cost"]["rel"])
    assert max(measured) - min(measured) > 0.3
    assert max(costs) - min(costs) < (max(measured) - min(measured)) / 5


def test_the_optimizer_regression_is_told_by_kernel_names_and_launches():
    dd = diff_of(["gpu_a"], ["gpu_single"])
    work = {r["key"]: r for r in dd["work"]}
    assert work["launch_count"]["changed"] and work["launch_count"]["new"] > 2 * work["launch_count"]["base"]
    k = dd["names"]["kernels"]
    fused = [c for c in k["changed"] if c["name"].startswith("void at::native::(anonymous namespace)::multi_tensor")]
    assert fused and all(c["new_count"] == 0 for c in fused)


def test_several_captures_a_side_put_the_between_run_spread_in_the_noise():
    reps = REPEATS["deep"]
    one = diff_of([reps[0]], ["cpu_single"])
    many = diff_of(reps, ["cpu_single"])
    assert one["overall"]["runs"]["measured"] is False and "not measured" in one["overall"]["runs"]["note"]
    runs = many["overall"]["runs"]
    means = [statistics.fmean(walls(n)) for n in reps]
    assert runs["measured"] is True and runs["base"] == 3 and runs["new"] == 1
    assert runs["between_run_sd_us"]["base"] == pytest.approx(statistics.stdev(means))
    assert many["overall"]["base"]["mean_us"] == pytest.approx(statistics.fmean(means))
    # the new side borrows the base's between-run variance: se^2 = b/3 + b/1 (b above every within-run term here)
    b = statistics.variance(means)
    assert many["overall"]["se_us"] == pytest.approx(math.sqrt(b / 3 + b / 1))
    assert many["overall"]["threshold_us"] > one["overall"]["threshold_us"]
    assert many["runs"]["measured"] is True and len(many["runs"]["base"]) == 3


def test_a_work_change_that_saves_time_does_not_explain_a_slower_step():
    """A repeat pair the host made 42 % slower, with a work change that would save time at the base's rates: the
    step trigger does not count it; --count-machine does, as a machine difference."""
    import copy

    from traceinspect.report.diff_explain import gate

    dd = diff_of(["gpu_a"], ["gpu_b"])
    assert dd["overall"]["significant"] and dd["overall"]["rel_change"] > 0.3
    verdict = copy.deepcopy(dd["verdict"])
    cost = diff_of(["gpu_single"], ["gpu_a"])["verdict"]["work_cost"]  # the fused optimizer back: a saving
    assert cost["us"] < 0
    verdict.update(work_changed=True, kind="code", work_cost=cost)
    g = gate(dd["overall"], verdict, PCT)
    assert g["tripped"] is False and "saves time" in g["reasons"][-1]
    assert gate(dd["overall"], verdict, PCT, count_machine=True)["tripped_by"] == ["machine"]
