"""What every renderer reads: the typed report (``report/doc.py``'s ``ReportDoc`` and its records).

A renderer is handed the ``ReportDoc`` (``report_folder(...).doc``, or a saved report.json loaded by
``report.io.load``); its public functions also take the report as its JSON object (``FolderReport.to_dict()``, a
parsed report.json), checked against the contract once, here. Below that, renderers read attributes: an optional
field that is absent is ``UNSET`` (``given`` reads it as None).
"""

from __future__ import annotations

from msgspec import UNSET

from ..report.doc import ReportDoc
from ..report.io import validate


def report_doc(d: ReportDoc | dict) -> ReportDoc:
    """The document a renderer reads: a ``ReportDoc`` as it is, or a report's JSON object checked against the
    contract (a one-line ``UsageError`` where it breaks it)."""
    return d if isinstance(d, ReportDoc) else validate(d)


def given(v):
    """A field's value, or None where the field is optional and absent (``UNSET``)."""
    return None if v is UNSET else v


def present(v) -> bool:
    """Whether an optional field is in the document (its value may still be null)."""
    return v is not UNSET
