"""The per-rank stage on a Dask cluster (``--executor dask``), for jobs with more ranks than one machine should parse.

Each rank's files are decoded and analyzed by one Dask task (``run.local.rank_task``); only the small per-rank
summaries travel back, and the cross-rank stage and the rules run here, exactly as with the local executor, so the
report is the same. Workers must see the trace files under the same paths (a shared file system). Without
``--scheduler`` a local cluster with one worker process per core is started for the run.
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path

from ..config import Config, DEFAULT
from ..errors import UsageError
from ..load.services import ProgressFn
from .local import done, plan, rank_task
from .pool import worker_count
from .stages import Report


# How long to wait for a scheduler that does not answer: long enough for a busy cluster, short enough to be
# told of a wrong address before a user gives up.
SCHEDULER_TIMEOUT_S = 10

def analyze_with_dask(path: str | os.PathLike, config: Config = DEFAULT, scheduler: str | None = None,
                      progress: ProgressFn | None = None, client=None, run: int | None = None) -> Report:
    from .._optional import import_optional

    distributed = import_optional("dask.distributed", "--executor dask")
    Client, LocalCluster = distributed.Client, distributed.LocalCluster
    plan_groups, skipped, runs = plan(path, config, run, resolve=True)
    ranks_of = [r for r, _ in plan_groups]
    groups = [fs for _, fs in plan_groups]
    own = client is None
    cluster = None
    if own:
        try:
            if scheduler:
                # Said before the wait, so an unreachable address is not a silent pause.
                print(f"traceinspect: connecting to the Dask scheduler {scheduler} (waiting up to "
                      f"{SCHEDULER_TIMEOUT_S} s)", file=sys.stderr, flush=True)
                client = Client(scheduler, timeout=f"{SCHEDULER_TIMEOUT_S}s")
            else:
                cluster = LocalCluster(n_workers=worker_count(config), threads_per_worker=1, processes=True,
                                       dashboard_address=None)
                client = Client(cluster)
        except (OSError, TimeoutError) as exc:
            raise UsageError(f"cannot reach the Dask scheduler {scheduler}: {exc}") from None
    try:
        # One core per task: Dask workers are daemonic and must not start process pools of their own.
        n = len(groups)
        futures = client.map(rank_task, groups, [replace(config, workers=1)] * n, [None] * n, ranks_of, pure=False)
        ranks = []
        for fs, (r, s) in zip(groups, client.gather(futures)):
            ranks.extend(r)
            skipped.extend(s)
            if progress:
                for f in fs:
                    progress(f, Path(f).stat().st_size, 0)
    finally:
        if own:
            client.close()
            if cluster is not None:
                cluster.close()
    return done(path, ranks, skipped, runs, config)
