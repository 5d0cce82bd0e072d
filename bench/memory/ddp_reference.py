#!/usr/bin/python3
"""The baseline of the memory benchmark: PyTorch DDP over Gloo on the same TorchScript model,
optimizer and batch shape as the mfsdp run, one process per rank on this machine.

    /usr/bin/python3 bench/memory/ddp_reference.py MODEL --ranks 2 --batch 2 --seq 64 \
        --steps 5 [--optimizer adamw|sgd] [--vocab V]

Every rank prints one JSON line: its runtime base (RSS after torch is imported and the
process group exists, before the model loads) and its peak RSS over the run. Debian's
python3-torch links the same LibTorch 1.13 as mfsdp. Not part of the test suite.
"""

import argparse
import json
import os
import resource
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F


def rss_bytes(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def worker(rank: int, args) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(args.port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=args.ranks)
    torch.zeros(1).sum()
    base = rss_bytes("VmRSS")
    model = torch.jit.load(args.model)
    model.train()
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    params = [p for p in ddp.parameters() if p.requires_grad]
    if args.optimizer == "adamw":
        opt = torch.optim.AdamW(params, lr=1e-4)
    else:
        opt = torch.optim.SGD(params, lr=1e-3)
    vocab = args.vocab or model.wte.weight.shape[0]
    gen = torch.Generator().manual_seed(1234 + rank)
    for _ in range(args.steps):
        tokens = torch.randint(0, vocab, (args.batch, args.seq + 1), generator=gen)
        logits = ddp(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), tokens[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    line = json.dumps({"rank": rank, "base_rss_bytes": base, "peak_rss_bytes": peak,
                       "final_rss_bytes": rss_bytes("VmRSS")})
    # One write(2) per line: the ranks share stdout, and print() may split a line in two.
    os.write(1, (line + "\n").encode())
    dist.destroy_process_group()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--batch", type=int, default=2, help="sequences per rank")
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--optimizer", choices=["adamw", "sgd"], default="adamw")
    p.add_argument("--vocab", type=int, default=0)
    p.add_argument("--port", type=int, default=29611)
    args = p.parse_args()
    mp.spawn(worker, args=(args,), nprocs=args.ranks, join=True)


if __name__ == "__main__":
    sys.exit(main())
