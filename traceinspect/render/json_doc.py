"""The JSON report: the document as indented JSON text (``report.io.dumps``, the format a saved report is read
back from)."""

from __future__ import annotations

from ..report.doc import ReportDoc


def render_json(d: ReportDoc | dict) -> str:
    from ..report.io import dumps

    return dumps(d)
