"""Evidence values are formatted by the unit their rule declares for the field (diagnose/units.py), not guessed from
the key's name; the renderers' table (render/evidence_units.py) is generated from the rules and current."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import msgspec

from traceinspect.diagnose import all_rules, get_rule
from traceinspect.diagnose.units import Bytes, Count, Us, evidence_units, units_table
from traceinspect.render import format as fmt
from traceinspect.render.evidence_units import EVIDENCE_UNITS

ROOT = Path(__file__).resolve().parents[2]


def test_the_renderers_table_is_what_the_rules_declare():
    spec = importlib.util.spec_from_file_location("evidence_units_script", ROOT / "scripts" / "evidence_units.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.main([]) == 0, "run python scripts/evidence_units.py --update"
    assert EVIDENCE_UNITS == units_table(all_rules())


def test_a_rule_declares_its_units_on_its_evidence_record():
    units = evidence_units(get_rule("pageable-memcpy").evidence)
    assert units["pageable_h2d_bytes_per_step"] == "bytes" and units["pageable_copies_per_step"] == "count"
    assert units["issuing_ops_bytes"] == "bytes"  # a mapping's values
    assert units["share_of_step"] == "share" and units["pinned_h2d_gbps"] == "gbps"


def test_the_declared_unit_wins_over_the_name():
    """Constructed record: each field is shown in the unit it declares whatever its name says (``wait_bytes`` in
    ms, ``copies_us`` as a count); a key no rule declares is a plain number, its name read for its label only."""

    class Rank(msgspec.Struct):
        wait_bytes: Us  # a name that reads as bytes, declared microseconds
        copies_us: Count  # a name that reads as time, declared a count
        loader_period: Bytes  # a name with no unit in it

    finding = {"id": "x", "evidence": {"per_rank": [{"rank": 0, "wait_bytes": 2500.0, "copies_us": 1200.0,
                                                     "loader_period": 3_000_000.0}]}}
    units = {k: fmt.SHOWN_AS[u] for k, u in evidence_units(Rank).items()}
    shown = dict(fmt.evidence_items(finding["evidence"], units=units))
    assert shown == {"wait": fmt.ms(2500.0), "copies time": "1,200", "loader period": fmt.mb(3_000_000.0)}
    undeclared = dict(fmt.evidence_items(finding["evidence"]))  # no declaration: nothing read from the names
    assert undeclared == {"wait": "2,500", "copies time": "1,200", "loader period": "3,000,000"}


def test_a_real_finding_is_shown_in_its_declared_units():
    """The pageable-memcpy finding of a real H200 capture: copies as a count, bytes in MB, time in ms."""
    import json

    from msgspec import convert

    from traceinspect.render import sections
    from traceinspect.report.doc import FindingDoc

    d = json.loads((ROOT / "tests" / "golden" / "fixtures" / "gpu" / "big_baseline.json").read_text())
    f = next(f for f in d["findings"] if f["id"] == "pageable-memcpy")
    assert fmt.units_of(f["id"])["pageable_copies_per_step"] == ""
    lines = dict(line.split(": ", 1) for line in sections.evidence_lines(convert(f, FindingDoc)) if ": " in line)
    ev = f["evidence"]["per_rank"][0]
    assert lines["pageable copies per step"] == fmt.number(ev["pageable_copies_per_step"])
    assert lines["pageable H2D per step"] == fmt.mb(ev["pageable_h2d_bytes_per_step"])
    assert lines["pageable copy time per step"] == fmt.ms(ev["pageable_copy_us_per_step"])


def test_the_html_report_shows_evidence_as_text_and_markdown_do():
    """The HTML report formats evidence by the same declarations (``fmt.value`` with ``fmt.units_of``): every value
    it shows as text on the real H200 capture's findings is the Markdown report's, and a declared share whose name
    says nothing of a unit (gradscaler-with-bf16's tolerance) reads as a percentage in both."""
    import json

    import msgspec

    from traceinspect.render import html, sections
    from traceinspect.render.document import report_doc

    d = json.loads((ROOT / "tests" / "golden" / "fixtures" / "gpu" / "big_baseline.json").read_text())
    rank = {"rank": 0, "steps": [2], "share_of_step": 0.005}
    tolerance = {**d["findings"][0], "id": "gradscaler-with-bf16",
                 "evidence": {"per_rank": [rank], "fp16_tolerance": 0.01}}
    doc = report_doc(d)
    for f in doc.findings + [msgspec.convert(tolerance, type(doc.findings[0]))]:
        cols, rows, _left, rest = sections.evidence_rows(f)
        markdown = {(k, v) for k, vals in rows for v in vals} | set(rest)
        page = html._evidence(f)
        shown = [(r["label"], c["text"]) for r in page["rows"] for c in r["cells"] if "text" in c]
        shown += [(r["label"], r["cell"]["text"]) for r in page["rest"] if "text" in r["cell"]]
        assert shown and set(shown) <= markdown, f["id"]
    assert ("fp16 tolerance", fmt.pct(0.01)) in shown
