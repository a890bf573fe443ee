"""Save, load and validate a report.json: a saved report loads back into the same ``ReportDoc``.

msgspec and the standard library only (no numpy, no pandas): reading a saved report needs no analysis stack.
Every problem is a ``UsageError`` with one line naming the file.
"""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

from ..errors import UsageError
from .doc import SCHEMA, ReportDoc, json_schema

_PREFIX = "traceinspect.report/"


def dumps(doc: ReportDoc | dict) -> str:
    """The report as indented JSON text (the format ``report --json`` writes)."""
    return dump_bytes(doc).decode()


def dump_bytes(doc: ReportDoc | dict) -> bytes:
    """``dumps`` as the UTF-8 bytes a file gets (a report of tens of MB is not turned into text and back)."""
    return msgspec.json.format(msgspec.json.encode(doc), indent=1)


def save(doc: ReportDoc | dict, path: str | os.PathLike) -> None:
    p = Path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(dumps(doc))
    except OSError as exc:
        raise UsageError(f"{path}: cannot write ({exc.strerror or exc})") from None


def loads(data: bytes | str, name: str = "<report>") -> ReportDoc:
    """JSON text -> ReportDoc; a one-line ``UsageError`` for anything that is not a report of this schema."""
    try:
        raw = msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise UsageError(f"{name}: not valid JSON ({exc})") from None
    check_schema(raw, name)
    return validate(raw, name)


def load(path: str | os.PathLike) -> ReportDoc:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise UsageError(f"{path}: cannot read ({exc.strerror or exc})") from None
    return loads(data, str(path))


def check_schema(raw, name: str) -> None:
    """The document names this contract (``schema``: ``traceinspect.report/1``)."""
    if not isinstance(raw, dict):
        raise UsageError(f"{name}: not a traceinspect report (the JSON is not an object)")
    schema = raw.get("schema")
    if not (isinstance(schema, str) and schema.startswith(_PREFIX)):
        raise UsageError(f"{name}: not a traceinspect report (no 'schema': '{SCHEMA}')")
    if schema != SCHEMA:
        raise UsageError(f"{name}: report schema {schema} is not supported (this version reads {SCHEMA})")


def validate(raw: dict, name: str = "<report>") -> ReportDoc:
    """A parsed report dict -> ReportDoc, or a one-line ``UsageError`` naming the first field that is wrong."""
    try:
        return msgspec.convert(raw, ReportDoc)
    except msgspec.ValidationError as exc:
        raise UsageError(f"{name}: broken traceinspect report ({exc})") from None


def schema_text() -> str:
    """The published JSON Schema (docs/report.schema.json) as text."""
    return msgspec.json.format(msgspec.json.encode(json_schema()), indent=2).decode() + "\n"
