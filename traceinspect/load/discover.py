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
CACHE_DIRNAME = ".traceinspect-cache"


def find_trace_files(path: str | os.PathLike) -> list[Path]:
    """Every .json / .json.gz under ``path`` (recursively), or ``path`` itself if it is a file."""
    p = Path(path)
    if not p.exists():
        raise NoUsableTraceError(f"{p}: no such file or folder")
    if p.is_file():
        return [p]
    files = [
        f
        for f in p.rglob("*")
        if f.is_file()
        and f.name.endswith(TRACE_SUFFIXES)
        and CACHE_DIRNAME not in f.parts
        and not IGNORED_NAMES.match(f.name)
    ]
    return sorted(files)
