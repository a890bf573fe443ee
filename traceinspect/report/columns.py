"""The registry of step fields: every per-step number the JSON report carries, declared once (name, type, unit,
what it means, which analysis makes it).

``report/build.py`` copies exactly these columns from a rank's step table into ``ranks[].steps[]``, and
``report/doc.py`` builds the ``StepDoc`` Struct (and so the JSON Schema) from them: a new step column joins the
contract only by being added here. The nested ``breakdown_us`` / ``totals_us`` objects (from the ``bd_``/``tot_``/
``cpu_<category>`` columns) and ``collectives`` are built separately. docs/*.md define each name in full; a test
keeps the table in docs/metrics.md ("Every step field") equal to ``columns_markdown()``.
"""

from __future__ import annotations

from typing import NamedTuple


class Column(NamedTuple):
    name: str
    type: str  # "int", "float" (JSON number: an int or a float), "bool"
    unit: str  # "us", "bytes", "count", "share" (0..1), "GB/s", "index"
    meaning: str
    producer: str  # the analyze module that makes it


_A, _C, _P, _U, _I, _S = "attribution", "collectives", "precision", "utilization", "idle", "issue"
_M = "model_parallel"
_F, _B = "flops", "batch"

STEP_COLUMNS: tuple[Column, ...] = (
    Column("window", "int", "index", "trace file (active window) of the rank the step is in", _A),
    Column("start_us", "float", "us", "step window start: max(cpu_start_us, previous step's end_us)", _A),
    Column("end_us", "float", "us", "step window end: max(cpu_end_us, end of the last GPU work the step launched)", _A),
    Column("cpu_start_us", "float", "us", "start of the ProfilerStep annotation", _A),
    Column("cpu_end_us", "float", "us", "end of the ProfilerStep annotation", _A),
    Column("cpu_step_us", "float", "us", "cpu_end_us - cpu_start_us", _A),
    Column("cpu_issue_us", "float", "us", "the issuing threads' recorded ops and runtime calls in the CPU window, outside syncs and DataLoader waits", _S),
    Column("cpu_capturable_us", "float", "us", "the part of the CPU window a CUDA graph of the model's forward and backward takes off the CPU: its eager ops, compiled code that launches kernels one by one, the Python between them", _S),
    Column("backlog_us", "float", "us", "GPU work queued before the window, in the first step; left out of wall_us and every per-step number", _A),
    Column("h2d_bytes", "int", "bytes", "sum of args.bytes of the step's HtoD copies", _A),
    Column("h2d_time_us", "float", "us", "sum of the step's HtoD copy durations", _A),
    Column("h2d_count", "int", "count", "number of the step's HtoD copies", _A),
    Column("pageable_h2d_bytes", "int", "bytes", "bytes of HtoD copies from pageable memory", _A),
    Column("pageable_h2d_time_us", "float", "us", "duration of HtoD copies from pageable memory", _A),
    Column("pageable_h2d_count", "int", "count", "number of HtoD copies from pageable memory", _A),
    Column("pinned_h2d_bytes", "int", "bytes", "bytes of HtoD copies from pinned memory", _A),
    Column("pinned_h2d_time_us", "float", "us", "duration of HtoD copies from pinned memory", _A),
    Column("pinned_h2d_count", "int", "count", "number of HtoD copies from pinned memory", _A),
    Column("d2h_bytes", "int", "bytes", "sum of args.bytes of the step's DtoH copies", _A),
    Column("d2h_time_us", "float", "us", "sum of the step's DtoH copy durations", _A),
    Column("d2h_count", "int", "count", "number of the step's DtoH copies", _A),
    Column("pageable_d2h_bytes", "int", "bytes", "bytes of DtoH copies into pageable memory", _A),
    Column("pageable_d2h_time_us", "float", "us", "duration of DtoH copies into pageable memory", _A),
    Column("pageable_d2h_count", "int", "count", "number of DtoH copies into pageable memory", _A),
    Column("d2d_bytes", "int", "bytes", "sum of args.bytes of the step's DtoD/PtoP copies", _A),
    Column("d2d_time_us", "float", "us", "sum of the step's DtoD/PtoP copy durations", _A),
    Column("d2d_count", "int", "count", "number of the step's DtoD/PtoP copies", _A),
    Column("dataloader_us", "float", "us", "union of DataLoader __next__ annotations in the step's CPU window", _A),
    Column("dataloader_count", "int", "count", "DataLoader __next__ annotations starting in the step's CPU window", _A),
    Column("dataloader_worker_count", "int", "count", "of those, batches from worker processes (_MultiProcessingDataLoaderIter)", _A),
    Column("kernel_count", "int", "count", "kernels the step owns", _A),
    Column("compute_kernel_count", "int", "count", "compute (non-NCCL) kernels the step owns", _A),
    Column("compute_kernel_time_us", "float", "us", "sum of compute kernel durations", _A),
    Column("short_kernel_count", "int", "count", "compute kernels shorter than short_kernel_us", _A),
    Column("median_kernel_us", "float", "us", "median compute kernel duration (null without kernels)", _A),
    Column("sync_us", "float", "us", "union of blocking runtime calls in the CPU window", _A),
    Column("sync_count", "int", "count", "number of blocking runtime calls in the CPU window", _A),
    Column("idle_dataloader_us", "float", "us", "GPU idle while a DataLoader wait was in progress", _A),
    Column("idle_sync_us", "float", "us", "GPU idle while a blocking call was in progress (and no loader wait)", _A),
    Column("idle_other_us", "float", "us", "the rest of the GPU idle time", _A),
    Column("comm_calls", "int", "count", "collectives issued in the step", _C),
    Column("comm_unknown_size_count", "int", "count", "of those collectives, ones whose size the trace does not record", _C),
    Column("comm_bytes", "float", "bytes", "sum of the collectives' bytes (null if any is unknown)", _C),
    Column("comm_time_us", "float", "us", "sum of the collectives' durations", _C),
    Column("comm_small_time_share", "float", "share", "share of comm_time_us in collectives below small_bucket_bytes", _C),
    Column("allreduce_count", "int", "count", "all-reduces issued in the step", _C),
    Column("allreduce_bytes", "float", "bytes", "sum of the all-reduces' bytes", _C),
    Column("allreduce_time_us", "float", "us", "sum of the all-reduces' durations", _C),
    Column("allreduce_busbw_gbps", "float", "GB/s", "bus bandwidth of the step's all-reduces", _C),
    Column("grad_allreduce_count", "int", "count", "gradient all-reduces in the step", _C),
    Column("grad_comm_time_us", "float", "us", "sum of the gradient all-reduces' durations", _C),
    Column("allreduce_rounds", "int", "count", "rounds of gradient all-reduces (1 with no_sync)", _C),
    Column("bucket_count", "int", "count", "buckets per round (the last round's gradient all-reduces)", _C),
    Column("bucket_min_bytes", "float", "bytes", "smallest bucket of the last round", _C),
    Column("bucket_median_bytes", "float", "bytes", "median bucket of the last round", _C),
    Column("bucket_max_bytes", "float", "bytes", "largest bucket of the last round", _C),
    Column("grad_bytes", "float", "bytes", "sum of the last round's bucket sizes", _C),
    Column("small_bucket_count", "float", "count", "buckets of the last round below small_bucket_bytes", _C),
    Column("redundant_grad_bytes", "float", "bytes", "bytes of the other rounds (what no_sync would not send)", _C),
    Column("backward_passes", "int", "count", "backward passes in the step", _C),
    Column("comm_tail_us", "float", "us", "exposed communication tail of the last round", _C),
    Column("comm_tail_total_us", "float", "us", "comm_tail_us summed over every round of the step", _C),
    Column("comm_exposed_us", "float", "us", "communication the step waits for", _C),
    Column("matmul_count", "int", "count", "matrix-multiply kernels in the step", _P),
    Column("matmul_us", "float", "us", "sum of matrix-multiply kernel durations", _P),
    Column("matmul_fp32_us", "float", "us", "... of them in fp32 (FFMA)", _P),
    Column("matmul_tf32_us", "float", "us", "... in TF32", _P),
    Column("matmul_bf16_us", "float", "us", "... in bf16", _P),
    Column("matmul_fp16_us", "float", "us", "... in fp16", _P),
    Column("matmul_fp8_us", "float", "us", "... in fp8", _P),
    Column("matmul_int8_us", "float", "us", "... in int8", _P),
    Column("matmul_unknown_us", "float", "us", "... of unresolved precision", _P),
    Column("matmul_16bit_us", "float", "us", "bf16 + fp16 + unresolved 16-bit matrix kernels", _P),
    Column("launch_count", "int", "count", "kernel-launch runtime calls in the step's CPU window", _U),
    Column("launch_call_us", "float", "us", "summed duration of those launch calls", _U),
    Column("graph_launch_count", "int", "count", "of the launch calls, CUDA/HIP graph replays (one runs a whole graph)", _U),
    Column("launch_gpu_median_us", "float", "us", "median GPU time a launch call ran (a graph replay: all its kernels)", _U),
    Column("kernels_per_launch", "float", "count", "kernels run per launch call (1 without graph replays)", _U),
    Column("smi_util", "float", "share", "share of the step window with a kernel running", _U),
    Column("idle_queued_us", "float", "us", "GPU idle while work issued to it had not started (behind an event or stream wait)", _I),
    Column("idle_blocked_us", "float", "us", "GPU idle, nothing queued, while the CPU was blocked in a synchronizing call", _I),
    Column("idle_first_launch_us", "float", "us", "GPU idle, nothing queued, during a first-use launch call (far above the median)", _I),
    Column("idle_loader_us", "float", "us", "GPU idle, nothing queued, while the loop waited for the DataLoader", _I),
    Column("idle_launch_us", "float", "us", "GPU idle, nothing queued, while the CPU issued (launch overhead)", _I),
    Column("idle_launch_capturable_us", "float", "us", "the part of idle_launch_us in cpu_capturable_us time: launch overhead a CUDA graph of the model removes", _I),
    Column("idle_host_us", "float", "us", "the rest of the idle time: the CPU ran no recorded op", _I),
    Column("first_launch_count", "int", "count", "first-use launch calls in the step's CPU window", _I),
    Column("pp_bubble_us", "float", "us", "pipeline bubble: the training thread in sends and receives to or from its neighbour stages (CPU basis)", _M),
    Column("pp_bubble_share", "float", "share", "pp_bubble_us / wall_us", _M),
    Column("pp_transfer_count", "int", "count", "send and receive calls of the step (c10d::send, c10d::recv_)", _M),
    Column("tp_comm_exposed_us", "float", "us", "tensor-parallel collectives the step waits for: the training thread in functional collectives and their waits (CPU basis)", _M),
    Column("tp_comm_share", "float", "share", "tp_comm_exposed_us / wall_us", _M),
    Column("tp_collective_count", "int", "count", "functional collectives of the step (_c10d_functional::all_reduce, ...)", _M),
    Column("model_flops", "float", "count", "FLOPs of the step's matrix multiplies, convolutions and attention, forward and backward, from the recorded shapes (torch's flop counter's formulas); null: shapes not recorded", _F),
    Column("causal_skipped_flops", "float", "count", "the half of causal attention's FLOPs that a causal kernel skips (counted in model_flops)", _F),
    Column("flop_ops", "int", "count", "ops counted in model_flops", _F),
    Column("flop_ops_unknown", "int", "count", "ops of a counted kind whose recorded arguments do not give their FLOPs", _F),
    Column("input_batch", "float", "count", "leading dimension of the model's first input op in the step (recorded shapes)", _B),
    Column("input_tokens", "float", "count", "batch x sequence of that input where it is integer token ids [batch, seq]", _B),
    Column("forward_passes", "float", "count", "times the step runs that input op with the same shapes outside a backward pass", _B),
)

BY_NAME = {c.name: c for c in STEP_COLUMNS}

# Step-table columns that are not flat step fields: the nested breakdown/totals and what build.py writes itself.
NESTED_PREFIXES = ("bd_", "tot_", "cpu_")
HEAD_FIELDS = ("step", "wall_us", "gpu_busy_us", "synthetic")


def columns_markdown() -> str:
    """The registry as the Markdown table docs/metrics.md carries (a test keeps the two equal)."""
    rows = ["| field | type | unit | meaning | made by |", "| --- | --- | --- | --- | --- |"]
    rows += [f"| `{c.name}` | {c.type} | {c.unit} | {c.meaning} | `analyze/{c.producer}.py` |" for c in STEP_COLUMNS]
    return "\n".join(rows) + "\n"
