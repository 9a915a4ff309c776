"""BERT at batch 8: should its row kernels split their rows over threads? (ch. 7)

Run:  python benchmarks/bert_row_split.py [--wait bounded|passive] [--rounds R]
                                          [--threads 1 2] [--batch B]

At batch 8 of 128 tokens each LayerNorm of the BERT encoder covers 1024 x 256 =
2^18 elements, over the policy's `row_parallel_numel` (2^17): the eight
LayerNorm+Add kernels and the embeddings' generated LayerNorm hand their rows to
numba's thread pool, a second pool beside torch's OpenMP threads on the same cores.
Two tables, every timing interleaved (`graphopt.measure.compare`: median and IQR):

1. the LayerNorm+Add row kernel (`backend.rowwise.add_layer_norm`) serial, split,
   and split as before (each row's loops inside the `prange` body), at 2 threads,
   on 128 to 8192 rows of 256: the serial cost per element `c` and the pool's
   hand-off `h` (the split time less half the serial time), both from the best
   calls, give the break-even size 2h/c of the cost model `c * n / threads + h`;
2. the whole encoder at `--batch` (default 8) under the default policy, the same
   with the kernel as it was before (`before`: each row's loops inside the `prange`
   body, which did not vectorise, split on one thread too), and under
   `Policy(row_parallel_numel=2**19)` (its LayerNorms serial), at each thread count.

Last line: RESULT rows_breakeven=<2h/c elements> bert_b<batch>_t<threads>=<2^19 rule /
default median ratio> bert_b<batch>_t<threads>_before=<before / default> ...
"""

from __future__ import annotations

import wait_policy  # before torch loads: OpenMP reads its variables once

WAIT = wait_policy.from_argv()

import argparse  # noqa: E402
import math  # noqa: E402
import subprocess  # noqa: E402

import numba  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import graphopt  # noqa: E402
from graphopt import peers  # noqa: E402
from graphopt.backend import rowwise, rowwise_numba  # noqa: E402
from graphopt.measure import compare  # noqa: E402
from graphopt.models import example  # noqa: E402
from graphopt.policy import Policy  # noqa: E402

WIDTH, EPS = 256, 1e-12  # BERT's hidden size and its LayerNorm's eps
ROWS = (128, 512, 1024, 2048, 8192)  # 128 tokens at batch 1, 4, 8, 16, 64
RULES = {"default (2^17)": Policy(), "rows serial below 2^19":
         Policy(row_parallel_numel=1 << 19)}
BEFORE = "before (row loops in prange)"


@numba.njit(parallel=True, fastmath=True, cache=True)
def _rows_in_prange(a, b, w, bias, out, rows, n, eps, has_w, has_b, welford):
    """The split kernel as it was: each row's loops inside the prange body."""
    for r in numba.prange(rows):
        rowwise_numba._row(a, b, w, bias, out, r, n, eps, has_w, has_b, welford)


def before(gm, x):
    """One call with the kernel as it was (split on one thread too), then back."""
    now, blocks = rowwise_numba.rows_parallel, rowwise.row_blocks
    rowwise_numba.rows_parallel = lambda *args: _rows_in_prange(*args[:-1])
    rowwise.row_blocks = lambda numel, rows, at: 2 if numel >= at else 1
    try:
        return gm(*x)
    finally:
        rowwise_numba.rows_parallel, rowwise.row_blocks = now, blocks


def row_kernel(rows: int, rounds: int) -> dict:
    """Serial, split and split as before, LayerNorm+Add on rows x 256 at 2 threads;
    returns each one's `Timing` (seconds per call)."""
    g = torch.Generator().manual_seed(rows)
    a, b = (torch.randn(rows, WIDTH, generator=g) for _ in range(2))
    w, bias = torch.randn(WIDTH, generator=g), torch.randn(WIDTH, generator=g)
    want = F.layer_norm(a + b, (WIDTH,), w, bias, EPS)
    out = torch.empty_like(a)
    old = (a.view(-1).numpy(), b.view(-1).numpy(), w.numpy(), bias.numpy(),
           out.view(-1).numpy(), rows, WIDTH, numba.float32(EPS), True, True, False)
    fns = {"serial": lambda: rowwise.add_layer_norm(a, b, w, bias, EPS,
                                                    parallel_numel=1 << 62),
           "split": lambda: rowwise.add_layer_norm(a, b, w, bias, EPS,
                                                   parallel_numel=1),
           "split before": lambda: _rows_in_prange(*old) or out}
    for name, fn in fns.items():
        torch.testing.assert_close(fn(), want, rtol=1e-4, atol=1e-4, msg=name)
    c = compare(fns, rounds=rounds, threads=2, min_run_time=1.0)
    print(f"  {rows:>5} x {WIDTH} (2^{math.log2(rows * WIDTH):.0f}): " + ", ".join(
        f"{k} {c[k].median * 1e6:.0f} ({c[k].q1 * 1e6:.0f}-{c[k].q3 * 1e6:.0f}, "
        f"best {c[k].best * 1e6:.0f})" for k in fns))
    return {k: c[k] for k in fns}


def row_table(rounds: int) -> float:
    """Table 1; returns the cost model's break-even size 2h/c in elements, from the
    best calls (what the machine does when nothing gets in the way)."""
    print(f"\n1. LayerNorm+Add, rows x {WIDTH}, at 2 threads, us per call: median "
          f"(IQR, best) over {rounds} interleaved rounds")
    got = {rows: row_kernel(rows, rounds) for rows in ROWS}
    big = ROWS[-1]
    c = got[big]["serial"].best / (big * WIDTH)  # serial seconds per element
    hs = sorted(t["split"].best - t["serial"].best / 2 for t in got.values())
    h = hs[len(hs) // 2]  # the median hand-off over the sizes
    print(f"  serial cost c = {c * 1e9:.2f} ns/element (best, {big} rows); hand-off "
          f"h = {h * 1e6:.0f} us (median over sizes of best split - best serial / "
          f"2); split pays from 2h/c = {2 * h / c:,.0f} elements (2^"
          f"{math.log2(max(2 * h / c, 1)):.1f}); at 2^18 (BERT, batch 8) the "
          f"best split before took {got[1024]['split before'].best * 1e6:.0f} us, "
          f"split {got[1024]['split'].best * 1e6:.0f}, serial "
          f"{got[1024]['serial'].best * 1e6:.0f}")
    return 2 * h / c


def model_table(batch: int, threads: int, rounds: int) -> tuple[float, float]:
    """Table 2 at one thread count; returns rows-serial / default and before /
    default (medians)."""
    model, x = example("bert", batch=batch)
    gms = {name: graphopt.optimize(model, *x, policy=p, stats=False).module
           for name, p in RULES.items()}
    with torch.no_grad():
        want = peers.flat_tensors(model(*x))
        for name, gm in gms.items():
            diff = max(float((g - w).abs().max())
                       for g, w in zip(peers.flat_tensors(gm(*x)), want))
            print(f"  {name}: max |diff| vs eager {diff:.1e}")
        old = gms["default (2^17)"]
        torch.testing.assert_close(before(old, x), old(*x))
        c = compare({"eager": lambda: model(*x), BEFORE: lambda: before(old, x),
                     **{k: (lambda g=g: g(*x)) for k, g in gms.items()}},
                    rounds=rounds, threads=threads, min_run_time=6.0)
    print(c)
    for k in (BEFORE, "rows serial below 2^19"):
        print(c.verdict(k, "default (2^17)"))
    print(c.conditions)
    default, serial = (c[k].median for k in RULES)
    return serial / default, c[BEFORE].median / default


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--wait", choices=("bounded", "passive"), default="bounded")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--threads", type=int, nargs="*", default=[1, 2])
    p.add_argument("--batch", type=int, default=8)
    args = p.parse_args()
    wait_policy.check(args.wait)
    print(uptime())
    print(f"torch {torch.__version__}, idle torch threads: {args.wait}, "
          f"{args.rounds} rounds")
    result = {"rows_breakeven": f"{row_table(args.rounds):.0f}"}
    for threads in args.threads:
        print(f"\n2. BERT encoder, batch {args.batch} ({args.batch * 128} tokens), "
              f"{threads} thread(s)")
        ratio, old = model_table(args.batch, threads, args.rounds)
        result[f"bert_b{args.batch}_t{threads}"] = f"{ratio:.3f}"
        result[f"bert_b{args.batch}_t{threads}_before"] = f"{old:.3f}"
    print(uptime())
    print("RESULT " + " ".join(f"{k}={v}" for k, v in result.items()))


if __name__ == "__main__":
    main()
