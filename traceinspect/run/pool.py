"""Process pools, made here only: decoding pieces, whole ranks, and a big rank's analyses all use ``process_pool``.

Decoding and analysis are CPU-bound Python, so processes, not threads. ``fork`` keeps start-up cheap (workers share
the parent's imports and, for a big rank's analyses, its events copy-on-write); elsewhere the platform default.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from concurrent.futures import ProcessPoolExecutor

from ..config import Config


def worker_count(config: Config) -> int:
    """``Config.workers``, 0 meaning one per core."""
    return config.workers if config.workers > 0 else (os.cpu_count() or 1)


def can_fork() -> bool:
    """Forking is possible here (not on Windows/macOS spawn-only builds, not inside a daemonic worker)."""
    return "fork" in mp.get_all_start_methods() and not mp.current_process().daemon


def process_pool(n: int, fork_only: bool = False) -> ProcessPoolExecutor:
    """A pool of ``n`` worker processes; ``fork_only`` for work that relies on memory inherited from the parent."""
    if fork_only or "fork" in mp.get_all_start_methods():
        return ProcessPoolExecutor(max_workers=n, mp_context=mp.get_context("fork"))
    return ProcessPoolExecutor(max_workers=n)
