#!/usr/bin/python3
"""The step-time references of bench/run_step: the TorchScript model mfsdp trains, trained on
batches of the same shape (uniform random token ids below the vocabulary, next-token
targets, as `mfsdp run --data synthetic` draws them) with the same AdamW, by

  ddp     PyTorch DistributedDataParallel over Gloo, one process per rank, one thread each;
  single  one process with --threads threads on the whole global batch (no communication).

    /usr/bin/python3 bench/step/reference_step.py MODEL --mode ddp --ranks 2 --batch 4 \
        --seq 128 --steps 25 [--threads 1] [--drop 1] [--port P]

--batch is sequences per rank (ddp) or the global batch (single). Every rank prints one JSON
line: its step times in ms (zero_grad, forward, loss, backward with DDP's bucketed
all-reduces, the optimizer step and an all-reduce of the loss, as mfsdp reports it), its
minor page faults per step after the first --drop steps and its peak RSS. Debian's python3-torch links the
same LibTorch 1.13 and OpenBLAS as mfsdp. bench/run_step sets the thread variables before
Python starts (OpenBLAS reads them when it loads): OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
for ddp, as `mfsdp run` gives each of 2 workers on 2 cores, and 2 of each with
OMP_WAIT_POLICY=PASSIVE for single. Not part of the test suite.
"""

import argparse
import json
import os
import resource
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F


def train(rank: int, args, world: int) -> None:
    torch.set_num_threads(args.threads)
    model = torch.jit.load(args.model)
    model.train()
    net = torch.nn.parallel.DistributedDataParallel(model) if world > 1 else model
    params = [p for p in net.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4)
    vocab = args.vocab or model.wte.weight.shape[0]
    gen = torch.Generator().manual_seed(1234 + rank)
    # Drawn before the loop, outside the timed steps (mfsdp's loader runs between steps).
    batches = [torch.randint(0, vocab, (args.batch, args.seq + 1), generator=gen)
               for _ in range(args.steps)]
    times = []
    faults = 0
    for step, tokens in enumerate(batches):
        if step == args.drop:
            faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        logits = net(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), tokens[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        reported = loss.detach().clone()
        if world > 1:
            dist.all_reduce(reported)
        reported.item()
        times.append((time.perf_counter() - start) * 1e3)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    line = json.dumps({"rank": rank, "step_ms": times,
                       "page_faults_per_step": (usage.ru_minflt - faults) / max(1, args.steps - args.drop),
                       "peak_rss_bytes": usage.ru_maxrss * 1024})
    # One write(2) per line: the ranks share stdout, and print() may split a line in two.
    os.write(1, (line + "\n").encode())


def ddp_worker(rank: int, args) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(args.port)
    dist.init_process_group("gloo", rank=rank, world_size=args.ranks)
    train(rank, args, args.ranks)
    dist.destroy_process_group()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("--mode", choices=["ddp", "single"], default="ddp")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--steps", type=int, default=25)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--drop", type=int, default=1, help="steps before page faults are counted")
    p.add_argument("--vocab", type=int, default=0)
    p.add_argument("--port", type=int, default=29611)
    args = p.parse_args()
    if args.mode == "single":
        train(0, args, 1)
    else:
        mp.spawn(ddp_worker, args=(args,), nprocs=args.ranks, join=True)


if __name__ == "__main__":
    sys.exit(main())
