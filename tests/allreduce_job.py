"""A data-parallel job without DDP: every step multiplies a matrix and all-reduces tensors with torch.distributed
(gloo) directly, as a hand-written loop or a collectives benchmark does; no DistributedDataParallel, no autograd.

Run under torchrun (``python -m torch.distributed.run --standalone --nproc_per_node 2 allreduce_job.py OUT``); the
trace goes to OUT through ``traceinspect.capture.profile``. Tests use it to check that no DDP advice is given where
the trace shows no DDP.
"""

import sys

import torch
import torch.distributed as dist

import traceinspect.capture


def main(out: str, steps: int = 6, tensors: int = 8, numel: int = 1 << 16) -> None:
    dist.init_process_group("gloo")
    torch.manual_seed(dist.get_rank())
    w = torch.randn(256, 256)
    grads = [torch.randn(numel) for _ in range(tensors)]
    with traceinspect.capture.profile(out, wait=1, warmup=1, active=3) as prof:
        for _ in range(steps):
            x = torch.randn(64, 256)
            for _ in range(4):
                x = torch.relu(x @ w)
            for g in grads:
                dist.all_reduce(g)
            prof.step()
    dist.barrier()  # both ranks done (traces written) before gloo is torn down: else one can abort at exit
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
