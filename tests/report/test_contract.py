"""The JSON contract: msgspec Structs (report/doc.py), the published schema generated from them, the step-column
registry, and save/load of a report.json. Checked on real reports (H200 fixtures and the public traces)."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import jsonschema
import msgspec
import pytest

from traceinspect.analyze.attribution import CPU_CATEGORIES
from traceinspect.cli.main import main
from traceinspect.config import Config
from traceinspect.report import io as report_io
from traceinspect.report.columns import BY_NAME, HEAD_FIELDS, STEP_COLUMNS
from traceinspect.report.doc import ReportDoc, from_dict, to_dict
from traceinspect.run import report_folder

from public_traces import BERT, DDP_2RANK, DIFF_CONTROL, PUBLIC, need

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_FILE = ROOT / "docs" / "report.schema.json"
FOLDERS = [ROOT / "fixtures" / "gpu" / "big_baseline", ROOT / "fixtures" / "gpu_pairs" / "two_windows",
           DIFF_CONTROL, DDP_2RANK, BERT, PUBLIC / "hta_mi250_rocm", PUBLIC / "kineto_pt18_resnet50"]
NOCACHE = Config(use_cache=False, workers=1)


@functools.lru_cache(maxsize=None)
def _live(folder: Path):
    need(folder)
    return report_folder(folder, NOCACHE)


def test_published_schema_is_current():
    """docs/report.schema.json is what `traceinspect schema` prints (regenerate it when the Structs change)."""
    assert SCHEMA_FILE.read_text() == report_io.schema_text()
    jsonschema.Draft202012Validator.check_schema(json.loads(SCHEMA_FILE.read_text()))


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_real_reports_validate_against_the_published_schema(folder):
    d = _live(folder).to_dict()
    jsonschema.Draft202012Validator(json.loads(SCHEMA_FILE.read_text())).validate(json.loads(json.dumps(d)))


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_typed_document_loses_nothing_the_builder_made(folder):
    """Every key report_to_dict writes is a declared field: typing the dict and back gives the same dict."""
    built = _live(folder).analysis.to_dict()
    assert json.loads(msgspec.json.encode(to_dict(from_dict(built)))) == json.loads(msgspec.json.encode(built))


def test_save_then_load_gives_the_same_document(tmp_path):
    doc = _live(FOLDERS[0]).doc
    p = tmp_path / "report.json"
    report_io.save(doc, p)
    assert report_io.load(p) == doc
    assert msgspec.json.encode(report_io.load(p)) == msgspec.json.encode(doc)


def test_cli_json_is_the_saved_format(tmp_path):
    out = tmp_path / "r.json"
    assert main(["report", str(FOLDERS[0]), "--json", str(out), "-q", "--no-cache", "--workers", "1"]) == 0
    assert report_io.load(out) == _live(FOLDERS[0]).doc


def test_schema_command_prints_the_schema(capsys):
    assert main(["schema"]) == 0
    assert capsys.readouterr().out == SCHEMA_FILE.read_text()
    assert main(["schema", "--columns"]) == 0
    assert capsys.readouterr().out in (ROOT / "docs" / "metrics.md").read_text()


@pytest.mark.parametrize("text, why", [
    ('{"schema": "traceinspect.report/1", "ranks": [', "not valid JSON"),
    ('[1, 2]', "not an object"),
    ('{"schema": "traceinspect.report/9"}', "not supported"),
    ('{"schema": "traceinspect.report/1", "source": "x"}', "broken traceinspect report"),
])
def test_load_refuses_what_is_not_a_report_in_one_line(tmp_path, text, why):
    from traceinspect.errors import UsageError

    p = tmp_path / "bad.json"
    p.write_text(text)
    with pytest.raises(UsageError, match=why) as exc:
        report_io.load(p)
    assert str(p) in str(exc.value) and "\n" not in str(exc.value)


def test_unknown_fields_are_tolerated_and_optional_fields_accepted():
    """A newer report (unknown fields) loads; fields being added elsewhere (step_us, claims, verdict...) validate."""
    d = _live(FOLDERS[0]).to_dict()
    d["from_the_future"] = {"x": 1}
    d["verdict"] = {"text": "ok"}
    d["runs"] = None  # typed now (report/doc_records.py RunsDoc): a folder's runs, or null
    r = d["ranks"][0]
    r.update(step_us=1.0, projected_step_us=0.5, claims=[{"id": "host-sync", "us": 0.5}], timeline=None, collectives=[])
    r["steps"][0]["backlog_us"] = None
    d["findings"][0].update(share_of_step=0.1, severity_reason="x", thin_evidence="x", owned_by=None)
    doc = from_dict(d)
    assert doc.ranks[0].claims[0].id == "host-sync" and doc.verdict.text == "ok"
    assert "from_the_future" not in to_dict(doc)
    r["timeline"] = []  # a known field of the wrong shape is refused, not carried along
    with pytest.raises(msgspec.ValidationError, match="timeline"):
        from_dict(d)


# --------------------------------------------------------------------------------------------------------------
# The step-column registry


def _step_columns(folder: Path) -> set[str]:
    return {c for ra in _live(folder).analysis.ranks for c in ra.steps.columns}


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_every_step_column_is_registered(folder):
    """A new step column joins the contract only through report/columns.py: an unregistered one fails here."""
    nested = {f"cpu_{c}" for c in CPU_CATEGORIES}
    unregistered = {c for c in _step_columns(folder)
                    if c not in BY_NAME and c not in HEAD_FIELDS and c not in nested
                    and not c.startswith(("bd_", "tot_"))}
    assert not unregistered


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_steps_carry_exactly_the_registered_columns(folder):
    d = _live(folder).to_dict()
    made = _step_columns(folder)
    for r in d["ranks"]:
        for s in r["steps"]:
            flat = set(s) - {"step", "wall_us", "gpu_busy_us", "breakdown_us", "totals_us", "basis", "synthetic",
                             "collectives", "comm_by_kind", "claims"}
            assert flat == {c.name for c in STEP_COLUMNS if c.name in made} | ({"dataloader_us"} & set(s))
    # The column the old prefix rule dropped, documented in docs/metrics.md, is there and means what it says.
    s = d["ranks"][0]["steps"][0]
    assert s["cpu_step_us"] == pytest.approx(s["cpu_end_us"] - s["cpu_start_us"])


def test_registered_columns_are_documented_with_their_units():
    """docs/metrics.md carries the registry's table verbatim (regenerate: columns_markdown())."""
    from traceinspect.report.columns import columns_markdown

    assert columns_markdown() in (ROOT / "docs" / "metrics.md").read_text()
    for c in STEP_COLUMNS:
        assert c.unit in {"us", "bytes", "count", "share", "GB/s", "index"}
        assert c.name.endswith("_us") == (c.unit == "us"), c.name
        assert not c.name.endswith("_bytes") or c.unit == "bytes", c.name


def test_cpu_only_report_validates_and_round_trips(cpu_clean_run):
    """A real CPU DDP capture (gloo): CPU breakdown, null GPU numbers, the fields the GPU analyses did not make."""
    result = report_folder(cpu_clean_run, NOCACHE)
    d = result.to_dict()
    assert {r["basis"] for r in d["ranks"]} == {"cpu"}
    jsonschema.Draft202012Validator(json.loads(SCHEMA_FILE.read_text())).validate(json.loads(json.dumps(d)))
    built = result.analysis.to_dict()
    assert json.loads(msgspec.json.encode(to_dict(from_dict(built)))) == json.loads(msgspec.json.encode(built))
    assert d["ranks"][0]["steps"][0]["gpu_busy_us"] is None


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_real_reports_meet_every_rule_need(folder):
    """Declared needs are real columns: no rule reports missing inputs on real GPU, ROCm and inference traces."""
    assert _live(folder).to_dict()["errors"] == []
