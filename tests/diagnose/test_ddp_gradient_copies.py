"""ddp-gradient-copies against its measured fix: the same DDP job captured here on 2 CPU ranks (gloo, host memory
events) with ``gradient_as_bucket_view`` off and on. The finding on the first claims the bytes of peak memory that
the second does not need; the second is quiet."""

from __future__ import annotations

import pytest

from traceinspect.config import Config
from traceinspect.run import report_folder

# the rule's default floor is sized for a GPU; these CPU gradients are a few MB
CFG = Config(use_cache=False, workers=1).with_overrides(ddp_gradient_copies_min_bytes=1 << 20)
KNOBS = {"num_workers": 0, "accum_steps": 1, "probe_loader": False, "mlp_hidden": 1024}


def _capture(factory, bucket_view: bool):
    return factory(preset="optimized", nproc=2, profile_memory=True,
                   overrides={**KNOBS, "gradient_as_bucket_view": bucket_view})


@pytest.fixture(scope="module")
def pair(cpu_capture_factory):
    return [report_folder(str(_capture(cpu_capture_factory, v)), CFG).to_dict() for v in (False, True)]


def test_the_claim_is_what_bucket_views_save(pair):
    off, on = pair
    (f,) = [f for f in off["findings"] if f["id"] == "ddp-gradient-copies"]
    assert not [f for f in on["findings"] if f["id"] == "ddp-gradient-copies"]
    for ev in f["evidence"]["per_rank"]:
        peak_off = off["ranks"][ev["rank"]]["memory"]["peak_allocated_bytes"]
        peak_on = on["ranks"][ev["rank"]]["memory"]["peak_allocated_bytes"]
        assert ev["peak_allocated_bytes"] == peak_off
        saved = peak_off - peak_on  # measured: the same job with only the bucket views changed
        assert saved > 0
        assert abs((ev["peak_allocated_bytes"] - ev["peak_without_copies_bytes"]) - saved) <= 0.10 * saved
    assert "gradient_as_bucket_view=True" in f["fix"]
