"""Thresholds from the command line (``--set NAME=VALUE``): typed, validated, one-line errors, shown by ``explain``,
and they change the report (on a real trace) and the cache key."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from traceinspect.cli.main import main
from traceinspect.config import Config, parse_setting, thresholds
from traceinspect.diagnose import all_rules, thresholds_of
from traceinspect.errors import UsageError

from public_traces import DIFF_CONTROL, need


def test_values_are_typed():
    assert parse_setting("pageable_share_warning=0.05") == ("pageable_share_warning", 0.05)
    assert parse_setting(" small_bucket_min_count = 12 ") == ("small_bucket_min_count", 12)
    assert parse_setting("ddp_bucket_cap_bytes=26_214_400") == ("ddp_bucket_cap_bytes", 26214400)
    cfg = Config().with_settings(["host_sync_share_warning=0.5", "launch_bound_min_kernels=3"])
    assert (cfg.host_sync_share_warning, cfg.launch_bound_min_kernels) == (0.5, 3)
    assert isinstance(cfg.launch_bound_min_kernels, int)


@pytest.mark.parametrize("text, why", [
    ("nope=1", "unknown setting"),
    ("workers=3", "unknown setting"),  # how to run is not a threshold: --workers
    ("pageable_share_warning", "expected NAME=VALUE"),
    ("pageable_share_warning=abc", "expected a float"),
    ("small_bucket_min_count=2.5", "expected an int"),
    ("pageable_share_warning=1.5", "between 0 and 1"),
    ("straggler_min_skew_us=-1", ">= 0"),
    ("util_window_us=0", "> 0"),
])
def test_bad_settings_are_one_line_errors(text, why, capsys):
    with pytest.raises(UsageError, match=re.escape(why)):
        parse_setting(text)
    assert main(["report", "whatever", "--set", text]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and why in err


def test_every_threshold_is_read_by_some_rule_or_analysis():
    # The accounting (diagnose/accounting.py, with its bounds.py and severity.py) reads the severity scale for
    # every rule and the bounds of a faster step.
    accounting = {"severity_critical_share", "severity_critical_min_us", "severity_warning_share",
                  "severity_warning_min_us", "severity_noise_se", "thin_evidence_min_steps",
                  "thin_evidence_min_collectives", "pinned_h2d_gbps_assumed", "loader_paced_min_us",
                  "loader_paced_min_share", "autocast_casts_per_gemm", "pin_thread_min_gbps"}
    here = Path(__file__).resolve().parents[1] / "traceinspect" / "diagnose"
    src = "".join((here / f).read_text() for f in ("accounting.py", "bounds.py", "severity.py"))
    assert accounting == set(re.findall(r"config\.([a-z_0-9]+)", src))
    read = {n for r in all_rules() for n in thresholds_of(r)} | {"short_kernel_us", "util_window_us"} | accounting
    assert {f.name for f in thresholds()} == read


def test_explain_shows_the_thresholds_a_rule_reads_with_current_values(capsys):
    assert main(["explain", "pageable-memcpy", "--set", "pageable_share_warning=0.05"]) == 0
    out = capsys.readouterr().out
    assert "pageable_share_warning = 0.05 (default 0.02)" in out
    assert f"pageable_min_bytes_per_step = {Config().pageable_min_bytes_per_step}" in out
    assert "host_sync_share_warning" not in out  # not read by this rule
    src = open(all_rules()[0].__file__).read()
    assert set(thresholds_of(all_rules()[0])) == set(re.findall(r"config\.([a-z_0-9]+)", src))


def test_set_changes_the_report(tmp_path):
    """The public control run has a host-sync finding; with its threshold raised above the measured share it
    goes, and nothing else changes."""
    need(DIFF_CONTROL)
    base, raised = tmp_path / "a.json", tmp_path / "b.json"
    cache = str(tmp_path / "cache")
    assert main(["report", str(DIFF_CONTROL), "--json", str(base), "-q", "--cache-dir", cache]) == 0
    d = json.loads(base.read_text())
    hs = [f for f in d["findings"] if f["id"] == "host-sync"]
    assert hs and hs[0]["evidence"]["per_rank"][0]["share_of_step"] < 0.9
    assert main(["report", str(DIFF_CONTROL), "--json", str(raised), "-q", "--cache-dir", cache,
                 "--set", "host_sync_share_warning=0.9", "--set", "host_sync_share_critical=0.95"]) == 0
    d2 = json.loads(raised.read_text())
    assert [f["severity"] for f in d2["findings"] if f["id"] == "host-sync"] in ([], ["info"])
    others = lambda doc: [(f["id"], f["severity"]) for f in doc["findings"] if f["id"] != "host-sync"]  # noqa: E731
    assert others(d2) == others(d)


def test_config_has_no_settings_without_a_comment():
    from traceinspect.config import field_comments

    notes = field_comments()
    assert all(notes.get(f.name) for f in dataclasses.fields(Config)), "every setting says why"
