"""The settings, by what each is for, and ``Config``: all of them in one object, as the Python API and the command
line take them.

- ``RunOptions``: where and how to run (workers, the cache, the executor, which run of a folder): read by ``run/``
  and the command line only;
- ``load.limits.Limits``: what one trace file may cost, and what reading the traces may hold: the load stage's;
- ``thresholds.Thresholds``: what ``--set`` changes, each declared by the rules that read it: the analysis, the
  rules and the report's figures.

``Config`` has every field of the three under its own name (``Config(workers=1, host_sync_share_warning=0.1)``);
``report_folder`` and the API functions take one and hand each stage its part (``.options``, ``.limits``,
``.thresholds``). No stage below the run imports this module.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from .load.limits import Limits
from .thresholds import REMOVED, Thresholds, parse_setting, reason, setting, thresholds  # noqa: F401  (the API's)


@dataclass(frozen=True)
class RunOptions:
    """Where and how a report runs: none of it changes what the report says."""

    # Worker processes for decoding; 0 = one per core. Decoding is CPU-bound JSON parsing, so processes, not threads.
    workers: int = 0
    # Reuse decoded columns, rank analyses and reports from the cache (keyed by the files' size + mtime, the
    # settings and the code), so a second report of an unchanged folder skips JSON and analysis.
    use_cache: bool = True
    # Where the cache lives; None = $TRACEINSPECT_CACHE_DIR, else the user cache folder (never the trace folder).
    cache_dir: str | None = None
    # The cache folder's size cap: least recently used entries are deleted beyond it. 2 GiB holds the decoded
    # columns of a few 1 GB traces (Parquet is ~5x smaller than the JSON) and thousands of reports.
    cache_max_bytes: int = 2 << 30
    # Where the per-rank stage runs: "local" (process pools here) or "dask" (a cluster; see run/dask.py).
    executor: str = "local"
    # The Dask scheduler's address (tcp://...) for executor "dask"; None = a local cluster for the run.
    scheduler: str | None = None
    # Which run of a folder holding several to report (1 = the oldest, docs/folders.md); None = the most recent.
    run: int | None = None


def part(cls, settings):
    """The ``cls`` part (``RunOptions``, ``Limits``, ``Thresholds``) of ``settings``, an object holding its fields."""
    return cls(**{f.name: getattr(settings, f.name) for f in fields(cls)})


@dataclass(frozen=True)
class Config(Limits, Thresholds, RunOptions):
    """Every setting, flat: the run options, then the thresholds, then the limits (their classes' fields)."""

    @property
    def options(self) -> RunOptions:
        return part(RunOptions, self)

    @property
    def limits(self) -> Limits:
        return part(Limits, self)

    @property
    def thresholds(self) -> Thresholds:
        return part(Thresholds, self)


DEFAULT = Config()


def field_comments() -> dict[str, str]:
    """Each field's comment where its class declares it (the lines right above it), for the settings that are no
    threshold (a threshold says why in its ``setting``): one place says why."""
    import inspect

    out, block = {}, []
    for cls in (RunOptions, Limits):
        for line in inspect.getsource(cls).splitlines():
            text = line.strip()
            if text.startswith("# ---") or not text:
                block = []
            elif text.startswith("#"):
                block.append(text.lstrip("# "))
            elif ":" in text and "=" in text and not text.startswith(("def ", "@")):
                out[text.split(":")[0]] = " ".join(block)
                block = []
    return out
