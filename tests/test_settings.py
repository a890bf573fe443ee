"""Thresholds from the command line (``--set NAME=VALUE``): typed, validated, one-line errors, shown by ``explain``,
and they change the report (on a real trace) and the cache key."""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from pathlib import Path

import pytest

from traceinspect.cli.main import main
from traceinspect.config import REMOVED, Config, parse_setting, reason, thresholds
from traceinspect.diagnose import all_rules, thresholds_of
from traceinspect.errors import UsageError

from public_traces import DIFF_CONTROL, need


def test_values_are_typed():
    assert parse_setting("host_sync_share_warning=0.05") == ("host_sync_share_warning", 0.05)
    assert parse_setting(" small_bucket_min_count = 12 ") == ("small_bucket_min_count", 12)
    assert parse_setting("small_bucket_bytes=4_194_304") == ("small_bucket_bytes", 4194304)
    cfg = Config().with_settings(["host_sync_share_warning=0.5", "launch_bound_min_kernels=3"])
    assert (cfg.host_sync_share_warning, cfg.launch_bound_min_kernels) == (0.5, 3)
    assert isinstance(cfg.launch_bound_min_kernels, int)


@pytest.mark.parametrize("text, why", [
    ("nope=1", "unknown setting"),
    ("workers=3", "unknown setting"),  # how to run is not a threshold: --workers
    ("host_sync_share_warning", "expected NAME=VALUE"),
    ("host_sync_share_warning=abc", "expected a float"),
    ("small_bucket_min_count=2.5", "expected an int"),
    ("host_sync_share_warning=1.5", "between 0 and 1"),
    ("straggler_min_skew_us=-1", ">= 0"),
    ("util_window_us=0", "> 0"),
])
def test_bad_settings_are_one_line_errors(text, why, capsys):
    with pytest.raises(UsageError, match=re.escape(why)):
        parse_setting(text)
    assert main(["report", "whatever", "--set", text]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and why in err


# Read for every rule by the accounting (diagnose/accounting.py, bounds.py, severity.py): the severity scale and the
# bounds of a faster step. By the analyses: the kernel and nvidia-smi views.
SHARED = {"severity_critical_share", "severity_critical_min_us", "severity_warning_share", "severity_warning_min_us",
          "severity_noise_se", "thin_evidence_min_steps", "thin_evidence_min_collectives", "loader_paced_min_us",
          "loader_paced_min_share", "pin_thread_min_gbps"}
ANALYSES = {"short_kernel_us", "util_window_us"}
# By the report's cost figures (docs/metrics.md, "Cost").
REPORT = {"gpu_hour_price"}


def test_every_threshold_is_declared_by_a_rule_or_shared():
    declared = {n for r in all_rules() for n in thresholds_of(r)}
    assert {f.name for f in thresholds()} == declared | SHARED | ANALYSES | REPORT
    assert not declared & SHARED
    here = Path(__file__).resolve().parents[1] / "traceinspect" / "diagnose"
    src = "".join((here / f).read_text() for f in ("accounting.py", "bounds.py", "severity.py"))
    # bounds.py also holds autocast_cpu_us, the claim helper no-mixed-precision declares (autocast_casts_per_gemm)
    assert set(re.findall(r"config\.([a-z_0-9]+)", src)) == SHARED | {"autocast_casts_per_gemm"}


@pytest.mark.parametrize("rule", all_rules(), ids=lambda r: r.id)
def test_a_rule_declares_every_setting_its_module_reads(rule):
    src = Path(sys.modules[rule.check.__module__].__file__).read_text()
    assert set(re.findall(r"\bconfig\.([a-z_0-9]+)", src)) <= set(thresholds_of(rule))
    assert all(reason(n) for n in thresholds_of(rule)), "every threshold says why"


def test_explain_shows_the_thresholds_a_rule_declares_with_current_values(capsys):
    assert main(["explain", "pageable-memcpy", "--set", "pinned_h2d_gbps_assumed=12.5"]) == 0
    out = capsys.readouterr().out
    assert "pinned_h2d_gbps_assumed = 12.5 (default 25.0)" in out  # a claim's setting, not only the detection's
    assert f"pageable_min_bytes_per_step = {Config().pageable_min_bytes_per_step}" in out
    assert reason("pinned_h2d_gbps_assumed").split()[0] in out
    assert "host_sync_share_warning" not in out  # not read by this rule


@pytest.mark.parametrize("name", sorted(REMOVED))
def test_a_removed_setting_is_one_line_naming_its_replacement_exit_2(name, capsys):
    assert name not in {f.name for f in dataclasses.fields(Config)}
    assert main(["report", "whatever", "--set", f"{name}=0.5"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and name in err and "removed" in err
    if name.endswith("_critical"):
        assert "severity_critical_share" in err
    with pytest.raises(UsageError, match="removed"):
        Config().with_overrides(**{name: 0.5})


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
                 "--set", "host_sync_share_warning=0.9"]) == 0
    d2 = json.loads(raised.read_text())
    assert [f["severity"] for f in d2["findings"] if f["id"] == "host-sync"] in ([], ["info"])
    others = lambda doc: [(f["id"], f["severity"]) for f in doc["findings"] if f["id"] != "host-sync"]  # noqa: E731
    assert others(d2) == others(d)


def test_config_has_no_settings_without_a_reason():
    from traceinspect.config import field_comments

    notes = field_comments()
    assert all(reason(f.name) or notes.get(f.name) for f in dataclasses.fields(Config)), "every setting says why"
    assert all(reason(f.name) for f in thresholds() if f.name not in ANALYSES | {"util_window_us"})
