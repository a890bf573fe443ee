"""The batch x accumulation trade-off and the cost figures (docs/metrics.md), against real captures.

Recorded CPU captures of the reference workload at the same logical batch as (32 x 2) and (64 x 1) micro-batches
under ``no_sync`` (fixtures/cpu_tradeoff): the table predicted from one capture gives the other's step within 15 %
or the steps' own noise (three standard errors of both means), whichever is larger. Recorded, not captured in the
test: a capture taken while other processes compete for the cores measures their scheduling, not the model. The cost figures are checked against the arithmetic
done here from the report's own step times and batch.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from traceinspect.config import Config
from traceinspect.run import report_folder

NOCACHE = Config(use_cache=False, workers=1)
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def _pair(batch: int, accum: int) -> dict:
    """One of the recorded CPU accumulation pair (fixtures/cpu_tradeoff, README there): the same logical batch of
    64 as 32 x 2 and 64 x 1, captured one after the other on a quiet 2-core machine."""
    return report_folder(str(FIXTURES / "cpu_tradeoff" / f"b{batch}x{accum}"), NOCACHE).to_dict()


def _walls(d: dict) -> np.ndarray:
    return np.array([s["wall_us"] for s in d["ranks"][0]["steps"]], float)


def test_predicted_time_of_the_other_accumulation_pair():
    a = _pair(32, 2)
    b = _pair(64, 1)
    for src, dst, batch in ((a, b, 64), (b, a, 32)):
        rows = {r["batch"]: r for r in src["ranks"][0]["tradeoff"]}
        assert rows[batch]["accum_steps"] * batch == 64
        measured = _walls(dst)
        se = math.sqrt(_walls(src).var(ddof=1) / len(_walls(src)) + measured.var(ddof=1) / len(measured))
        tol = max(0.15 * measured.mean(), 3 * se)
        assert abs(rows[batch]["step_ms"] * 1000 - measured.mean()) <= tol, (rows[batch]["step_ms"], measured.mean())
        cur = [r for r in src["ranks"][0]["tradeoff"] if r["current"]]
        assert len(cur) == 1 and math.isclose(cur[0]["step_ms"] * 1000, _walls(src).mean(), rel_tol=1e-6)


def test_cost_is_step_time_over_samples(tmp_path):
    folder = FIXTURES / "gpu" / "big_baseline"
    d = report_folder(str(folder), NOCACHE.with_overrides(gpu_hour_price=2.5)).to_dict()
    r = d["ranks"][0]
    t = r["throughput"]
    samples = t["batch"] * t["accum_steps"]
    assert samples == r["metadata"]["dataloader"]["batch_size"] * r["metadata"]["accumulation_steps"]
    hours = r["step_us"] / 1e6 / samples * 1e6 / 3600
    assert math.isclose(r["cost"]["gpu_hours_per_million_samples"], hours, rel_tol=1e-9)
    assert math.isclose(r["cost"]["projected_gpu_hours_per_million_samples"],
                        r["projected_step_us"] / 1e6 / samples * 1e6 / 3600, rel_tol=1e-9)
    assert math.isclose(r["cost"]["cost_per_million_samples"], 2.5 * hours, rel_tol=1e-9)
    for f in d["findings"]:
        if f.get("time_at_stake_us"):
            assert math.isclose(f["gpu_hours_per_million_samples"],
                                f["time_at_stake_us"] / 1e6 / samples * 1e6 / 3600, rel_tol=1e-9)
    plain = report_folder(str(folder), NOCACHE).to_dict()
    assert plain["ranks"][0]["cost"]["cost_per_million_samples"] is None  # no price assumed
    assert not [f for f in plain["findings"] if "cost_per_million_samples" in f]


@pytest.mark.slow
def test_no_row_the_memory_outlook_says_will_not_fit():
    """On every fixture and memory capture that has a trade-off table: no row predicted not to fit, one current
    row, at most one best, and every row keeps the logical batch."""
    seen = 0
    folders = {p.parent for sub in ("gpu", "gpu_memory") for p in (FIXTURES / sub).rglob("*.pt.trace.json*")}
    for folder in sorted(folders):
        d = report_folder(str(folder), NOCACHE).to_dict()
        for r in d["ranks"]:
            rows = r.get("tradeoff") or []
            if not rows:
                continue
            seen += 1
            logical = r["tradeoff_model"]["logical_batch"]
            assert all(x["batch"] * x["accum_steps"] == logical for x in rows)
            assert all(x["fits"] is not False or x["current"] for x in rows)
            assert sum(x["current"] for x in rows) == 1 and sum(x["best"] for x in rows) <= 1
            mem = r.get("memory")
            if mem and mem.get("max_batch_predicted") is not None:
                assert all(x["batch"] <= max(mem["max_batch_predicted"], mem["batch_size"]) for x in rows)
    assert seen


def _gpu_diff(name: str) -> dict:
    return report_folder(str(FIXTURES / "gpu_diff" / name), NOCACHE).to_dict()


@pytest.mark.slow  # the claims against the savings measured on the precision pairs
def test_bf16_rows_agree_with_the_precision_claim_and_the_measured_switch():
    """An fp32 run (fixtures/gpu_diff: a transformer at batch 64, fp32 and bf16 autocast, three captures of each)
    gets bf16 rows: at its own batch the row is the step less the no-mixed-precision claim (one number on the page),
    and the saving it projects is within 30 % of what the bf16 captures measured. A bf16 run gets none."""
    d = _gpu_diff("gpu_fp32")
    r = d["ranks"][0]
    rows = r["tradeoff"]
    recorded = {(o["batch"], o["accum_steps"]): o for o in rows if "precision" not in o}
    bf16 = {(o["batch"], o["accum_steps"]): o for o in rows if o.get("precision") == "bf16"}
    assert set(bf16) == set(recorded)
    assert all(o["peak_bytes"] is None and o["fits"] is None and not o["best"] and not o["current"]
               for o in bf16.values())
    (now,) = [k for k, o in recorded.items() if o["current"]]
    claim = next(c["us"] for c in r["claims"] if c["id"] == "no-mixed-precision")
    assert bf16[now]["step_ms"] * 1000 == pytest.approx(recorded[now]["step_ms"] * 1000 - claim, rel=1e-9)
    fp32 = np.mean([_walls(_gpu_diff(n)).mean() for n in ("gpu_fp32", "gpu_fp32_b", "gpu_fp32_c")])
    half = np.mean([_walls(_gpu_diff(n)).mean() for n in ("gpu_a", "gpu_b", "gpu_c")])
    projected = (recorded[now]["step_ms"] - bf16[now]["step_ms"]) * 1000
    assert projected == pytest.approx(fp32 - half, rel=0.30), (projected, fp32 - half)
    assert not any(o.get("precision") for o in _gpu_diff("gpu_a")["ranks"][0]["tradeoff"])
