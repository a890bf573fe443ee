"""Capture a real trace of CUDA graph replays (one cudaGraphLaunch runs a whole forward pass of many small layers).

Usage: python3 scripts/gpu_graph_trace.py OUT_DIR   (a machine with a CUDA GPU). Writes one Chrome trace with
tensorboard_trace_handler, 6 active steps, each step 4 graph replays.
"""
import sys

import torch
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

out = sys.argv[1] if len(sys.argv) > 1 else "./log/graph"
model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU()) for _ in range(64)])
model = model.cuda().eval()
static_x = torch.randn(64, 256, device="cuda")
s = torch.cuda.Stream()
s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s), torch.no_grad():
    for _ in range(3):
        model(static_x)
torch.cuda.current_stream().wait_stream(s)
graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph), torch.no_grad():
    static_y = model(static_x)
sched = schedule(wait=1, warmup=1, active=6, repeat=1)
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], schedule=sched,
             on_trace_ready=tensorboard_trace_handler(out, worker_name="graph", use_gzip=True)) as prof:
    for _ in range(9):
        for _ in range(4):
            static_x.copy_(torch.randn(64, 256, device="cuda"))
            graph.replay()
        torch.cuda.synchronize()
        prof.step()
print("wrote", out)
