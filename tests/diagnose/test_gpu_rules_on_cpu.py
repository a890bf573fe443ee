"""CPU captures (gloo, made once per session): no crash, and the GPU rules say nothing."""

from __future__ import annotations

import pytest

from gpu_fixtures import report


@pytest.mark.parametrize("run", ["cpu_baseline_run", "cpu_clean_run"])
def test_gpu_rules_quiet_on_cpu_traces(run, request):
    rep = report(request.getfixturevalue(run))
    assert not rep.errors
    ids = {f.id for f in rep.findings}
    assert not ids & {"no-mixed-precision", "gradscaler-with-bf16", "launch-bound", "tensor-core-alignment"}
