"""The severities of a finding, lowest first: the one list the rules (``diagnose/``) grade by and the report's
contract (``report/doc.py``) declares. Standard library only, so the document's types need no rule code."""

SEVERITIES = ("info", "warning", "critical")


def severity_rank(s: str) -> int:
    return SEVERITIES.index(s)
