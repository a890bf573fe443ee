"""What the renderers call things: categories in display order, their labels, colours and units, in one place.

Every renderer (terminal, Markdown, HTML, plots, TensorBoard) and the diff read their names from here, so a
category is called and coloured the same way everywhere. The keys are the JSON report's keys
(``breakdown_us`` of a step; the timeline's GPU categories).
"""

from __future__ import annotations

# Colorblind-safe (Okabe-Ito, then Tol's muted colours). A breakdown key ending in "_exposed" has the colour of its
# category ("comm_exposed" is "comm").
PALETTE: dict[str, str] = {
    # GPU categories
    "compute": "#0072B2",
    "comm": "#E69F00",
    "h2d": "#D55E00",
    "d2h": "#CC79A7",
    "d2d": "#009E73",
    "memset": "#F0E442",
    "idle": "#C8C8C8",
    # CPU-only (training thread) categories
    "dataloader": "#882255",
    "forward": "#56B4E9",
    "backward": "#332288",
    "optimizer": "#44AA99",
    "other": "#8C8C8C",
    # marks
    "wait": "#999933",  # waiting for other ranks at collectives (cross-rank)
    "pageable": "#000000",  # marker of pageable copies
    "projected": "#137333",  # the waterfall's projected step
    "measured": "#5F6368",  # the waterfall's measured step
}

# The breakdown of a GPU step, in display order: (key, short column header, label). The columns add up to the step.
GPU_BREAKDOWN = (
    ("compute", "comp", "compute"),
    ("comm_exposed", "comm", "exposed comm"),
    ("h2d_exposed", "h2d", "exposed H2D copy"),
    ("d2h_exposed", "d2h", "exposed D2H copy"),
    ("d2d_exposed", "d2d", "exposed D2D copy"),
    ("memset_exposed", "mset", "exposed memset"),
    ("idle", "idle", "idle"),
)
# The breakdown of a CPU-only step (the training thread), in display order.
CPU_BREAKDOWN = (
    ("dataloader", "load", "dataloader"),
    ("forward", "fwd", "forward"),
    ("backward", "bwd", "backward"),
    ("comm", "comm", "comm"),
    ("optimizer", "optim", "optimizer"),
    ("other", "other", "other"),
)
# The GPU activity a timeline draws (the breakdown's categories before exposure), in priority order: an instant
# where several run counts for the first (the breakdown's rule, docs/metrics.md).
TIMELINE = (
    ("compute", "compute"),
    ("comm", "NCCL / comm"),
    ("h2d", "H2D copy"),
    ("d2h", "D2H copy"),
    ("d2d", "D2D copy"),
    ("memset", "memset"),
)

LABELS: dict[str, str] = {
    **dict(TIMELINE),
    **{k: lab for k, _, lab in GPU_BREAKDOWN},
    **{k: lab for k, _, lab in CPU_BREAKDOWN},
    "wall": "step (wall)",
    "dataloader_wait": "CPU: dataloader wait",
    "sync_wait": "CPU: blocked in sync",
}

GPU_KEYS = tuple(k for k, _, _ in GPU_BREAKDOWN)
CPU_KEYS = tuple(k for k, _, _ in CPU_BREAKDOWN)
TIMELINE_KEYS = tuple(k for k, _ in TIMELINE)

# The per-step table's extra columns (after the breakdown), as (key, header, unit); the unit names the formatter.
STEP_EXTRA_GPU = (
    ("gpu_busy_us", "busy ms", "ms"),
    ("h2d_bytes", "H2D MB", "MB"),
    ("pageable_h2d_bytes", "pgbl MB", "MB"),
    ("d2h_bytes", "D2H MB", "MB"),
)
STEP_EXTRA = (("dataloader_us", "load ms", "ms"),)

SYNTHETIC_NOTE = "* a whole trace window without ProfilerStep annotations, taken as one step."

# The sections every renderer shows, in this order (the HTML's anchors are these keys).
SECTIONS = (
    ("verdict", "Verdict"),
    ("waterfall", "Where the step could go"),
    ("findings", "Findings"),
    ("steps", "Ranks and steps"),
    ("utilization", "nvidia-smi view"),
    ("skipped", "Skipped files"),
)


def breakdown(basis: str) -> tuple[tuple[str, str, str], ...]:
    return GPU_BREAKDOWN if basis == "gpu" else CPU_BREAKDOWN


def color(key: str) -> str:
    """The colour of a category or breakdown key (``comm_exposed`` -> the ``comm`` colour)."""
    base = key[: -len("_exposed")] if key.endswith("_exposed") else key
    return PALETTE.get(base, "#444444")


def label(key: str) -> str:
    return LABELS.get(key, key.replace("_", " "))
