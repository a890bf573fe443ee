"""notebooks/walkthrough.ipynb: committed without outputs, and it runs top to bottom (nbclient, a real kernel)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from public_traces import DIFF_CONTROL, need

pytestmark = pytest.mark.slow  # executes the walkthrough notebook in a kernel

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "walkthrough.ipynb"
GPU_FIXTURE = NOTEBOOK.parents[1] / "fixtures" / "gpu" / "baseline"

nbformat = pytest.importorskip("nbformat", reason="pip install 'traceinspect[notebook]'")


def test_committed_without_outputs():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code
    for c in code:
        assert c.outputs == [] and c.execution_count is None, c.source[:60]
    assert nb.metadata["kernelspec"]["name"] == "python3"


def test_runs_top_to_bottom():
    nbclient = pytest.importorskip("nbclient", reason="pip install 'traceinspect[notebook]'")
    pytest.importorskip("ipykernel", reason="pip install 'traceinspect[notebook]'")
    env_traces = os.environ.get("TRACEINSPECT_TRACES")
    if not env_traces and not any(GPU_FIXTURE.glob("*.json*")):
        need(DIFF_CONTROL)  # the notebook's last fallback
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=240, kernel_name="python3",
                                     resources={"metadata": {"path": str(NOTEBOOK.parent)}})
    client.execute()  # raises CellExecutionError on the first failing cell
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "\n".join(o.get("text", "") if o.output_type == "stream" else o.get("data", {}).get("text/plain", "")
                     for o in outputs)
    assert "rank(s) loaded" in text and "step " in text and "significant changes against itself: 0" in text
    images = [o for o in outputs if o.output_type == "display_data" and "image/png" in o.get("data", {})]
    assert images, "the plots are shown inline"


def test_api_of_the_walkthrough_warns_nothing():
    """What the notebook calls (report.steps, report.table) makes no warning from our code (pandas'
    PerformanceWarning for a fragmented frame was the first thing a notebook run printed)."""
    import warnings

    import traceinspect
    from traceinspect.config import Config

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report = traceinspect.report_folder(str(GPU_FIXTURE), Config(workers=1, use_cache=False)).analysis
        assert len(report.steps) and "rank" in report.steps
        assert "rank" in report.table("collectives")
