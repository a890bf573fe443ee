"""``--out DIR``: report.json, the plots (PNG) and report.md (which links the plots) in one folder."""

from __future__ import annotations

from pathlib import Path

from ..report.doc import ReportDoc


def write_folder(d: ReportDoc | dict, folder: Path, write) -> None:
    """Into ``folder`` (made by the caller), each file through ``write(path, data)``."""
    from .._optional import import_optional
    from .json_doc import render_json
    from .markdown import render_markdown

    write(folder / "report.json", render_json(d))
    import_optional("matplotlib", "--out (the plots)")
    from .plots import write_plots

    paths = write_plots(d, out_dir=folder, write=write)
    write(folder / "report.md", render_markdown(d, [p.name for p in paths]).encode("utf-8"))
