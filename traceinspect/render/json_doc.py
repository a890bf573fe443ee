"""The JSON report: the document as indented JSON text (``report.io.dumps``, the format a saved report is read
back from)."""

from __future__ import annotations

from ..report.doc import ReportDoc


def render_json(d: ReportDoc | dict) -> bytes:
    """The indented JSON text, as the UTF-8 bytes written to a file or stdout."""
    from ..report.io import dump_bytes

    return dump_bytes(d)
