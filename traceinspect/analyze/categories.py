"""The time categories, defined once: the keys of ``breakdown_us`` and ``totals_us`` in the JSON report.

Standard library only, so the pandas-free paths (a saved or cached report, the diff of two saved reports) name the
categories from here too. Orders are priority orders: an instant where several categories run is charged to the
first one (docs/metrics.md).
"""

# GPU categories (``totals_us``), in priority order.
GPU_CATEGORIES = ("compute", "comm", "h2d", "d2h", "d2d", "memset")
# The exclusive GPU breakdown (``breakdown_us`` of a GPU rank): each category while nothing above it runs, then idle.
EXPOSED_NAMES = ("compute", "comm_exposed", "h2d_exposed", "d2h_exposed", "d2d_exposed", "memset_exposed")
GPU_BREAKDOWN = (*EXPOSED_NAMES, "idle")
# CPU-only traces (gloo): the training thread's time (``breakdown_us`` of a CPU rank), in priority order.
CPU_CATEGORIES = ("dataloader", "comm", "optimizer", "backward", "forward", "other")
