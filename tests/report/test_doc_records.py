"""The report's records are typed (report/doc_records.py), and the JSON is what it was when they were dicts: a real
report read into the typed document and written again is the same bytes, key order included; and the fields that
were open dicts are records now."""

from __future__ import annotations

import typing
from pathlib import Path

import msgspec
import pytest

from traceinspect.cli.main import main
from traceinspect.report import doc
from traceinspect.report.io import dumps

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = [ROOT / "fixtures" / "gpu" / "big_baseline", ROOT / "fixtures" / "cpu" / "fetch_stub"]


def _written(folder: Path, tmp_path: Path) -> str:
    out = tmp_path / "report.json"
    assert main(["report", str(folder), "--json", str(out), "-q", "--no-cache"]) == 0
    return out.read_text()


def _same_after_a_round_trip(text: str) -> None:
    typed = msgspec.json.decode(text, type=doc.ReportDoc)
    assert dumps(typed) == text  # every key declared, in the order written, numbers as they were


@pytest.mark.parametrize("folder", FIXTURES, ids=[p.name for p in FIXTURES])
def test_a_report_read_into_the_typed_document_is_written_again_byte_for_byte(folder, tmp_path):
    _same_after_a_round_trip(_written(folder, tmp_path))


def test_the_cross_rank_record_round_trips_on_a_two_rank_run(cpu_baseline_run, tmp_path):
    text = _written(cpu_baseline_run, tmp_path)
    typed = msgspec.json.decode(text, type=doc.ReportDoc)
    assert typed.cross_rank.matched and typed.cross_rank.per_rank  # a real cross-rank result, typed
    assert {p.rank for p in typed.cross_rank.per_rank} == {0, 1}
    _same_after_a_round_trip(text)


def test_the_report_document_declares_no_any():
    """Every field of every Struct the document reaches has a declared type (no ``typing.Any`` anywhere)."""
    seen, found = set(), []

    def walk(t, where):
        if t is typing.Any:
            found.append(where)
            return
        if isinstance(t, type) and issubclass(t, msgspec.Struct):
            if t in seen:
                return
            seen.add(t)
            for name, hint in typing.get_type_hints(t, include_extras=True).items():
                walk(hint, f"{t.__name__}.{name}")
            return
        for arg in typing.get_args(t):
            walk(arg, where)

    walk(doc.ReportDoc, "ReportDoc")
    assert not found, found
    assert {"CrossRankDoc", "CaptureMetadataDoc", "VerdictDoc", "RunsDoc", "StrategyDoc", "CollectiveDoc"} <= {
        t.__name__ for t in seen}
