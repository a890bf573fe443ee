"""The JSON report: the document as indented JSON text (``report.io.dumps``, the format a saved report is read
back from)."""

from __future__ import annotations


def render_json(d: dict) -> str:
    from ..report.io import dumps

    return dumps(d)
