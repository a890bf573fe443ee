"""No fix contradicts the setup of the run it is about, on every fixture and public trace (and CPU captures made
now): the same optimizer class, nothing already on, no GPU advice on CPU runs, no more workers than cores, no DDP
advice without DDP; launch-bound only where the GPU waited for launches."""

from __future__ import annotations

from pathlib import Path

import pytest

from traceinspect.config import DEFAULT, Config
from traceinspect.run import report_folder

from fix_checks import contradictions
from sweeps import FOLDERS

ROOT = Path(__file__).resolve().parents[2]
PUBLIC = ROOT.parent / "shared" / "traces" / "public"
CACHED = Config(workers=1)


def _check(rep: dict) -> None:
    setups = {r["rank"]: r.get("setup") for r in rep["ranks"]}
    for f in rep["findings"]:
        for rank in f["ranks"][:1] or []:  # the fix is the first rank's (the rank the title names)
            setup = setups.get(f.get("claim_rank", rank)) or setups.get(rank)
            if setup is None:
                continue
            bad = contradictions(f["fix"], setup)
            assert not bad, (f["id"], bad, f["fix"])


def _launch_waited(rep: dict) -> None:
    """launch-bound fires only on ranks whose steps' launch overhead (idle_launch_us) reaches its threshold."""
    for f in rep["findings"]:
        if f["id"] != "launch-bound":
            continue
        for rank in f["ranks"]:
            (rd,) = [r for r in rep["ranks"] if r["rank"] == rank]
            steps = {s["step"]: s for s in rd["steps"]}
            for sid in (x for x in f["steps"] if x in steps):
                s = steps[sid]
                assert s["idle_launch_us"] >= DEFAULT.launch_bound_idle_share * s["wall_us"] - 1e-6, sid


@pytest.mark.slow  # a sweep over every trace at hand
@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_no_fix_contradicts_the_setup(folder):
    rep = report_folder(folder, CACHED).to_dict()
    _check(rep)
    _launch_waited(rep)


@pytest.mark.parametrize("name", ["cpu_clean_run", "cpu_baseline_run", "cpu_slow_loader_run"])
def test_no_fix_contradicts_the_setup_on_cpu_captures(name, request):
    rep = report_folder(request.getfixturevalue(name), CACHED).to_dict()
    assert all(r["setup"]["device"] == "cpu" for r in rep["ranks"])
    _check(rep)


def test_a_cpu_loader_fix_is_sized_by_the_recorded_cores():
    """A CPU-only run's loader fixes: within the cores the capture recorded (2 here: one stays with the loop), and
    no rule of thumb per GPU, whether the cores were recorded or not."""
    from traceinspect.diagnose.fixes import loader_workers

    assert loader_workers(0, 2, "cpu").startswith("num_workers=1,") and loader_workers(2, 2, "cpu") is None
    assert "per GPU" not in loader_workers(0, None, "cpu") and "per GPU" in loader_workers(0, None, "cuda")
    assert contradictions("loader = DataLoader(ds, num_workers=4)", {**_CPU_SETUP, "cpu_count": 2})
    assert contradictions("loader = DataLoader(ds, num_workers=8,   # ~ CPU cores per GPU", _CPU_SETUP)


_CPU_SETUP = {"optimizer": {"present": False}, "compile": {"compiled": False, "mode": None}, "graph_launches": 0,
              "device": "cpu", "loader": {"pin_memory": None}, "copies": {"h2d_pinned_count": None},
              "cpu_count": None, "parallelism": "none"}


def test_the_check_catches_template_fixes():
    """The contradictions the old templates made, on real setups: the check is not vacuous."""
    rep = report_folder(ROOT / "fixtures" / "gpu_pairs" / "s2_small_compiled", CACHED).to_dict()
    s = rep["ranks"][0]["setup"]
    old = 'model = torch.compile(model)   # or mode="reduce-overhead" for CUDA graphs\n' \
          "opt = torch.optim.AdamW(params, fused=True)\nloader = DataLoader(ds, pin_memory=True)"
    assert len(contradictions(old, s)) == 3
    rep = report_folder(PUBLIC / "hta_mi250_rocm", CACHED).to_dict() if PUBLIC.exists() else None
    if rep:
        assert contradictions("opt = torch.optim.AdamW(params, fused=True)", rep["ranks"][0]["setup"])
