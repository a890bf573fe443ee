"""The output options of ``report`` and ``render``, from ``render/formats.py``'s table: each format is an option
(``--json PATH``, ``--out DIR``, ``--tensorboard [DIR]``), checked and written here. A format added to the table is
offered and written by every command it names, with nothing to change in this package."""

from __future__ import annotations

from pathlib import Path

import click

from ..render.formats import Format, formats_for
from .exits import say
from .output import STDOUT, check_targets, make_out_dir, one_stdout, write_file, write_text


def _option(f: Format) -> click.Option:
    decl = [f"--{f.name}", f.param]
    if f.target == "folder-or-default":
        return click.Option(decl, is_flag=False, flag_value="", default=None, metavar=f.metavar or "[DIR]",
                            help=f.help)
    return click.Option(decl, metavar=f.metavar or ("PATH" if f.target == "file" else "DIR"), help=f.help)


class FormatsCommand(click.Command):
    """A command whose output options are the formats the table offers it, read when the command line is parsed
    (``--help`` included); the callback gets each as its parameter (``json_path``, ``out_dir``...)."""

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        params = super().get_params(ctx)
        args = [p for p in params if isinstance(p, click.Argument)]
        rest = [p for p in params if not isinstance(p, click.Argument)]
        return [*args, *self._format_options(), *rest]

    def _format_options(self) -> list[click.Option]:
        """One option object per format for as long as the table is the same (click matches the parsed options
        to the parameters it processes by identity)."""
        table = formats_for(self.name)
        made = getattr(self, "_made", None)
        if made is None or made[0] != table:
            made = self._made = (table, [_option(f) for f in table])
        return made[1]


def chosen(command: str, params: dict) -> list[tuple[Format, str]]:
    """(format, its value) of each output the command line asked for, in table order."""
    return [(f, params[f.param]) for f in formats_for(command) if params.get(f.param) is not None]


def stdout_format(command: str, params: dict) -> str | None:
    """The format written to stdout (``-``), if any: at most one (``output.one_stdout``)."""
    return one_stdout(**{f.name: v for f, v in chosen(command, params) if f.target == "file"})


def check(command: str, params: dict) -> None:
    """Before any work: every output file's folder exists, and a ``--out``-like folder's parent does."""
    picked = chosen(command, params)
    check_targets(*(v for f, v in picked if f.target == "file"))
    for f, v in picked:
        if f.target == "folder":
            check_targets(out_dir=v)


def write(command: str, params: dict, doc, source: str | None = None) -> None:
    """Every output the command line asked for, in table order; ``source`` (the input) is the folder a
    ``folder-or-default`` format given bare writes into."""
    for f, value in chosen(command, params):
        render = f.load()
        if f.target == "file":
            write_text(value, render(doc))
            continue
        folder = make_out_dir(value) if f.target == "folder" else Path(value or source or ".")
        note = render(doc, folder, write_file)
        if note:
            say(note)


def per_run(command: str, params: dict, n: int) -> dict:
    """The outputs of run ``n`` of ``--all-runs``: report.json -> report.run2.json; a folder gets a run2/ inside;
    a ``folder-or-default`` folder is shared."""
    out = {}
    for f, value in chosen(command, params):
        if f.target == "file":
            out[f.param] = _nth(value, n)
        elif f.target == "folder":
            out[f.param] = str(Path(value) / f"run{n}")
    return out


def no_stdout_per_run(command: str, params: dict) -> None:
    """``--all-runs`` writes one report per run: none of them onto stdout."""
    for f, value in chosen(command, params):
        if f.target == "file" and value == STDOUT:
            from ..errors import UsageError

            raise UsageError(f"--all-runs writes one report per run: give --{f.name} a file name, not '-'")


def make_folders_per_run(command: str, params: dict) -> None:
    """``--all-runs``: the folders the runs' folders go in, made as ``--out DIR`` alone makes DIR."""
    for f, value in chosen(command, params):
        if f.target == "folder":
            check_targets(out_dir=value)
            make_out_dir(value)


def _nth(path: str, n: int) -> str:
    p = Path(path)
    suffix = "".join(p.suffixes[-1:])
    return str(p.with_name(f"{p.name[: len(p.name) - len(suffix)]}.run{n}{suffix}"))
