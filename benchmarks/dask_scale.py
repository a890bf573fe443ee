#!/usr/bin/env python3
"""Hundreds of ranks on a Dask LocalCluster: time, the driver's memory, the straggler found, cross-rank scaling.

    python benchmarks/dask_scale.py                 # 256 ranks, a LocalCluster with one worker per core
    python benchmarks/dask_scale.py --ranks 64 --no-local

The input is made here, once, into benchmarks/data/ (git-ignored): a real 2-rank CPU (gloo) DDP capture whose
rank 1's DataLoader sleeps 2 ms per sample on purpose (``replicate_ranks.capture_source``), then N rank files of
copies of its ranks renumbered (``replicate_ranks.replicate``: the real slow rank as rank 17N/32, every other
rank a copy of the real rank 0; each file marked ``"traceinspect_scaled"``: a copy, not a capture).

Measured: the whole ``--executor dask`` report (wall s), the driver's peak RSS during it (VmHWM of this process,
reset just before the run; it runs the client, the cross-rank stage and the rules; the LocalCluster's workers
are other processes, their peaks listed apart), the local executor on the same folder for comparison (same report?), the
straggler finding (rank, cause), and the cross-rank stage plus rules (``diagnose.engine.finish``) on 64, 256 and
1024 ranks of summaries (copies of the gathered summaries renumbered), to show it grows linearly.
Writes benchmarks/results-dask.md and .json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from replicate_ranks import capture_source, replicate  # noqa: E402


def _status_mb(key: str) -> float:
    """VmRSS / VmHWM (peak) of this process from /proc, in MB."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _reset_peak() -> None:
    """Restart this process's peak-RSS count from its current RSS (Linux: "5" > /proc/self/clear_refs)."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        pass


def _worker_reset() -> None:
    _reset_peak()


def _worker_peak() -> float:
    return _status_mb("VmHWM")


class _Recording:
    """A Dask client that keeps the per-rank summaries the driver receives."""

    def __init__(self, client):
        self.client, self.received = client, []

    def map(self, *a, **k):
        return self.client.map(*a, **k)

    def gather(self, futures):
        out = self.client.gather(futures)
        self.received.extend(out)
        return out


def _strip(d: dict) -> dict:
    return {k: v for k, v in d.items() if k != "source"}


def cross_rank_scaling(summaries: list, sizes: list[int], repeats: int = 3) -> list[dict]:
    """``finish`` (cross-rank stage + rules) on ``n`` ranks of summaries: copies of ``summaries`` renumbered."""
    from traceinspect.diagnose.engine import finish
    from traceinspect.thresholds import Thresholds

    out = []
    for n in sizes:
        ranks = []
        m = len(summaries)
        for i in range(n):
            # Fewer ranks than summaries: an even sample (it keeps the planted slow rank at 17/32); more: cycles.
            ra = summaries[(i * m) // n if n < m else i % m]
            ranks.append(replace(ra, rank=i, world_size=n, distributed={**ra.distributed, "rank": i, "world_size": n},
                                 errors=list(ra.errors)))
        best = None
        for _ in range(repeats):
            t0 = time.perf_counter()
            rep = finish("scaled", ranks, [], n, Thresholds())
            dt = time.perf_counter() - t0
            best = dt if best is None else min(best, dt)
        strag = next((f for f in rep.findings if f.id == "straggler"), None)
        out.append({"ranks": n, "seconds": round(best, 3), "us_per_rank": round(best / n * 1e6),
                    "straggler_ranks": list(strag.ranks) if strag else None})
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", type=int, default=256)
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="LocalCluster worker processes")
    p.add_argument("--active", type=int, default=12, help="active steps of the source capture [12]")
    p.add_argument("--data", type=Path, default=HERE / "data")
    p.add_argument("--no-local", action="store_true", help="skip the local executor's run")
    p.add_argument("--scaling", default="64,256,1024", help="rank counts for the cross-rank stage [64,256,1024]")
    p.add_argument("--out", type=Path, default=HERE / "results-dask.md")
    a = p.parse_args(argv)

    from dask import distributed

    from traceinspect.config import Config
    from traceinspect.run.api import analyze_path
    from traceinspect.load.discover import list_traces
    from traceinspect.run.dask import analyze_with_dask

    src = a.data / f"cpu_slow_rank_a{a.active}"
    if not any(src.glob("*.pt.trace.json*")):
        print(f"capturing the source into {src} (torch CPU build, gloo)", file=sys.stderr)
        capture_source(src, active=a.active)
    folder = a.data / f"ranks{a.ranks}_from_{src.name}"
    slow_at = a.ranks * 17 // 32  # anywhere but first or last
    if len(list(folder.glob("rank*.pt.trace.json"))) != a.ranks:
        replicate(src, folder, a.ranks, slow_at=slow_at)
    files = sorted(folder.glob("rank*.pt.trace.json"))
    json_mb = sum(f.stat().st_size for f in files) / 1e6
    cfg = Config(use_cache=False)
    res: dict = {"ranks": a.ranks, "json_mb": round(json_mb, 1), "slow_rank_planted": slow_at,
                 "workers": a.workers, "source": str(src), "load_before": os.getloadavg()}
    with distributed.LocalCluster(n_workers=a.workers, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cl, distributed.Client(cl) as client:
        client.run(_worker_reset)
        rss_before = _status_mb("VmRSS")
        _reset_peak()
        t0 = time.perf_counter()
        rec = _Recording(client)
        rep = analyze_with_dask(list_traces(folder), cfg.options, cfg.limits, cfg.thresholds, client=rec)
        doc = rep.to_dict()
        res["dask_s"] = round(time.perf_counter() - t0, 1)
        res["driver_peak_rss_mb"] = round(_status_mb("VmHWM"))
        res["driver_rss_before_mb"] = round(rss_before)
        res["worker_peak_rss_mb"] = [round(v) for v in client.run(_worker_peak).values()]
    summaries = [ra for ranks, _ in rec.received for ra in ranks]
    res["summary_rows_per_rank"] = round(sum(len(r.steps) + sum(len(t) for t in r.tables.values())
                                             for r in summaries) / max(1, len(summaries)))
    res["events_per_rank"] = round(sum(r.event_count for r in summaries) / max(1, len(summaries)))
    strag = next((f for f in doc["findings"] if f["id"] == "straggler"), None)
    res["straggler"] = {"ranks": strag["ranks"], "cause": (strag["evidence"].get("cause") or {}).get("metric"),
                        "title": strag["title"]} if strag else None
    if not a.no_local:
        t0 = time.perf_counter()
        local = analyze_path(folder, cfg).to_dict()
        res["local_s"] = round(time.perf_counter() - t0, 1)
        res["same_report_as_local"] = _strip(local) == _strip(doc)
    res["cross_rank"] = cross_rank_scaling(summaries, [int(x) for x in a.scaling.split(",") if x])
    res["load_after"] = os.getloadavg()
    print(json.dumps(res, indent=1))
    lines = [
        "# Many ranks on Dask (benchmarks/dask_scale.py)", "",
        f"{a.ranks} rank files ({json_mb:,.0f} MB of JSON) made of copies of a real 2-rank gloo capture "
        f"(`{src.name}`: rank 1's DataLoader slowed on purpose), the slow rank planted as rank {slow_at}; "
        f"a Dask LocalCluster of {a.workers} worker processes on {os.cpu_count()} cores; load average "
        f"{res['load_before'][0]:.1f} before, {res['load_after'][0]:.1f} after.", "",
        "| what | value |", "| --- | ---: |",
        f"| `--executor dask` report, wall | {res['dask_s']} s |",
        f"| local executor, same folder, wall | {res.get('local_s', '-')} s |",
        f"| same report as the local executor | {res.get('same_report_as_local', '-')} |",
        f"| driver RSS before the run (imports, client) | {res['driver_rss_before_mb']} MB |",
        f"| driver peak RSS during the run | {res['driver_peak_rss_mb']} MB |",
        f"| worker peak RSS | {', '.join(map(str, res['worker_peak_rss_mb']))} MB |",
        f"| events per rank / summary rows per rank | {res['events_per_rank']:,} / {res['summary_rows_per_rank']} |",
        f"| straggler | {res['straggler']['ranks'] if res['straggler'] else None}, cause "
        f"{res['straggler']['cause'] if res['straggler'] else None} |", "",
        "Cross-rank stage and rules (`finish`) on summaries, best of 3:", "",
        "| ranks | s | us per rank |", "| ---: | ---: | ---: |",
    ] + [f"| {c['ranks']} | {c['seconds']} | {c['us_per_rank']:,} |" for c in res["cross_rank"]]
    a.out.write_text("\n".join(lines) + "\n")
    a.out.with_suffix(".json").write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
