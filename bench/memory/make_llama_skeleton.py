#!/usr/bin/python3
"""Writes a Llama-shaped decoder as a TorchScript file (Debian's python and torch 1.13), by
default as a skeleton: built on the meta device, scripted and saved, so the file holds the
model's code, structure, shapes and dtypes but no values (a few hundred KB for any size).

    /usr/bin/python3 bench/memory/make_llama_skeleton.py OUT.pt [--preset NAME] [--device D]
        [--attention math|sdpa] [--dim N] [--layers N] [--heads N] [--kv-heads N] [--hidden N]
        [--vocab N]

Presets (flags given after --preset override its fields):

    llama3-70b   Llama-3-70B's shape: 80 blocks, dim 8192, 64 query heads and 8 KV heads
                 (GQA, head dim 128), SwiGLU MLP hidden 28672, RMSNorm, vocab 128256, untied
                 output head: 70,553,706,496 parameters (282 GB as float32; meta only)
    llama3-8b    Llama-3(.1)-8B: 32 blocks, dim 4096, 32/8 heads, hidden 14336, vocab 128256
    llama3-405b  Llama-3.1-405B: 126 blocks, dim 16384, 128/8 heads, hidden 53248, vocab 128256
    llama2-7b    Llama-2-7B: 32 blocks, dim 4096, 32 heads (no GQA), hidden 11008, vocab 32000
    llama2-13b   Llama-2-13B: 40 blocks, dim 5120, 40 heads, hidden 13824, vocab 32000
    llama2-70b   Llama-2-70B: 80 blocks, dim 8192, 64/8 heads, hidden 28672, vocab 32000
    tiny         the same code at dim 64, 2 blocks, 4 query heads, 2 KV heads, hidden 160,
                 vocab 256: 119,104 parameters, for checking (also on --device cpu)

--attention math (default) writes attention out (scores, causal mask, softmax, product);
sdpa calls scaled-dot-product attention with is_causal (torch.nn.functional's; 1.13's private
_scaled_dot_product_attention, so a file made with 1.13 loads only in LibTorch 1.13 and one
made with 2.x only in 2.x), as torchtitan's and Meta's training code do, and builds no mask:
what `mfsdp plan --trace-device meta --fused-attention` times as a GPU's fused kernel.

--device meta (default) writes the skeleton; --device cpu builds real float32 values
(N(0, 0.02) weights, RMSNorm weights 1), only sensible for small shapes: the same code and
structure with values, so that a skeleton's plan can be compared with a full model's.

Module names follow Meta's reference implementation (and its consolidated checkpoints):
tok_embeddings, layers.N.{attention_norm, attention.{wq,wk,wv,wo}, ffn_norm,
feed_forward.{w1,w2,w3}}, norm, output. Rotary embeddings (theta 500000, Meta's interleaved
pairs) and the causal mask are computed in forward from the sequence length, so the model has
no buffers: every tensor of the file is a parameter. forward(tokens: int64 [B, T]) returns the
logits [B, T, vocab].

The file is written to OUT.pt.tmp and renamed. It prints the parameter count counted by hand
from the shape and the one the saved file holds (they must agree: exit 1 if not), and the
file's size.
"""

import argparse
import math
import os
import sys
from typing import Dict

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

PRESETS: Dict[str, Dict[str, int]] = {
    "llama3-70b": dict(dim=8192, layers=80, heads=64, kv_heads=8, hidden=28672, vocab=128256),
    "llama3-8b": dict(dim=4096, layers=32, heads=32, kv_heads=8, hidden=14336, vocab=128256),
    "llama3-405b": dict(dim=16384, layers=126, heads=128, kv_heads=8, hidden=53248,
                        vocab=128256),
    "llama2-7b": dict(dim=4096, layers=32, heads=32, kv_heads=32, hidden=11008, vocab=32000),
    "llama2-13b": dict(dim=5120, layers=40, heads=40, kv_heads=40, hidden=13824, vocab=32000),
    "llama2-70b": dict(dim=8192, layers=80, heads=64, kv_heads=8, hidden=28672, vocab=32000),
    "tiny": dict(dim=64, layers=2, heads=4, kv_heads=2, hidden=160, vocab=256),
}


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float, device: str):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim, device=device))

    def forward(self, x: Tensor) -> Tensor:
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return y.type_as(x) * self.weight


def rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Meta's rotary embedding on interleaved pairs: x [B, T, H, hd], cos/sin [T, hd / 2]."""
    xs = x.float().reshape(x.size(0), x.size(1), x.size(2), -1, 2)
    x0 = xs[..., 0]
    x1 = xs[..., 1]
    c = cos.view(1, cos.size(0), 1, cos.size(1))
    s = sin.view(1, sin.size(0), 1, sin.size(1))
    out = torch.stack([x0 * c - x1 * s, x0 * s + x1 * c], dim=-1)
    return out.flatten(3).type_as(x)


if hasattr(F, "scaled_dot_product_attention"):  # torch 2.x
    def causal_attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
else:  # torch 1.13: (output, weights)
    def causal_attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        return F._scaled_dot_product_attention(q, k, v, None, 0.0, False, True)[0]


class Attention(nn.Module):
    """Grouped-query attention: n_heads query heads share n_kv_heads key/value heads."""

    def __init__(self, dim: int, n_heads: int, n_kv_heads: int, device: str):
        super().__init__()
        self.n_heads = n_heads
        self.n_kv_heads = n_kv_heads
        self.head_dim = dim // n_heads
        self.wq = nn.Linear(dim, n_heads * self.head_dim, bias=False, device=device)
        self.wk = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False, device=device)
        self.wv = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False, device=device)
        self.wo = nn.Linear(n_heads * self.head_dim, dim, bias=False, device=device)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor) -> Tensor:
        B, T, _ = x.size()
        q = self.wq(x).view(B, T, self.n_heads, self.head_dim)
        k = self.wk(x).view(B, T, self.n_kv_heads, self.head_dim)
        v = self.wv(x).view(B, T, self.n_kv_heads, self.head_dim)
        q = rotate(q, cos, sin).transpose(1, 2)
        k = rotate(k, cos, sin).transpose(1, 2)
        v = v.transpose(1, 2)
        rep = self.n_heads // self.n_kv_heads
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        y = self.attend(q, k, v, mask).transpose(1, 2).contiguous().view(B, T, -1)
        return self.wo(y)

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim)) + mask
        att = F.softmax(att.float(), dim=-1).type_as(q)
        return att @ v


class SdpaAttention(Attention):
    """The same attention through scaled-dot-product attention (is_causal: no mask)."""

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
        return causal_attention(q, k, v)


class FeedForward(nn.Module):
    """SwiGLU: w2(silu(w1 x) * w3 x)."""

    def __init__(self, dim: int, hidden: int, device: str):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False, device=device)
        self.w2 = nn.Linear(hidden, dim, bias=False, device=device)
        self.w3 = nn.Linear(dim, hidden, bias=False, device=device)

    def forward(self, x: Tensor) -> Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, dim: int, n_heads: int, n_kv_heads: int, hidden: int, eps: float,
                 device: str, sdpa: bool):
        super().__init__()
        self.attention_norm = RMSNorm(dim, eps, device)
        self.attention = (SdpaAttention if sdpa else Attention)(dim, n_heads, n_kv_heads, device)
        self.ffn_norm = RMSNorm(dim, eps, device)
        self.feed_forward = FeedForward(dim, hidden, device)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor) -> Tensor:
        h = x + self.attention(self.attention_norm(x), cos, sin, mask)
        return h + self.feed_forward(self.ffn_norm(h))


class Llama(nn.Module):
    def __init__(self, dim: int, layers: int, heads: int, kv_heads: int, hidden: int,
                 vocab: int, device: str, sdpa: bool = False, eps: float = 1e-5,
                 rope_theta: float = 500000.0):
        super().__init__()
        self.sdpa = sdpa
        self.head_dim = dim // heads
        self.rope_theta = rope_theta
        self.tok_embeddings = nn.Embedding(vocab, dim, device=device)
        self.layers = nn.ModuleList(
            [TransformerBlock(dim, heads, kv_heads, hidden, eps, device, sdpa)
             for _ in range(layers)])
        self.norm = RMSNorm(dim, eps, device)
        self.output = nn.Linear(dim, vocab, bias=False, device=device)

    def forward(self, tokens: Tensor) -> Tensor:
        T = tokens.size(1)
        h = self.tok_embeddings(tokens)
        half = torch.arange(0, self.head_dim, 2, dtype=torch.float32, device=tokens.device)
        inv_freq = 1.0 / torch.pow(self.rope_theta, half / self.head_dim)
        t = torch.arange(0, T, dtype=torch.float32, device=tokens.device)
        freqs = torch.outer(t, inv_freq)
        cos = freqs.cos()
        sin = freqs.sin()
        # Scaled-dot-product attention masks by itself (is_causal): an empty mask, not T x T.
        mask = torch.full([0 if self.sdpa else T, 0 if self.sdpa else T], float("-inf"),
                          device=tokens.device).triu(1)
        for layer in self.layers:
            h = layer(h, cos, sin, mask)
        return self.output(self.norm(h)).float()


def hand_count(dim: int, layers: int, heads: int, kv_heads: int, hidden: int,
               vocab: int) -> int:
    """Parameters of the shape, counted from the architecture rather than from the model."""
    head_dim = dim // heads
    attention = dim * heads * head_dim * 2 + dim * kv_heads * head_dim * 2  # wq wo, wk wv
    mlp = 3 * dim * hidden                                                  # w1 w2 w3
    block = attention + mlp + 2 * dim                                       # + 2 RMSNorms
    return vocab * dim + layers * block + dim + dim * vocab  # embeddings, norm, output


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    parser.add_argument("--preset", choices=sorted(PRESETS), default="llama3-70b")
    parser.add_argument("--device", choices=["meta", "cpu"], default="meta")
    parser.add_argument("--attention", choices=["math", "sdpa"], default="math")
    for field in PRESETS["tiny"]:
        parser.add_argument("--" + field.replace("_", "-"), type=int, dest=field)
    args = parser.parse_args()
    shape = dict(PRESETS[args.preset])
    shape.update({k: getattr(args, k) for k in shape if getattr(args, k) is not None})
    if shape["dim"] % shape["heads"] or shape["heads"] % shape["kv_heads"] or \
            (shape["dim"] // shape["heads"]) % 2:
        sys.exit("dim must divide into heads of even size, heads into kv-heads")
    expected = hand_count(**shape)
    if args.device == "cpu" and expected > 2_000_000_000:
        sys.exit(f"{expected / 1e9:.1f} B parameters will not fit on the CPU; use --device meta")

    torch.manual_seed(0)
    model = Llama(**shape, device=args.device, sdpa=args.attention == "sdpa")
    if args.device == "cpu":
        with torch.no_grad():
            for m in model.modules():
                if isinstance(m, (nn.Linear, nn.Embedding)):
                    nn.init.normal_(m.weight, mean=0.0, std=0.02)
    model.train()
    scripted = torch.jit.script(model)
    tmp = args.out + ".tmp"
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    torch.jit.save(scripted, tmp)
    os.replace(tmp, args.out)

    loaded = torch.jit.load(args.out, map_location=args.device)
    params = list(loaded.parameters())
    saved = sum(p.numel() for p in params)
    buffers = sum(1 for _ in loaded.buffers())
    devices = sorted({str(p.device) for p in params})
    print(f"{args.out}: {args.preset} {shape} {args.attention} attention, {saved:,} parameters in {len(params)} tensors "
          f"on {','.join(devices)}, {buffers} buffers (by hand: {expected:,}), "
          f"{os.path.getsize(args.out):,} bytes")
    if saved != expected:
        sys.exit(f"parameter count {saved:,} differs from the hand count {expected:,}")


if __name__ == "__main__":
    main()
