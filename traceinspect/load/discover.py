"""Listing the trace files under a folder (standard library only: the cached report path imports nothing heavy).

A report lists its folder once (``list_traces``) and every step reuses that ``Listing``: the cache key, the pieces
decoded early (``prefetch.py``), the plan of the runs and ranks (``reader.plan``).

Nothing is passed over without a word: a sub-folder that cannot be read, a file named like a trace that cannot be
looked at, a link that leads out of the folder (a report of a folder reads what is in it, never a file elsewhere
that a planted link names), and traceinspect's own cache folders are each returned to the caller with a one-line reason (the report
lists them in ``skipped``; ``--strict`` makes them fatal). A ``CACHEDIR.TAG`` alone hides nothing: only a folder
whose tag holds exactly traceinspect's bytes is our cache, and only its version folders (``v4``, ...), where the
entries are, are not read as traces.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from ..errors import NoUsableTraceError

# Compressed forms are told by their content when read; zstd needs the optional ``zstandard`` module.
TRACE_SUFFIXES = (".json", ".json.gz", ".json.bz2", ".json.xz", ".json.zst")
# Files we write ourselves or tools write next to traces; never traces.
IGNORED_NAMES = re.compile(r"^(report\.json|.*\.report\.json|results\.json|diff\.json)$")
CACHE_DIRNAME = ".traceinspect-cache"  # where older versions cached, inside the trace folder: never read
# The cache's marker (https://bford.info/cachedir/): the standard signature and our own line (run/cache_store.py
# writes it; kept here too so that discovery imports nothing of the cache).
CACHE_TAG = "CACHEDIR.TAG"
OUR_TAG = b"Signature: 8a477f597d28d172789f06886806bc55\n# traceinspect's cache (https://bford.info/cachedir/)\n"
CACHE_VERSION_DIR = re.compile(r"v\d+")


def is_our_cache(folder: str | os.PathLike) -> bool:
    """``folder`` holds a regular ``CACHEDIR.TAG`` with exactly our bytes (a link, or another tool's tag, is not)."""
    try:
        fd = os.open(os.path.join(folder, CACHE_TAG), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        return stat.S_ISREG(os.fstat(fd).st_mode) and os.read(fd, len(OUR_TAG) + 1) == OUR_TAG
    finally:
        os.close(fd)


def _why(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


@dataclass(frozen=True)
class Listing:
    """A folder (or one file) listed: its trace files, sorted, and what was passed over, each ``(path, reason)``."""

    source: str  # the path as given
    files: tuple[Path, ...]
    passed_over: tuple[tuple[str, str], ...] = ()


def list_traces(path: str | os.PathLike) -> Listing:
    """Every trace file under ``path`` (recursively), or ``path`` itself if it is a file, and each folder or
    trace-named file not read with its one-line reason. A path that does not exist is a ``NoUsableTraceError``."""
    p = Path(path)
    if not p.exists():
        raise NoUsableTraceError(f"{p}: no such file or folder")
    if p.is_file():
        return Listing(str(path), (p,))
    out: list[tuple[str, str]] = []

    def unreadable(exc: OSError) -> None:
        out.append((str(exc.filename), f"folder cannot be read ({_why(exc)})"))

    files = []
    for root, dirs, names in os.walk(p, onerror=unreadable):
        if CACHE_TAG in names and is_our_cache(root):
            for d in [d for d in dirs if CACHE_VERSION_DIR.fullmatch(d)]:
                out.append((os.path.join(root, d), "traceinspect's cache folder, not traces"))
                dirs.remove(d)
        dirs[:] = sorted(d for d in dirs if d != CACHE_DIRNAME)
        files += [Path(root, n) for n in names if n.endswith(TRACE_SUFFIXES) and not IGNORED_NAMES.match(n)]
    found, inside = [], os.path.realpath(p)
    for f in sorted(files):
        try:
            if stat.S_ISREG(os.stat(f).st_mode):
                target = os.path.realpath(f)
                if os.path.commonpath([inside, target]) != inside:  # a link (of the file or a folder) out of it
                    out.append((str(f), f"a link leading outside the folder, to {target}: not read (give that "
                                        "file or its folder to read it)"))
                    continue
                found.append(f)
        except OSError as exc:  # a link to nowhere, a file in a folder that can be listed but not entered
            out.append((str(f), f"cannot be read ({_why(exc)})"))
    return Listing(str(path), tuple(found), tuple(out))


def no_traces(path: str | os.PathLike, passed_over: tuple[tuple[str, str], ...]) -> NoUsableTraceError:
    """The error for a folder without trace files, naming the first thing passed over (an unreadable folder...)."""
    why = f" ({passed_over[0][0]}: {passed_over[0][1]})" if passed_over else ""
    return NoUsableTraceError(f"{path}: no trace files (*.json, *.json.gz) found{why}")
