#!/usr/bin/env python3
"""Wall time of each stage of one ``traceinspect report`` in this process, without a profiler (which slows Python
code several times more than numpy or msgspec, and so misplaces the time).

    PYTHONPATH=. python benchmarks/stages.py DIR [--workers N]

Prints one line: the CLI's import, then each stage's seconds, then the total since this script started. The
stages are timed by wrapping the functions that run them; nothing else changes (``--no-cache``, ``-q``).
"""

from __future__ import annotations

import time

T0 = time.perf_counter()

import argparse  # noqa: E402
import importlib  # noqa: E402

EARLY = [  # (label, module, function): modules that import no pandas, wrapped before the run
    ("plan (peek, runs)", "traceinspect.load.reader", "plan"),
    ("decode (after the import)", "traceinspect.load.reader", "_decode_all"),
    ("assemble", "traceinspect.load.assemble", "assemble"),
]
LATE = [  # wrapped once the analysis stack is imported (importing them earlier would import pandas early)
    ("per-rank analysis", "traceinspect.run.local", "analyze_rank"),
    ("cross-rank + rules", "traceinspect.run.local", "finish"),
    ("report document", "traceinspect.run", "to_doc"),
]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("dir")
    p.add_argument("--workers", default="1")
    a = p.parse_args()
    from traceinspect.cli.main import main as cli
    import traceinspect._optional as optional

    t_cli = time.perf_counter() - T0
    spent: dict[str, float] = {}
    for label, mod, fn in EARLY:
        _wrap(importlib.import_module(mod), fn, label, spent)
    require = optional.require

    def require_then_wrap(*args):
        t = time.perf_counter()
        require(*args)
        spent["import analysis stack"] = time.perf_counter() - t
        for label, mod, fn in LATE:
            _wrap(importlib.import_module(mod), fn, label, spent)

    optional.require = require_then_wrap
    cli(["report", a.dir, "--no-cache", "--workers", a.workers, "--json", "/dev/null", "-q"])
    total = time.perf_counter() - T0
    print(f"cli import {t_cli:.3f} | " + " | ".join(f"{k} {v:.3f}" for k, v in spent.items())
          + f" | total {total:.3f}")


def _wrap(mod, fn: str, label: str, spent: dict) -> None:
    f = getattr(mod, fn)
    if getattr(f, "_timed", False):
        return

    def timed(*args, **kwargs):
        t = time.perf_counter()
        try:
            return f(*args, **kwargs)
        finally:
            spent[label] = spent.get(label, 0.0) + time.perf_counter() - t

    timed._timed = True
    setattr(mod, fn, timed)


if __name__ == "__main__":
    main()
