"""The DataLoader's configuration is work, not rate: a loop whose batches move from worker processes onto its own
thread trips the regression gate, and repeats of an unchanged job still pass it (real CPU captures).

The planted effect: every sample sleeps ``DELAY_MS`` in ``__getitem__`` (8 samples a batch, 4 batches a step: 160 ms
of loading a step). Fed by 2 workers the loop waits for what they have not prefetched; with ``num_workers=0`` it
makes every batch itself. Sleeping takes no core, so a busy host does not shrink the difference.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from traceinspect.report.diff_explain import loader_changed

DELAY_MS = 5.0
BATCHES, SAMPLES = 4, 8  # the optimized preset's accum_steps, the tests' batch size
KNOBS = {"item_delay_ms": DELAY_MS, "mlp_hidden": 256}


def _capture(factory, workers: int, seed: int = 0):
    return factory(preset="optimized", nproc=1, overrides={**KNOBS, "num_workers": workers, "seed": seed})


def _diff(tmp_path, base, new, *extra):
    out = tmp_path / f"d{len(list(tmp_path.glob('d*.json')))}.json"
    p = subprocess.run([sys.executable, "-m", "traceinspect", "diff", str(base), str(new), "--fail-on-regression",
                        "5", "--cache-dir", str(tmp_path / "cache"), "--json", str(out), *extra],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode in (0, 1), p.stderr
    return p.returncode, json.loads(out.read_text()), p.stdout


@pytest.fixture(scope="module")
def loader_runs(cpu_capture_factory):
    pytest.importorskip("torch")
    return {"fed": _capture(cpu_capture_factory, 2), "fed_again": _capture(cpu_capture_factory, 2, seed=1),
            "starved": _capture(cpu_capture_factory, 0)}


def test_workers_to_none_is_a_code_change_that_trips_the_gate(loader_runs, tmp_path):
    rc, dd, text = _diff(tmp_path, loader_runs["fed"], loader_runs["starved"])
    assert rc == 1 and dd["gate"]["tripped"] and "work" in dd["gate"]["tripped_by"]
    assert dd["verdict"]["kind"] == "code" and "machine difference" not in dd["verdict"]["text"]
    rows = {r["key"]: r for r in dd["work"]}
    fetched = rows["dataloader_worker_count"]
    assert fetched["changed"] and fetched["base"] == BATCHES and fetched["new"] == 0
    assert rows["loader.num_workers"]["changed"] and (rows["loader.num_workers"]["base"], rows["loader.num_workers"]
                                                      ["new"]) == (2, 0)
    assert "DataLoader batches from worker processes 4 -> 0" in dd["verdict"]["text"]
    # priced by the wait it adds: the loading the loop now does itself, at least half the planted sleep
    cost = dd["verdict"]["work_cost"]
    assert cost["host_us"] >= 0.5 * BATCHES * SAMPLES * DELAY_MS * 1000 and "DataLoader" in cost["host_from"]
    assert "regression gate (5 %): TRIPPED" in text


def test_a_saved_report_as_the_base_still_sees_the_loader_change(loader_runs, tmp_path):
    saved = tmp_path / "fed.json"
    p = subprocess.run([sys.executable, "-m", "traceinspect", "report", str(loader_runs["fed"]), "--json",
                        str(saved), "--cache-dir", str(tmp_path / "cache"), "-q"], capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stderr
    rc, dd, _ = _diff(tmp_path, saved, loader_runs["starved"])
    assert dd["names"]["ops"]["available"] is False
    assert rc == 1 and "work" in dd["gate"]["tripped_by"] and loader_changed(dd["work"])


def test_repeats_of_an_unchanged_loader_pass_and_the_fix_is_no_regression(loader_runs, tmp_path):
    for a, b in (("fed", "fed_again"), ("fed_again", "fed")):
        rc, dd, _ = _diff(tmp_path, loader_runs[a], loader_runs[b])
        assert rc == 0 and not dd["gate"]["tripped"], dd["gate"]["reasons"]
        assert not loader_changed(dd["work"]) and dd["verdict"]["kind"] in ("none", "machine")
    # workers back: the configuration changed (code), and at the base's rates it saves time: not a regression
    rc, dd, _ = _diff(tmp_path, loader_runs["starved"], loader_runs["fed"])
    assert rc == 0 and dd["verdict"]["kind"] == "code" and dd["verdict"]["work_cost"]["us"] < 0


def _pair_diff(base: str, new: str) -> dict:
    from pathlib import Path

    from traceinspect.cli.diff_sides import inventory
    from traceinspect.config import Config
    from traceinspect.report.diff_runs import diff_runs
    from traceinspect.run import report_folder

    pairs = Path(__file__).resolve().parents[2] / "fixtures" / "gpu_pairs"
    a, b = (report_folder(pairs / n, Config(use_cache=False)) for n in (base, new))
    return diff_runs([a.to_dict()], [b.to_dict()], inventories=([inventory(a)], [inventory(b)]),
                     fail_on_regression=5.0)


@pytest.mark.slow
def test_the_h200_loader_pair_trips_and_more_workers_is_no_regression():
    """fixtures/gpu_pairs: loader_fed (8 workers) against loader_starved (none, the same transform): the step
    +170 %, once passed as "the host waited for the DataLoader longer: a machine difference"; s2_big_clean (8
    workers) against s2_big_fed (14): a configuration change that saves time."""
    dd = _pair_diff("loader_fed", "loader_starved")
    assert dd["verdict"]["kind"] == "code" and dd["gate"]["tripped"] and "work" in dd["gate"]["tripped_by"]
    rows = {r["key"]: r for r in dd["work"]}
    assert (rows["loader.num_workers"]["base"], rows["loader.num_workers"]["new"]) == (8, 0)
    assert rows["dataloader_worker_count"]["changed"] and not rows["loader.pin_memory"]["changed"]
    more = _pair_diff("s2_big_clean", "s2_big_fed")
    assert more["verdict"]["kind"] == "code" and not more["gate"]["tripped"]
    assert {r["key"] for r in more["work"] if r["changed"]} == {"loader.num_workers"}
