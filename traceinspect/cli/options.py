"""The options ``report``, ``render`` and ``diff`` share, and the Config they make: one place, imported by each
command module (which never import each other)."""

from __future__ import annotations

import os
import stat
import sys

import click

from ..errors import UsageError
from .exits import say

#: The text report's width bounds: narrower cannot hold a table row, wider is no screen.
MIN_WIDTH, MAX_WIDTH = 40, 1000
#: The text report's width when neither --width, $COLUMNS nor a terminal says one (a pipe, a file).
DEFAULT_WIDTH = 120

no_cache_option = click.option("--no-cache", is_flag=True,
                               help="Neither read nor write the cache (decode and analyse everything).")
cache_dir_option = click.option("--cache-dir", metavar="DIR",
                                help="Cache folder (default: $TRACEINSPECT_CACHE_DIR or the user cache).")
workers_option = click.option("--workers", type=click.IntRange(min=0), default=0, show_default=True,
                              help="Decoding processes (0 = one per core; at most the cores).")
width_option = click.option("--width", type=click.IntRange(MIN_WIDTH, MAX_WIDTH), default=None,
                            help=f"Width of the text report ({MIN_WIDTH} to {MAX_WIDTH}; default: $COLUMNS, else "
                                 f"the terminal's, else {DEFAULT_WIDTH}).")
quiet_option = click.option("--quiet", "-q", is_flag=True, help="Do not print the text report.")


def settings_option(help: str):
    return click.option("--set", "settings", multiple=True, metavar="NAME=VALUE", help=help)


def workers_for(workers: int) -> int:
    """``--workers``, capped at the cores this process may use (with a note on stderr when capped)."""
    from ..run.pool import cpu_count

    cores = cpu_count()
    if workers > cores:
        say(f"--workers {workers} capped at {cores} (the CPU cores this process may use)")
        return cores
    return workers


def run_config(no_cache: bool, workers: int, cache_dir: str | None, settings=(), **run):
    """The Config of the common options (``report``, ``diff``): cache, workers, ``--set NAME=VALUE`` thresholds."""
    from ..config import Config

    return Config(workers=workers_for(workers), use_cache=not no_cache, cache_dir=cache_dir,
                  **run).with_settings(settings)


def text_width(width: int | None = None) -> int:
    """The text report's width: ``--width``, else ``$COLUMNS`` (as rich and the shell read it), else the width of
    the terminal stdout is, else ``DEFAULT_WIDTH``; within ``MIN_WIDTH`` and ``MAX_WIDTH``."""
    if width:
        return width
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) > 0:
        found = int(columns)
    else:
        try:
            found = os.get_terminal_size(sys.stdout.fileno()).columns if sys.stdout.isatty() else 0
        except (OSError, ValueError, AttributeError):  # no descriptor (a captured stream), or not a terminal
            found = 0
    return min(max(found or DEFAULT_WIDTH, MIN_WIDTH), MAX_WIDTH)


def echo_text(render, doc, width: int | None) -> None:
    """A text renderer's output on stdout, ``text_width(width)`` columns, coloured on a terminal."""
    click.echo(render(doc, width=text_width(width), color=sys.stdout.isatty()), nl=False)


def check_readable_input(path: str) -> None:
    """A path to read from is a folder or a regular file: a FIFO, a socket or a device would block or never end."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return  # missing or unreadable: the command says so itself, naming the file
    if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
        raise UsageError(f"{path}: not a regular file or folder (a pipe, socket or device is not read)")
