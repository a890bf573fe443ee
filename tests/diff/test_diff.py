"""``traceinspect diff``: every number recomputed here from the two report dicts, on two real runs (the public
control/test pair, and two real CPU captures), plus the CLI's inputs and one-line errors."""

from __future__ import annotations

import copy
import json
import math
import statistics

import pytest

from traceinspect.cli.main import cli, main
from traceinspect.cli.diff import diff as diff_command, render_diff_text
from traceinspect.report.diff import MIN_SHARE, SE_FACTOR, diff_reports

from public_traces import BERT, DIFF_CONTROL, DIFF_TEST, need
from analyzed_runs import analyzed, real_cpu_run, synthetic_cpu_run

if "diff" not in cli.commands:  # until cli._register_optional registers it on its own
    cli.add_command(diff_command)


def expected(base_rank: dict, new_rank: dict, metric: str) -> dict:
    """The documented rule, by hand: means, sample sd, Welch SE, |delta| > 2 SE and > 1 % of the base step."""
    def series(r):
        steps = [s for s in r["steps"] if not s["synthetic"]] or r["steps"]
        if metric == "wall":
            return [s["wall_us"] for s in steps]
        if metric == "sync_wait":
            return [s["sync_us"] for s in steps]
        if metric == "dataloader_wait":
            return [s["dataloader_us"] for s in steps]
        return [s["breakdown_us"][metric] for s in steps]

    a, b = series(base_rank), series(new_rank)
    step = statistics.fmean(series_wall(base_rank))
    delta = statistics.fmean(b) - statistics.fmean(a)
    if len(a) < 2 or len(b) < 2:
        return {"delta": delta, "significant": None}
    se = math.sqrt(statistics.variance(a) / len(a) + statistics.variance(b) / len(b))
    return {"delta": delta, "se": se, "significant": abs(delta) > 2 * se and abs(delta) > 0.01 * step,
            "sd_a": statistics.stdev(a), "sd_b": statistics.stdev(b)}


def series_wall(r):
    steps = [s for s in r["steps"] if not s["synthetic"]] or r["steps"]
    return [s["wall_us"] for s in steps]


def check_rank(rk: dict, base_rank: dict, new_rank: dict) -> None:
    assert SE_FACTOR == 2.0 and MIN_SHARE == 0.01
    assert [m["metric"] for m in rk["metrics"]][:1] == ["wall"]
    for m in rk["metrics"]:
        e = expected(base_rank, new_rank, m["metric"])
        assert m["delta_us"] == pytest.approx(e["delta"], rel=1e-9, abs=1e-9), m["metric"]
        assert m["significant"] == e["significant"], m["metric"]
        if e["significant"] is not None:
            assert m["se_us"] == pytest.approx(e["se"], rel=1e-9, abs=1e-12)
            assert m["noise_us"] == pytest.approx(2 * e["se"], rel=1e-9, abs=1e-12)
            assert m["base"]["sd_us"] == pytest.approx(e["sd_a"], rel=1e-9, abs=1e-12)
            assert m["new"]["sd_us"] == pytest.approx(e["sd_b"], rel=1e-9, abs=1e-12)
            want = "none" if not e["significant"] else ("up" if e["delta"] > 0 else "down")
            assert m["change"] == want


def check_findings(dd: dict, a: dict, b: dict) -> None:
    ia = {f["id"]: f["severity"] for f in a["findings"]}
    ib = {f["id"]: f["severity"] for f in b["findings"]}
    f = dd["findings"]
    assert sorted(e["id"] for e in f["disappeared"]) == sorted(set(ia) - set(ib))
    assert sorted(e["id"] for e in f["appeared"]) == sorted(set(ib) - set(ia))
    assert sorted(e["id"] for e in f["severity_changed"]) == sorted(k for k in set(ia) & set(ib) if ia[k] != ib[k])
    assert sorted(e["id"] for e in f["unchanged"]) == sorted(k for k in set(ia) & set(ib) if ia[k] == ib[k])
    for e in f["severity_changed"]:
        assert (e["severity"]["base"], e["severity"]["new"]) == (ia[e["id"]], ib[e["id"]])


@pytest.fixture(scope="module")
def control_test():
    need(DIFF_CONTROL)
    need(DIFF_TEST)
    return analyzed(DIFF_CONTROL)[2], analyzed(DIFF_TEST)[2]


def test_control_vs_test_paired(control_test):
    a, b = control_test
    dd = diff_reports(a, b, pairs=[(3, 1)])
    assert dd["schema"] == "traceinspect.diff/1" and dd["matched_by"] == "pairs"
    (rk,) = dd["ranks"]
    assert (rk["base_rank"], rk["new_rank"]) == (3, 1)
    check_rank(rk, a["ranks"][0], b["ranks"][0])
    check_findings(dd, a, b)
    # the test run is slower (V100 vs A100) and the slowdown stands far out of the noise; so do the D2D copies
    by = {m["metric"]: m for m in rk["metrics"]}
    assert by["wall"]["significant"] and by["wall"]["change"] == "up"
    assert by["d2d_exposed"]["significant"]
    assert dd["only_in_base"] == [] and dd["only_in_new"] == []
    assert dd["overall"]["delta_us"] == pytest.approx(by["wall"]["delta_us"])
    json.dumps(dd)  # plain JSON


def test_control_vs_test_by_rank_id(control_test):
    """The public pair are rank 3 of one run and rank 1 of another: matched by id, nothing is in both."""
    a, b = control_test
    dd = diff_reports(a, b)
    assert dd["ranks"] == [] and dd["only_in_base"] == [3] and dd["only_in_new"] == [1]
    text = render_diff_text(dd)
    assert "Ranks only in the base: 3" in text and "--pair 3:1" in text


def test_identical_reports_change_nothing(control_test):
    a, _ = control_test
    dd = diff_reports(a, copy.deepcopy(a))
    for m in dd["ranks"][0]["metrics"]:
        assert m["delta_us"] == 0 and m["significant"] is False and m["change"] == "none"
    assert not dd["findings"]["appeared"] and not dd["findings"]["disappeared"]
    assert len(dd["findings"]["unchanged"]) == len(a["findings"])


def test_single_step_cannot_tell():
    need(BERT)
    d = analyzed(BERT)[2]
    dd = diff_reports(d, copy.deepcopy(d))
    assert {m["significant"] for m in dd["ranks"][0]["metrics"]} == {None}
    assert "cannot tell" in render_diff_text(dd)


def test_rank_present_on_one_side(tmp_path):
    a = analyzed(synthetic_cpu_run(tmp_path / "a", ranks=(0, 1)))[2]
    b = analyzed(synthetic_cpu_run(tmp_path / "b", ranks=(0, 2), world_size=3))[2]
    dd = diff_reports(a, b)
    assert [r["base_rank"] for r in dd["ranks"]] == [0]
    assert dd["only_in_base"] == [1] and dd["only_in_new"] == [2]
    check_rank(dd["ranks"][0], a["ranks"][0], b["ranks"][0])
    assert dd["ranks"][0]["basis"] == {"base": "cpu", "new": "cpu"}
    assert [m["metric"] for m in dd["ranks"][0]["metrics"]] == ["wall", "dataloader", "forward", "backward", "comm",
                                                                "optimizer", "other"]


@pytest.mark.capture
def test_two_real_cpu_runs(request):
    """Baseline vs optimized real 2-rank CPU captures: both ranks matched by id, every number by hand."""
    a = analyzed(real_cpu_run(request, "cpu_baseline_run"))[2]
    b = analyzed(real_cpu_run(request, "cpu_clean_run"))[2]
    dd = diff_reports(a, b)
    assert [(r["base_rank"], r["new_rank"]) for r in dd["ranks"]] == [(0, 0), (1, 1)]
    for rk, ra, rb in zip(dd["ranks"], a["ranks"], b["ranks"]):
        check_rank(rk, ra, rb)
    check_findings(dd, a, b)
    assert "sync-every-microstep" in {e["id"] for e in dd["findings"]["disappeared"]}


# ----------------------------------------------------------------------------------------------------------------
# CLI


@pytest.mark.slow
def test_cli_folders_and_saved_report(tmp_path, control_test, capsys):
    a, b = control_test
    saved = tmp_path / "control.json"
    assert main(["report", str(DIFF_CONTROL), "--json", str(saved), "-q", "--no-cache", "--workers", "1"]) == 0
    capsys.readouterr()
    out = tmp_path / "diff.json"
    rc = main(["diff", str(saved), str(DIFF_TEST), "--pair", "3:1", "--json", str(out), "--no-cache",
               "--workers", "1"])
    text = capsys.readouterr().out
    assert rc == 0
    dd = json.loads(out.read_text())
    ref = diff_reports(json.loads(saved.read_text()), b, pairs=[(3, 1)])
    assert dd["ranks"] == json.loads(json.dumps(ref["ranks"]))
    assert dd["findings"] == json.loads(json.dumps(ref["findings"]))
    assert "Base rank 3 vs new rank 1" in text and "Noise rule" in text and "slower" in text
    # --json - prints only the JSON
    assert main(["diff", str(saved), str(saved), "--json", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["base"]["source"] == a["source"]


@pytest.mark.parametrize("case", ["missing", "bad_json", "wrong_schema", "bad_pair", "unknown_rank", "not_traces"])
def test_cli_bad_input_is_one_line_exit_2(tmp_path, capsys, case):
    good = tmp_path / "good.json"
    good.write_text(json.dumps(analyzed(synthetic_cpu_run(tmp_path / "syn"))[2]))
    args = {
        "missing": [str(tmp_path / "nope"), str(good)],
        "bad_json": [str(_write(tmp_path / "report.json", '{"schema": "traceinspect.report/1", "ranks": [')), str(good)],
        "wrong_schema": [str(good), str(_write(tmp_path / "other.json", '{"schema": "traceinspect.report/9", "ranks": []}'))],
        "bad_pair": [str(good), str(good), "--pair", "0-1"],
        "unknown_rank": [str(good), str(good), "--pair", "5:0"],
        "not_traces": [str(good), str(_empty_dir(tmp_path / "empty"))],
    }[case]
    rc = main(["diff", *args])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert err.count("\n") == 1 and err.startswith("traceinspect: ") and "Traceback" not in err


def _write(p, text):
    p.write_text(text)
    return p


def _empty_dir(p):
    p.mkdir()
    return p
