"""BERT's attention on CPU: the kernel torch's SDPA runs, and alternatives (ch. 7).

Run:  python benchmarks/bert_attention_kernels.py [--rounds R]

What `fuse_attention` leaves in BERT's graph is `aten.scaled_dot_product_attention`
with an additive float mask; on CPU torch dispatches it to its flash-attention
kernel (`_scaled_dot_product_flash_attention_for_cpu`, named by the profiler here).
Timed against the unfused chain ORT runs (one batched GEMM with the scale and the
mask folded in: `baddbmm`, softmax, a second batched GEMM) and torch's math
fallback, at BERT's shape (4 heads of 64, 128 tokens), batch 1 and 8, 1 and 2
threads: best per call over interleaved rounds, every result checked against SDPA.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from graphopt.measure.thread_count import set_threads

HEADS, TOKENS, DIM = 4, 128, 64


def inputs(batch: int):
    g = torch.Generator().manual_seed(batch)
    q, k, v = (torch.randn(batch, HEADS, TOKENS, DIM, generator=g) for _ in range(3))
    mask = torch.zeros(batch, 1, 1, TOKENS)
    mask[-1, ..., TOKENS - TOKENS // 4:] = torch.finfo(torch.float32).min
    return q, k, v, mask


def unfused(q, k, v, mask):
    """ORT's chain: scores = mask + scale * q @ k.T in one batched GEMM, softmax,
    then @ v (the heads flattened into the batch)."""
    b = q.shape[0] * HEADS
    scores = torch.baddbmm(mask.expand(-1, HEADS, TOKENS, -1).reshape(b, TOKENS,
                                                                      TOKENS),
                           q.reshape(b, TOKENS, DIM),
                           k.reshape(b, TOKENS, DIM).transpose(1, 2),
                           alpha=DIM ** -0.5)
    return torch.bmm(scores.softmax(-1), v.reshape(b, TOKENS, DIM)).view_as(q)


def strided(q, k, v):
    """q, k, v as BERT's graph hands them to SDPA after fuse_qkv: slices of one
    (batch, tokens, 3 x 256) product, viewed as heads and transposed (strided)."""
    qkv = torch.cat([t.transpose(1, 2).reshape(q.shape[0], TOKENS, HEADS * DIM)
                     for t in (q, k, v)], -1)
    return [qkv[..., i * 256:(i + 1) * 256].view(q.shape[0], TOKENS, HEADS, DIM)
            .transpose(1, 2) for i in range(3)]


def kernels(batch: int) -> dict:
    q, k, v, mask = inputs(batch)
    qs, ks, vs = strided(q, k, v)
    math = torch.ops.aten._scaled_dot_product_attention_math
    fns = {"SDPA (flash for CPU)": lambda: F.scaled_dot_product_attention(
               q, k, v, attn_mask=mask),
           "SDPA on fuse_qkv's slices": lambda: F.scaled_dot_product_attention(
               qs, ks, vs, attn_mask=mask),
           "baddbmm, softmax, bmm": lambda: unfused(q, k, v, mask),
           "SDPA math fallback": lambda: math(q, k, v, attn_mask=mask)[0]}
    want = fns["SDPA (flash for CPU)"]()
    for name, fn in fns.items():
        torch.testing.assert_close(fn(), want, rtol=1e-4, atol=1e-5, msg=name)
    return fns


def which_kernel(batch: int) -> str:
    """The aten kernel the profiler sees under SDPA."""
    q, k, v, mask = inputs(batch)
    with torch.profiler.profile() as prof:
        F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    names = [e.key for e in prof.key_averages() if "attention" in e.key]
    return ", ".join(sorted(set(names)))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=9)
    args = p.parse_args()
    print(f"SDPA at batch 1 runs: {which_kernel(1)}")
    for threads in (1, 2):
        set_threads(threads)
        for batch in (1, 8):
            fns, best = kernels(batch), {}
            calls = 40 // batch
            with torch.no_grad():
                for _ in range(args.rounds):
                    for name, fn in fns.items():
                        start = time.perf_counter()
                        for _ in range(calls):
                            fn()
                        t = (time.perf_counter() - start) / calls
                        best[name] = min(best.get(name, t), t)
            cells = ", ".join(f"{k} {v * 1e3:.3f}" for k, v in best.items())
            print(f"{threads} thread(s), batch {batch}: {cells} ms (one layer)")


if __name__ == "__main__":
    main()
