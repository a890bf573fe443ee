"""The README's sample report, its rules table and the demo's time bounds are what the tool prints now
(``scripts/readme_samples.py`` makes them; ``--update`` rewrites them), as docs/findings.md's tables are the rule
declarations' (tests/diagnose/test_rule_contract.py); and the numbers its prose quotes around the sample are the
reports' own."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

import traceinspect
from traceinspect.config import Config
from traceinspect.render import format as fmt

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("readme_samples", ROOT / "scripts" / "readme_samples.py")
samples = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(samples)
STALE = "README.md is stale: python scripts/readme_samples.py --update"


@pytest.fixture(scope="module")
def readme() -> str:
    return (ROOT / "README.md").read_text()


@pytest.fixture(scope="module")
def baseline() -> dict:
    return samples.sample_document()


def test_sample_report_is_the_tools(readme, baseline):
    assert samples.part(readme, "sample report") == samples.sample_report(baseline), STALE


def test_rules_table_is_the_tools(readme):
    table = samples.part(readme, "rules table")
    assert table == samples.rules_table(), STALE
    printed = subprocess.run([sys.executable, "-m", "traceinspect", "rules"], capture_output=True, text=True,
                             cwd=ROOT, timeout=120).stdout
    ids = [line.split()[0] for line in printed.splitlines() if line.strip()]
    assert ids and [row.split("`")[1] for row in table.splitlines()[2:]] == ids  # every rule `rules` lists, in order


def test_demo_time_is_the_demos_bounds(readme):
    assert samples.part(readme, "demo time") == samples.demo_time(), STALE
    assert "about a minute" not in readme


def test_prose_around_the_sample_quotes_the_reports(readme, baseline):
    optimized = traceinspect.report_folder(str(ROOT / "fixtures" / "gpu" / "big_optimized"),
                                           Config(workers=1)).to_dict()
    step = optimized["ranks"][0]["step_us"]
    projected = baseline["ranks"][0]["projected_step_us"]
    prose = " ".join(readme.split())
    assert f"runs the same step in {step / 1000:.1f} ms" in prose
    assert f"close to the ~{projected / 1000:.0f} ms the verdict projects" in prose
    assert fmt.ms(projected) in samples.part(readme, "sample report")


def test_check_mode_passes_on_a_current_readme():
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "readme_samples.py")], capture_output=True, text=True,
                       cwd=ROOT, timeout=300)
    assert p.returncode == 0, p.stderr


def test_no_readme_command_names_an_unpublished_package(readme):
    """traceinspect is installed from a clone (``pip install .``): it is not on PyPI."""
    assert "pip install traceinspect" not in readme and "pip install 'traceinspect[" not in readme
    assert "pip install ." in readme and "source .venv/bin/activate" in readme


def test_setup_never_asks_pypi_for_a_plain_torch():
    """setup.sh installs torch's CPU build by its local version label (``+cpu``), from pip's sources or PyTorch's
    CPU index: a plain ``torch==X`` from PyPI is the CUDA build with gigabytes of NVIDIA wheels."""
    script = (ROOT / "scripts" / "setup.sh").read_text()
    installs = [line for line in script.splitlines() if "pip install" in line and "torch" in line
                and not line.lstrip().startswith("#")]
    assert installs and all("+cpu" in line for line in installs), installs
    assert "https://download.pytorch.org/whl/cpu" in script and "TRACEINSPECT_TORCH" in script
