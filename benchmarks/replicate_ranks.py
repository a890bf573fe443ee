#!/usr/bin/env python3
"""Many ranks from a real multi-rank capture: copies of its ranks under new rank numbers, for scale runs.

``replicate(source_dir, out_dir, ranks=N, slow_at=S)`` writes N rank files. File S is a copy of the source's slow
rank (by default its highest rank), every other file a copy of its rank 0; each gets ``distributedInfo.rank`` = its
number and ``world_size`` = N, and a top-level ``"traceinspect_scaled"`` object that says it is a copy of a real
rank (which file, which rank), not a capture. Events are kept as the profiler wrote them (the layout, the ids, the
times), so the copies of rank 0 are identical to each other and rank S is as late as the real slow rank was: in
the real run, a 2-rank CPU (gloo) DDP capture where the workload made one rank's DataLoader sleep on purpose
(``--set item_delay_ms=2 --set slow_rank=1``), that rank arrives late at every collective.

The source capture is made by ``capture_source`` (torch's CPU build, gloo; a few seconds on 2 cores)::

    python benchmarks/replicate_ranks.py --capture benchmarks/data/cpu_slow_rank
    python benchmarks/replicate_ranks.py benchmarks/data/cpu_slow_rank --out-dir DIR --ranks 256 [--slow-at 137]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from scale_trace import (_distributed_info, build_layout, header_and_trailer, load_source,  # noqa: E402
                         plan_copies, write_body)

#: Workload knobs of the source capture: the optimized preset, small batches, rank 1's loader 2 ms per sample slower.
SLOW_RANK_KNOBS = {"batch_size": 8, "num_workers": 0, "item_delay_ms": 2, "slow_rank": 1}


def capture_source(out_dir: str | Path, active: int = 5) -> Path:
    """A real 2-rank gloo capture whose rank 1 is slow on purpose (its DataLoader sleeps 2 ms per sample)."""
    from traceinspect.cli.capture import run_capture

    out = Path(out_dir)
    run_capture(out, preset="optimized", nproc=2, overrides=dict(SLOW_RANK_KNOBS), model="mlp", steps=0, wait=1,
                warmup=1, active=active, repeat=1, overwrite=True, timeout=300)
    return out


def _rank_of(path: Path) -> int:
    opener = __import__("gzip").open if path.name.endswith(".gz") else open
    with opener(path, "rt") as fh:
        return int(json.load(fh)["distributedInfo"]["rank"])


def _render(src_path: Path) -> tuple:
    src = load_source(src_path)
    layout = build_layout(src, plan_copies(src))
    dist = next((v for k, _, v in src.top if k == "distributedInfo"), None)
    return src, layout, dist


def _write(path: Path, src, meta: dict, dist: dict, body: Path) -> None:
    head, tail = header_and_trailer(src, meta, dist)
    with open(path, "wb") as fh:
        fh.write(head.encode())
        with open(body, "rb") as bf:
            shutil.copyfileobj(bf, fh, 16 << 20)
        fh.write(tail.encode())


def replicate(source_dir: str | Path, out_dir: str | Path, ranks: int, slow_at: int | None = None,
              slow_source_rank: int | None = None) -> list[Path]:
    """Write ``ranks`` rank files into ``out_dir`` (see the module docstring); returns their paths in rank order."""
    files = sorted(p for p in Path(source_dir).glob("*.json*") if ".pt.trace.json" in p.name)
    by_rank = {_rank_of(p): p for p in files}
    if 0 not in by_rank or len(by_rank) < 2:
        raise SystemExit(f"{source_dir}: need a multi-rank capture with a rank 0, found ranks {sorted(by_rank)}")
    slow_source_rank = max(by_rank) if slow_source_rank is None else slow_source_rank
    slow_at = ranks // 2 if slow_at is None else slow_at
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for source_rank in (0, slow_source_rank):
        src, layout, dist_base = _render(by_rank[source_rank])
        body = out / f".body-{source_rank}.tmp"
        with open(body, "wb") as bf:
            write_body(layout, 1, bf)
        try:
            targets = [slow_at] if source_rank == slow_source_rank else [r for r in range(ranks) if r != slow_at]
            for r in targets:
                meta = {"source": str(by_rank[source_rank]), "source_rank": source_rank,
                        "note": "copy of a real rank under another rank number, for scale runs; not a capture"}
                path = out / f"rank{r}.pt.trace.json"
                _write(path, src, meta, _distributed_info(dist_base, r, ranks), body)
                written.append((r, path))
        finally:
            body.unlink(missing_ok=True)
    return [p for _, p in sorted(written)]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("source", nargs="?", help="a real multi-rank capture folder")
    p.add_argument("--capture", metavar="DIR", help="capture the slow-rank source into DIR and exit")
    p.add_argument("--out-dir")
    p.add_argument("--ranks", type=int, default=256)
    p.add_argument("--slow-at", type=int, help="rank number of the slow copy [ranks // 2]")
    a = p.parse_args(argv)
    if a.capture:
        print(capture_source(a.capture))
        return 0
    if not a.source or not a.out_dir:
        p.error("give SOURCE and --out-dir (or --capture DIR)")
    files = replicate(a.source, a.out_dir, a.ranks, a.slow_at)
    print(json.dumps({"files": len(files), "bytes": sum(f.stat().st_size for f in files)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
