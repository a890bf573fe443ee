"""Finding trace files under a folder (standard library only: the cached report path imports nothing heavy)."""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..errors import NoUsableTraceError

# Compressed forms are told by their content when read; zstd needs the optional ``zstandard`` module.
TRACE_SUFFIXES = (".json", ".json.gz", ".json.bz2", ".json.xz", ".json.zst")
# Files we write ourselves or tools write next to traces; never traces.
IGNORED_NAMES = re.compile(r"^(report\.json|.*\.report\.json|results\.json|diff\.json)$")
CACHE_DIRNAME = ".traceinspect-cache"  # where older versions cached, inside the trace folder: never read
# A folder holding this file is a cache (https://bford.info/cachedir/): traceinspect's own cache carries one, so a
# --cache-dir inside a trace folder is never taken for traces.
CACHE_TAG = "CACHEDIR.TAG"


def find_trace_files(path: str | os.PathLike) -> list[Path]:
    """Every .json / .json.gz under ``path`` (recursively), or ``path`` itself if it is a file."""
    p = Path(path)
    if not p.exists():
        raise NoUsableTraceError(f"{p}: no such file or folder")
    if p.is_file():
        return [p]
    files = []
    for root, dirs, names in os.walk(p):
        if CACHE_TAG in names:
            dirs[:] = []
            continue
        dirs[:] = [d for d in dirs if d != CACHE_DIRNAME]
        files += [Path(root, n) for n in names if n.endswith(TRACE_SUFFIXES) and not IGNORED_NAMES.match(n)]
    return sorted(f for f in files if f.is_file())
