"""``traceinspect diff`` with several captures a side, the regression gate's exit code, a saved report.json as
the baseline, the typed JSON and its schema, and names from traces rendered as data (real H200 fixtures)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
import subprocess
import sys

import jsonschema
import pytest

from gpu_diff_fixtures import FIXTURES, diff_of

from traceinspect.render.diff_pages import render_diff_html, render_diff_markdown
from traceinspect.render.diff_work_text import render_work_rate_text
from traceinspect.report.diff_doc import diff_json_schema


def cli(*args):
    return subprocess.run([sys.executable, "-m", "traceinspect", *map(str, args)], capture_output=True, text=True,
                          timeout=600)


@pytest.mark.slow  # a dozen reports and diffs on the command line
def test_gate_exit_codes_with_several_captures_and_a_saved_baseline(tmp_path):
    cache = tmp_path / "cache"
    f = lambda n: FIXTURES / n  # noqa: E731
    tripped = cli("diff", f("gpu_a"), f("gpu_b"), "--", f("gpu_single"), "--fail-on-regression", "5",
                  "--cache-dir", cache, "--json", tmp_path / "d.json", "--markdown", tmp_path / "d.md",
                  "--html", tmp_path / "d.html")
    assert tripped.returncode == 1, tripped.stderr
    assert "regression gate (5 %): TRIPPED" in tripped.stdout and "the work changed" in tripped.stdout
    dd = json.loads((tmp_path / "d.json").read_text())
    assert dd["runs"]["measured"] is True and len(dd["runs"]["base"]) == 2 and dd["gate"]["tripped"] is True
    assert "<table>" in (tmp_path / "d.html").read_text() and "| work |" in (tmp_path / "d.md").read_text()
    machine = cli("diff", f("gpu_a"), f("gpu_b"), "--fail-on-regression", "5", "--cache-dir", cache)
    assert machine.returncode == 0 and "same work" in machine.stdout and "not measured" in machine.stdout
    counted = cli("diff", f("gpu_a"), f("gpu_b"), "--fail-on-regression", "5", "--count-machine", "--cache-dir", cache)
    assert counted.returncode == 1 and "TRIPPED" in counted.stdout
    # a saved report.json as the baseline: the work compared from its step fields (no names: not from traces)
    saved = tmp_path / "base.json"
    assert cli("report", f("gpu_a"), "--json", saved, "--cache-dir", cache, "-q").returncode == 0
    again = cli("diff", saved, f("gpu_single"), "--fail-on-regression", "5", "--cache-dir", cache, "--json", "-")
    assert again.returncode == 1, again.stderr
    d2 = json.loads(again.stdout)
    assert d2["names"]["kernels"]["available"] is False and d2["verdict"]["kind"] == "code"
    assert "regression gate" in again.stderr


@pytest.mark.slow
def test_the_gate_trips_on_the_work_cost_where_the_noise_across_runs_hides_the_step(tmp_path):
    f = lambda n: FIXTURES / n  # noqa: E731
    p = cli("diff", f("cpu_a"), f("cpu_b"), f("cpu_c"), "--", f("cpu_tiny"), "--fail-on-regression", "5",
            "--cache-dir", tmp_path / "cache", "--json", tmp_path / "d.json")
    assert p.returncode == 1, p.stderr
    assert "regression gate (5 %): TRIPPED" in p.stdout and "the work change costs" in p.stdout
    dd = json.loads((tmp_path / "d.json").read_text())
    assert dd["gate"]["tripped_by"] == ["work"] and dd["overall"]["significant"] is False
    assert dd["names"]["kernel_shapes"]["available"] is True
    jsonschema.validate(dd, diff_json_schema())


def test_usage_errors_are_one_line():
    p = cli("diff", FIXTURES / "gpu_a")
    assert p.returncode == 2 and "Traceback" not in p.stderr and "BASE NEW" in p.stderr
    p = cli("diff", FIXTURES / "gpu_a", FIXTURES / "gpu_b", "--count-machine")
    assert p.returncode == 2 and "--fail-on-regression" in p.stderr


@pytest.mark.slow
def test_diff_json_follows_its_schema():
    dd = diff_of(["cpu_a", "cpu_b"], ["cpu_single"])
    jsonschema.validate(json.loads(json.dumps(dd)), diff_json_schema())
    broken = copy.deepcopy(dd)
    broken["verdict"]["kind"] = "maybe"
    try:
        jsonschema.validate(json.loads(json.dumps(broken)), diff_json_schema())
    except jsonschema.ValidationError:
        pass
    else:
        raise AssertionError("a verdict kind outside the contract validated")


@pytest.mark.slow
def test_names_from_traces_are_data_in_every_page():
    dd = copy.deepcopy(diff_of(["gpu_a"], ["gpu_single"]))
    hostile = "<script>alert(1)</script>|`x`*\x1b[31m"
    dd["names"]["kernels"]["changed"][0]["name"] = hostile
    dd["verdict"]["text"] = hostile
    html, md, text = render_diff_html(dd), render_diff_markdown(dd), render_work_rate_text(dd)
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "\x1b" not in html + md + text
    assert "&lt;script" in md and "<script" not in md and "\\|" in md  # HTML as entities, a pipe escaped
    assert "<script>alert(1)</script>|`x`*?[31m" in text


def test_the_published_diff_schema_is_what_the_schema_command_prints():
    """docs/diff.schema.json equals `traceinspect schema --diff` (regenerate it when the diff's Structs change)."""
    from click.testing import CliRunner

    from traceinspect.cli.main import cli

    printed = CliRunner().invoke(cli, ["schema", "--diff"]).output
    published = (Path(__file__).parents[2] / "docs" / "diff.schema.json").read_text()
    assert printed == published
    assert json.loads(published)["title"] == "traceinspect.diff/1"
