#!/usr/bin/env python3
"""Summarize a cProfile of ``traceinspect report``: total, the pipeline's stages, and the top functions by own time.

    python -m cProfile -o OUT.prof -m traceinspect report DIR --no-cache --workers 1 --json /dev/null
    python benchmarks/profile_summary.py OUT.prof [--top 12]

Stages are cumulative times of the functions that start them (imports: everything before the command runs).
"""

from __future__ import annotations

import argparse
import pstats

STAGES = [
    ("import of numpy, pandas, pyarrow", "traceinspect/_optional.py", "require"),
    ("decode (files -> columns)", "load/reader.py", "_decode_all"),
    ("  msgspec decode", "", "<method 'decode' of 'msgspec.json.Decoder' objects>"),
    ("  columns from events", "load/columns.py", "columns_from_tagged"),
    ("  columns (untagged paths)", "load/columns.py", "columns_from_events"),
    ("assemble (columns -> DataFrame)", "load/assemble.py", "assemble"),
    ("per-rank analysis", "analyze/rank.py", "analyze_rank"),
    ("cross-rank + rules", "run/stages.py", "finish"),
]


def _cum(stats: pstats.Stats, file_part: str, func: str) -> float:
    total = 0.0
    for (fname, _line, name), (_cc, _nc, _tt, ct, _callers) in stats.stats.items():
        if name == func and file_part in fname:
            total = max(total, ct)  # the outermost call (recursion counts once)
    return total


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("prof")
    p.add_argument("--top", type=int, default=12)
    a = p.parse_args()
    st = pstats.Stats(a.prof)
    print(f"total {st.total_tt:.2f} s (cProfile)")
    cmd = _cum(st, "cli/main.py", "report")
    print(f"  {'imports and start-up':34s} {st.total_tt - cmd:6.2f} s")
    for label, f, func in STAGES:
        print(f"  {label:34s} {_cum(st, f, func):6.2f} s")
    print(f"top {a.top} by own time:")
    rows = sorted(st.stats.items(), key=lambda kv: -kv[1][2])[: a.top]
    for (fname, line, name), (_cc, nc, tt, ct, _callers) in rows:
        short = fname.split("site-packages/")[-1].split("/speed/")[-1]
        print(f"  {tt:6.2f} s own {ct:6.2f} s cum {nc:8d} calls  {short}:{line}({name})")


if __name__ == "__main__":
    main()
