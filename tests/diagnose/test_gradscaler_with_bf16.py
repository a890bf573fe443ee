"""gradscaler-with-bf16 on real traces: quiet without a scaler (public A100 and H100 runs) and on the fp16 and
bf16-without-scaler H200 fixtures; the bf16 + GradScaler fixture fires with the scaler's ops per step counted in the
raw JSON."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from _real import finding
from gpu_fixtures import gpu_fixture, report
from public_traces import BERT, DIFF_CONTROL, need, raw_events


@pytest.mark.parametrize("folder", [DIFF_CONTROL, BERT], ids=lambda p: p.name)
def test_gradscaler_quiet_without_scaler(folder):
    need(folder)
    assert len(report(folder).ranks[0].tables["amp_ops"]) == 0
    assert finding(report(folder), "gradscaler-with-bf16") is None


def test_gradscaler_fires_on_bf16_fixture():
    folder = gpu_fixture(amp="bf16", grad_scaler="on")
    rep = report(folder)
    f = finding(rep, "gradscaler-with-bf16")
    assert f is not None
    for r, ra in zip(f.evidence["per_rank"], rep.ranks):
        raw = [e for p in ra.files for e in raw_events(Path(p))["traceEvents"]]
        n_steps = sum(1 for e in raw if e.get("cat") == "user_annotation" and re.fullmatch(r"ProfilerStep#\d+", e["name"]))
        n_unscale = sum(1 for e in raw if e.get("cat") == "cpu_op"
                        and e["name"] == "aten::_amp_foreach_non_finite_check_and_unscale_")
        ops = r["scaler_ops_per_step"]
        assert ops["aten::_amp_foreach_non_finite_check_and_unscale_"]["count"] == pytest.approx(n_unscale / n_steps)
        assert r["fp16_matmul_us_per_step"] == 0 and r["bf16_matmul_us_per_step"] > 0


@pytest.mark.parametrize("knobs", [{"amp": "fp16"}, {"amp": "bf16", "grad_scaler": "auto"}], ids=["fp16", "bf16-no-scaler"])
def test_gradscaler_quiet_on_fixture(knobs):
    assert finding(report(gpu_fixture(**knobs)), "gradscaler-with-bf16") is None
