"""The one table of output formats: a format is a module under ``render/`` and one line in ``FORMATS``.

Each line names the format (its option, ``--NAME``), the renderer (``"module:function"``, imported only when the
format is written, so the command line starts without matplotlib, jinja2 or tensorboard), what it writes into (a
file, a folder, or a folder that defaults to the trace folder) and the commands that offer it. The CLI's output
options, the "two documents on stdout" check, the "--all-runs" output names and the writing itself all come from
this table (``cli/formats.py``).

A renderer's signature follows its target:

- ``file``: ``render(doc: ReportDoc) -> str``, the text the CLI writes (whole or not at all, or onto stdout for
  ``-``);
- ``folder``: ``render(doc: ReportDoc, folder: Path, write) -> str | None``, into a folder the CLI made, each file
  through ``write(path, data: bytes)``; the return value, if any, is a line for stderr;
- ``folder-or-default``: as ``folder``, but the option may be given bare (``--tensorboard``): the folder is then
  the report's input; the renderer makes its own folders.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from typing import Callable, Literal

Target = Literal["file", "folder", "folder-or-default"]


@dataclass(frozen=True)
class Format:
    """One output format: what the CLI offers (``--NAME``) and which renderer writes it."""

    name: str  # the option (--NAME) and the name in messages
    renderer: str | Callable  # "module:function" (a module of this package, or a dotted path), or the function
    help: str  # the option's help
    target: Target = "file"
    commands: tuple[str, ...] = ("report", "render")  # the commands that offer it
    dest: str = ""  # the option's parameter name (default NAME_path)
    metavar: str = ""  # default PATH (file) or DIR (folder)

    @property
    def param(self) -> str:
        return self.dest or f"{self.name.replace('-', '_')}_path"

    def load(self) -> Callable:
        """The renderer function (its module imported now)."""
        if callable(self.renderer):
            return self.renderer
        module, _, attr = self.renderer.partition(":")
        package = __package__ if "." not in module else None
        return getattr(import_module(f".{module}" if package else module, package), attr)


FORMATS: tuple[Format, ...] = (
    Format("json", "json_doc:render_json", "Write the JSON report to PATH ('-' for stdout).", commands=("report",)),
    Format("markdown", "markdown:render_markdown", "Write the Markdown report to PATH ('-' for stdout).",
           dest="md_path"),
    Format("html", "html:render_html", "Write a self-contained HTML report to PATH ('-' for stdout)."),
    Format("out", "folder:write_folder", "Write report.json, report.md and the plots into DIR.", target="folder",
           dest="out_dir"),
    Format("tensorboard", "tensorboard:write_tensorboard_folder",
           "Write per-step scalars and findings as TensorBoard runs under DIR/traceinspect (default DIR: the trace "
           "folder).", target="folder-or-default", commands=("report",), dest="tb_dir", metavar="[DIR]"),
)


def formats_for(command: str) -> tuple[Format, ...]:
    """The formats ``command`` offers, in table order (read at call time: a format added to the table is offered)."""
    return tuple(f for f in FORMATS if command in f.commands)
