#!/usr/bin/env python3
"""How fast the JSON readers at hand turn one trace file into events, against the time a speed-up target allows.

Why: a report cannot take less time than reading its JSON. This script times, on the same bytes (read once, gunzipped
in memory, outside the timings) and in this process:

* ``json``            the standard library's ``json.loads`` (generic objects, one core);
* ``msgspec``         ``msgspec.json.decode`` into generic objects (one core);
* ``msgspec typed``   the decode floor's typed decode (benchmarks/floor.py: 8 fields and 10 argument keys, the rest
                      skipped without building objects; one core);
* ``arrow reshape``   cutting Kineto's ``traceEvents`` array into one event per line, which Arrow's JSON reader needs
                      (newline-delimited JSON: the array's newlines dropped and its event separators made newlines);
* ``arrow 1 thread`` / ``arrow N threads``  ``pyarrow.json.read_json`` of those lines straight into Arrow columns with
                      an explicit schema (ph, cat, name, ts, dur and two argument keys; other keys ignored). ``pid``
                      and ``tid`` are left out: Kineto writes them as numbers for processes and as strings for its
                      ``Spans``/``Traces`` tracks, and a column of Arrow's JSON reader holds one type only;
* ``python + imports`` a fresh interpreter importing numpy and pandas (what any pandas-based report pays once).

Each reader runs ``--repeat`` times; the table gives the fastest run. With ``--hta-s S`` it also prints the time a
``--target``x speed-up over HTA allows (S / target) next to each reader. Usage:
    python benchmarks/readers.py FILE [--repeat 3] [--hta-s 23.3] [--target 20]
"""

from __future__ import annotations

import argparse
import gc
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent))
from floor import _DECODER, read_bytes  # noqa: E402  (the decode floor's own typed decoder)

# Kineto's layout: an event opens with "  {" on its own line and closes with "  }," at two spaces of indent; with the
# array's newlines dropped, the close of one and the open of the next meet as this separator.
_KINETO_SEPARATOR = b"  },  {"


def _best(fn, repeat: int) -> tuple[float, object]:
    """The fastest of ``repeat`` runs of ``fn`` and the last run's result (the one before is freed first)."""
    best, out = float("inf"), None
    for _ in range(repeat):
        out = None
        gc.collect()
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def _reshape(data: bytes) -> bytes:
    start = data.index(b"[", data.index(b'"traceEvents"')) + 1
    end = data.rindex(b"]")
    return data[start:end].replace(b"\n", b"").replace(_KINETO_SEPARATOR, b"  }\n  {")


def _arrow(lines: bytes, threads: bool):
    import pyarrow as pa
    import pyarrow.json as pj

    schema = pa.schema([("ph", pa.string()), ("cat", pa.string()), ("name", pa.string()), ("ts", pa.float64()),
                        ("dur", pa.float64()),
                        ("args", pa.struct([("External id", pa.int64()), ("correlation", pa.int64())]))])
    return pj.read_json(io.BytesIO(lines), read_options=pj.ReadOptions(use_threads=threads, block_size=8 << 20),
                        parse_options=pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore"))


def _imports_s(repeat: int) -> float:
    code = "import time; t = time.perf_counter(); import numpy, pandas; print(time.perf_counter() - t)"
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
        best = min(best, time.perf_counter() - t)
    return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file", type=Path)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--hta-s", type=float, default=None, help="HTA's wall seconds on this file (benchmarks/run.py)")
    ap.add_argument("--target", type=float, default=20.0)
    ap.add_argument("--json", type=Path, default=None, help="also write the rows as JSON here")
    args = ap.parse_args(argv)

    data = read_bytes(args.file)
    rows: list[tuple[str, float, int | None]] = []
    t, out = _best(lambda: json.loads(data), args.repeat)
    rows.append(("json", t, len(out["traceEvents"])))
    t, out = _best(lambda: msgspec.json.decode(data), args.repeat)
    rows.append(("msgspec", t, len(out["traceEvents"])))
    t, out = _best(lambda: _DECODER.decode(data), args.repeat)
    rows.append(("msgspec typed", t, len(out.traceEvents)))
    del out
    t, lines = _best(lambda: _reshape(data), args.repeat)
    rows.append(("arrow reshape", t, lines.count(b"\n") + 1))
    try:
        t, table = _best(lambda: _arrow(lines, False), args.repeat)
        rows.append(("arrow 1 thread", t, table.num_rows))
        t, table = _best(lambda: _arrow(lines, True), args.repeat)
        rows.append((f"arrow {os.cpu_count()} threads", t, table.num_rows))
    except Exception as exc:  # a layout Arrow's reader cannot take: say so, keep the other rows
        rows.append((f"arrow: {type(exc).__name__}: {str(exc)[:80]}", float("nan"), None))
    del lines
    rows.append(("python + imports", _imports_s(args.repeat), None))

    budget = args.hta_s / args.target if args.hta_s else None
    print(f"{args.file} ({len(data) / 1e6:.0f} MB of JSON), fastest of {args.repeat}, {os.cpu_count()} cores")
    if budget is not None:
        print(f"{args.target:g}x HTA's {args.hta_s:g} s allows {budget:.2f} s for the whole report")
    print(f"{'reader':<22} {'s':>7} {'events':>9}" + ("  share of the budget" if budget else ""))
    for name, s, n in rows:
        share = f"  {s / budget:.0%}" if budget and s == s else ""
        print(f"{name:<22} {s:7.2f} {n if n is not None else '':>9}{share}")
    if args.json:
        args.json.write_text(json.dumps({"file": str(args.file), "json_bytes": len(data), "cores": os.cpu_count(),
                                         "hta_s": args.hta_s, "target": args.target, "budget_s": budget,
                                         "rows": [{"reader": r, "seconds": s, "events": n} for r, s, n in rows]},
                                        indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
