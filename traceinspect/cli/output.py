"""Where the CLI writes documents: a file, or stdout for ``-``.

A file is written whole or not at all: into a temporary file in the target's folder, then moved over the target
(``os.replace``), so a reader never sees half a report and an interrupted run leaves the old file. An existing
symbolic link at the target is replaced by the file, never followed: the file it pointed to is left as it was.

Only a regular file (or a new name, or such a link) is replaced. A character or block device (``/dev/null``), a FIFO
or a socket is written to directly, in place, and so is a link of the system's under ``/dev`` or ``/proc``
(``/dev/stderr``, ``/dev/fd/N``: the stream it names, appended to); ``/dev/stdout`` and ``/dev/fd/1`` are stdout,
as ``-`` is.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import click

from ..errors import UsageError

STDOUT = "-"
#: Names of this process's stdout: written as ``-`` is (the text report is then not printed).
STDOUT_NAMES = {STDOUT, "/dev/stdout", "/dev/fd/1", "/proc/self/fd/1"}


def is_stdout(path: str | None) -> bool:
    return path is not None and (path in STDOUT_NAMES or os.path.normpath(path) in STDOUT_NAMES)


def one_stdout(**targets: str | None) -> str | None:
    """The option that writes to stdout (``-``), if any; two documents on stdout at once would be one mess."""
    on_stdout = [name for name, value in targets.items() if is_stdout(value)]
    if len(on_stdout) > 1:
        flags = " and ".join(f"--{n}" for n in on_stdout)
        raise UsageError(f"{flags} both write to stdout ('-'): give all but one a file name")
    return on_stdout[0] if on_stdout else None


def check_targets(*files: str | None, out_dir: str | None = None) -> None:
    """Before any work: every output's folder must exist (a typo is one line, not a silently made folder tree);
    ``--out DIR`` may be new, but its parent must exist."""
    wanted = [(p, Path(p).parent) for p in files if p and not is_stdout(p)]
    if out_dir:
        wanted.append((out_dir, Path(out_dir).resolve().parent))
    for p, parent in wanted:
        if not parent.is_dir():
            raise UsageError(f"{p}: folder {parent} does not exist")


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_text(path: str, text: str | bytes) -> None:
    """``text`` (or its UTF-8 bytes) into ``path`` atomically (see the module docstring), or onto stdout when
    ``path`` is ``-``."""
    if is_stdout(path):
        click.echo(text, nl=not text.endswith("\n" if isinstance(text, str) else b"\n"))
        return
    write_file(path, text.encode("utf-8") if isinstance(text, str) else text)


def _written_in_place(p: Path) -> bool:
    """A target that is not a file to replace: a device, a FIFO or a socket; a link of the system's under /dev or
    /proc (``/dev/stderr``, ``/dev/fd/N``)."""
    try:
        mode = os.lstat(p).st_mode
    except OSError:
        return False  # a new name
    if stat.S_ISLNK(mode):
        return os.path.abspath(p).startswith(("/dev/", "/proc/"))
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def _write_in_place(path, data: bytes) -> None:
    """``data`` written to what ``path`` names, in place (appended to a file a system link leads to)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | getattr(os, "O_NOCTTY", 0))
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
    except OSError as exc:
        raise UsageError(f"{path}: cannot write ({exc.strerror or exc})") from None


def write_file(path, data: bytes) -> None:
    """``data`` into the file ``path`` atomically, or in place where it is a device, a FIFO or a socket (see the
    module docstring); a one-line error naming it."""
    p = Path(path)
    if _written_in_place(p):
        _write_in_place(path, data)
        return
    if not p.parent.is_dir():
        raise UsageError(f"{path}: folder {p.parent} does not exist")
    if p.is_dir() and not p.is_symlink():
        raise UsageError(f"{path}: is a folder")
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            os.fchmod(fh.fileno(), 0o666 & ~_umask())  # as an ordinary new file (mkstemp makes it 0600)
        os.replace(tmp, p)
        tmp = None
    except OSError as exc:
        raise UsageError(f"{path}: cannot write ({exc.strerror or exc})") from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def make_out_dir(out_dir: str) -> Path:
    """``--out DIR``: the folder, made when new (its parent must exist: ``check_targets``)."""
    out = Path(out_dir)
    try:
        out.mkdir(exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{out_dir}: cannot make the folder ({exc.strerror or exc})") from None
    if not out.is_dir():
        raise UsageError(f"{out_dir}: not a folder")
    return out
