"""BERT's linears: oneDNN (graphopt now) against MKL's prepacked GEMM + torch's
activation, patched in-process. Run: python cpu_bert_mkl_ab.py THREADS ROUNDS"""
import sys, math, torch, warnings, time, statistics
warnings.filterwarnings("ignore")
th = int(sys.argv[1]); torch.set_num_threads(th)
import numba; numba.set_num_threads(th)
import torch.nn.functional as F
from graphopt.models import example
from graphopt.passes.pipeline import optimize
from graphopt.passes import fused_modules as fm
model, inputs = example("bert")
gm = optimize(model, *inputs, stats=False).module
orig = fm.LinearReLU.forward
def mkl_forward(self, x, weight, bias):
    rows = math.prod(x.shape[:-1])
    cache = self.__dict__.setdefault("_mkl", {})
    if rows not in cache:
        cache[rows] = torch.ops.mkl._mkl_reorder_linear_weight(weight, rows)
    y = torch.ops.mkl._mkl_linear(x, cache[rows], weight, bias, rows)
    return self.act.eager(y)
mode = {"oneDNN (now)": orig, "MKL packed + torch act": mkl_forward}
res = {k: [] for k in mode}
with torch.no_grad():
    ref = gm(*inputs)
    fm.LinearReLU.forward = mkl_forward
    alt = gm(*inputs)
    fm.LinearReLU.forward = orig
    torch.testing.assert_close(alt, ref, rtol=1e-4, atol=1e-4)
    for r in range(int(sys.argv[2])):
        for k, f in (list(mode.items())[::1 if r % 2 else -1]):
            fm.LinearReLU.forward = f
            gm(*inputs); ts = []
            for _ in range(10):
                s = time.perf_counter()
                gm(*inputs)
                ts.append(time.perf_counter() - s)
            res[k].append(statistics.median(ts) * 1e3)
    fm.LinearReLU.forward = orig
med = {k: statistics.median(v) for k, v in res.items()}
ratio = med["MKL packed + torch act"] / med["oneDNN (now)"]
print(th, "threads:", {k: "%.2f ms" % v for k, v in med.items()},
      "mkl/onednn %.3f" % ratio)
