"""The per-rank stage on a Dask cluster (``--executor dask``), for jobs with more ranks than one machine should parse.

Each rank's files are decoded and analyzed by one Dask task (``run.local.rank_task``); only the small per-rank
summaries travel back, and the cross-rank stage and the rules run here, exactly as with the local executor, so the
report is the same. Workers must see the trace files under the same paths (a shared file system). Without
``--scheduler`` a local cluster with one worker process per core is started for the run.

Every wait for the cluster is bounded and says what it waited for: the address is checked first (one line for a
malformed one), then the scheduler is asked who it is (``identity``) with a deadline, so a closed port, an HTTP
server or a dashboard port fails in ``SCHEDULER_TIMEOUT_S`` naming the address, and a scheduler without workers
fails in the same time instead of waiting silently for one.
"""

from __future__ import annotations

import asyncio
import re
import sys
import time
from dataclasses import replace
from pathlib import Path

from ..config import RunOptions
from ..errors import UsageError
from ..load.discover import Listing
from ..load.limits import Limits
from ..load.reader import plan
from ..load.services import ProgressFn
from . import services
from .local import done, rank_task
from .pool import worker_count
from .stages import Report
from ..thresholds import Thresholds


# How long to wait for a scheduler that does not answer: long enough for a busy cluster, short enough to be
# told of a wrong address before a user gives up.
SCHEDULER_TIMEOUT_S = 10
_ADDRESS = re.compile(r"(?:(?P<scheme>tcp|tls|ws|wss)://)?(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(?P<port>\d{1,5})/?")


def scheduler_address(address: str) -> str:
    """``address`` as ``scheme://host:port`` (``host:port`` means tcp); a malformed one is a ``UsageError``."""
    m = _ADDRESS.fullmatch(address.strip())
    if not m or not 0 < int(m["port"]) < 65536:
        raise UsageError(f"--scheduler {address!r}: not a Dask scheduler address (expected tcp://HOST:PORT, "
                         f"e.g. tcp://10.0.0.5:8786)")
    return f"{m['scheme'] or 'tcp'}://{m['host']}:{int(m['port'])}"


async def _identity(address: str, deadline: float) -> dict:
    """The scheduler's ``identity`` reply, once it lists a worker; raises UsageError by ``deadline``."""
    from distributed.comm import connect

    def left() -> float:
        return max(deadline - time.monotonic(), 0.1)

    waited = f"waited {SCHEDULER_TIMEOUT_S} s"
    while True:
        try:
            comm = await asyncio.wait_for(connect(address, timeout=left()), left() + 1)
        except Exception as exc:  # noqa: BLE001 - refused, unreachable, timed out, a peer that breaks the handshake
            if isinstance(exc, (asyncio.TimeoutError, TimeoutError)) or "timed out" in str(exc).lower():
                raise UsageError(f"cannot reach the Dask scheduler {address}: no answer ({waited} to connect and for "
                                 f"Dask's handshake: is it a scheduler's port, and reachable from here?)") from None
            reason = " ".join(str(exc).split()) or type(exc).__name__
            raise UsageError(f"cannot reach the Dask scheduler {address}: {reason}") from None
        try:
            await comm.write({"op": "identity"})
            reply = await asyncio.wait_for(comm.read(), left())
        except Exception:  # noqa: BLE001 - no reply in time, or one that is not Dask's protocol
            raise UsageError(f"{address} did not answer as a Dask scheduler ({waited} for its reply to Dask's "
                             f"handshake: is it a scheduler's port?)") from None
        finally:
            comm.abort()
        if not isinstance(reply, dict) or reply.get("type") != "Scheduler":
            raise UsageError(f"{address} is not a Dask scheduler (it answered, but not as one)")
        if reply.get("workers"):
            return reply
        if time.monotonic() + 0.5 >= deadline:
            raise UsageError(f"the Dask scheduler {address} has no workers ({waited} for one to join)")
        await asyncio.sleep(0.5)


def check_scheduler(address: str, timeout: float = SCHEDULER_TIMEOUT_S) -> dict:
    """Connect to the scheduler at ``address`` and wait, at most ``timeout`` seconds in all, for it to answer as a
    Dask scheduler with at least one worker; its identity. One line naming the address otherwise."""
    return asyncio.run(_identity(address, time.monotonic() + timeout))


def analyze_with_dask(listing: Listing, options: RunOptions, limits: Limits, thresholds: Thresholds,
                      progress: ProgressFn | None = None, client=None) -> Report:
    """Report on run ``options.run`` of the listed folder with the per-rank stage on the Dask cluster at
    ``options.scheduler`` (None: a local cluster for the run), or on ``client``'s."""
    from .._optional import import_optional

    distributed = import_optional("dask.distributed", "--executor dask")
    Client, LocalCluster = distributed.Client, distributed.LocalCluster
    scheduler = options.scheduler
    if client is None and scheduler:
        scheduler = scheduler_address(scheduler)
    work = plan(listing, services.workers(options), limits, options.run, resolve=True)
    ranks_of = [r for r, _ in work.groups]
    groups = [fs for _, fs in work.groups]
    skipped = work.skipped
    own = client is None
    cluster = None
    if own:
        try:
            if scheduler:
                # Said before the wait, so an unreachable address is not a silent pause.
                print(f"traceinspect: connecting to the Dask scheduler {scheduler} (waiting up to "
                      f"{SCHEDULER_TIMEOUT_S} s for it and a worker)", file=sys.stderr, flush=True)
                check_scheduler(scheduler)
                client = Client(scheduler, timeout=f"{SCHEDULER_TIMEOUT_S}s")
            else:
                cluster = LocalCluster(n_workers=worker_count(options), threads_per_worker=1, processes=True,
                                       dashboard_address=None)
                client = Client(cluster)
        except (OSError, TimeoutError) as exc:
            raise UsageError(f"cannot reach the Dask scheduler {scheduler}: {exc}") from None
    try:
        # One core per task: Dask workers are daemonic and must not start process pools of their own.
        n = len(groups)
        one = replace(options, workers=1)
        futures = client.map(rank_task, groups, [one] * n, [limits] * n, [thresholds] * n, [None] * n, ranks_of,
                             pure=False)
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
    return done(work.source, ranks, skipped, work.runs, thresholds)
