#!/usr/bin/python3
"""Writes the GPT models of the memory benchmark as TorchScript files (Debian's python).

    /usr/bin/python3 bench/memory/make_gpt.py OUT_DIR [--only NAME]

The models are TinyGPT from tests/fixtures/make_fixtures.py (pre-norm blocks, tied lm_head)
at four sizes, GPT-2's initialisation, saved in training mode:

    bytegpt   the README's example (examples/bytegpt.pt is copied, not rebuilt)
    gpt14m    d 384, 8 layers, 6 heads, vocab 256 (bytes), context 128:    ~14 M parameters
    gpt57m    d 768, 8 layers, 12 heads, vocab 256 (bytes), context 128:   ~57 M parameters
    gpt124m   GPT-2 small: d 768, 12 layers, 12 heads, vocab 50257, context 1024: ~124 M
    gpt900m   d 1536, 30 layers, 16 heads, vocab 50257, context 1024:       ~0.93 B (3.7 GB)

Files are written to a temp name and renamed; an existing file is kept.
"""

import argparse
import os
import shutil
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tests", "fixtures"))
import make_fixtures  # noqa: E402  (TinyGPT and gpt_init)

SIZES = {
    "gpt14m": dict(vocab=256, block_size=128, d_model=384, n_layer=8, n_head=6),
    "gpt57m": dict(vocab=256, block_size=128, d_model=768, n_layer=8, n_head=12),
    "gpt124m": dict(vocab=50257, block_size=1024, d_model=768, n_layer=12, n_head=12),
    "gpt900m": dict(vocab=50257, block_size=1024, d_model=1536, n_layer=30, n_head=16),
}


def write(name: str, out_dir: str) -> None:
    path = os.path.join(out_dir, name + ".pt")
    if os.path.exists(path):
        print(f"{path}: exists")
        return
    if name == "bytegpt":
        shutil.copyfile(os.path.join(REPO, "examples", "bytegpt.pt"), path + ".tmp")
    else:
        torch.manual_seed(0)
        model = make_fixtures.gpt_init(make_fixtures.TinyGPT(tie=True, **SIZES[name]))
        torch.jit.save(torch.jit.script(model), path + ".tmp")
    os.replace(path + ".tmp", path)
    params = sum(p.numel() for p in torch.jit.load(path).parameters())
    print(f"{path}: {params / 1e6:.1f} M parameters")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out_dir")
    parser.add_argument("--only", choices=["bytegpt", *SIZES])
    args = parser.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    # gpt900m (the large-model benchmark, bench/run_large) only when asked for: 3.7 GB.
    for name in [args.only] if args.only else ["bytegpt", "gpt14m", "gpt57m", "gpt124m"]:
        write(name, args.out_dir)


if __name__ == "__main__":
    main()
