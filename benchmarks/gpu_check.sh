#!/usr/bin/env bash
# Every GPU path of the book in one command, on a machine with CUDA, torch and triton.
#
#   bash benchmarks/gpu_check.sh              (under ten minutes: a global deadline
#                                              time-boxes every step)
#   bash benchmarks/gpu_check.sh --dry-run    (here, on a CPU: the same steps with
#                                              TRITON_INTERPRET=1 and small sizes,
#                                              into a temporary folder; a few minutes)
#   bash benchmarks/gpu_check.sh --dry-run --notebooks   (also nbval on ch. 6 and 7)
#
# 1. graphopt's generated Triton kernels run for real on the GPU and are compared with
#    the reference executor (the group's own graph) and with Triton's CPU interpreter
#    (TRITON_INTERPRET=1, in a separate process: it must be set before importing triton):
#    elementwise groups (flat, broadcast, strided, scalar, float64, NaN through ReLU /
#    maximum / clamp) and row-reduction kernels (softmax, log-softmax, layer norm,
#    RMSNorm, GELU then layer norm, sums; rows shorter and longer than one BLOCK);
# 2. benchmarks/gpu_paths.py kernels: each generated kernel against the device's copy
#    bandwidth (CUDA events), and the driver's register count against the one
#    compiled ahead of time (graphopt.codegen.aot);
# 3. benchmarks/gpu_paths.py graphs: eager launches against one CUDA graph and
#    inductor's fused kernels, with torch.profiler's busy fraction (the lecture
#    notes' "GPU utilisation 30% -> 85%");
# 4. benchmarks/gpu_paths.py explorer: the explorer's GPU numbers per stage on
#    ResNet-18 and BERT (CUDA time, CUDA allocator peak, liveness peak, predicted);
# 5. chapters 6 and 7 through nbval on the GPU (DEVICE is "cuda" there);
# 6. the fusion benchmark on the GPU (benchmarks/fusion.py --device cuda --quick);
# 7. inductor's generated Triton source for the 8-op chain, softmax and layer norm.
# Everything lands in benchmarks/results/ (kept in the repository): commit it.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
DRY=0; NOTEBOOKS=1
for arg in "$@"; do
  case "$arg" in
    --dry-run) DRY=1; NOTEBOOKS=0 ;;
    --notebooks) NOTEBOOKS=1 ;;
    *) echo "usage: $0 [--dry-run [--notebooks]]"; exit 2 ;;
  esac
done
if [ "$DRY" = 1 ]; then
  OUT=${OUT:-$(mktemp -d /tmp/gpu_check_dry.XXXXXX)}
  export TRITON_INTERPRET=1          # read when triton is imported: every process
  DRYFLAG=--dry-run
else
  OUT=benchmarks/results
  DRYFLAG=
fi
mkdir -p "$OUT"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"   # no install needed
export GRAPHOPT_QUIET=1 PYTHONHASHSEED=0
status=0
DEADLINE=${DEADLINE:-570}            # seconds for everything: under ten minutes
left() {  # the time a step may take: its own cap, or what is left of the deadline
  local rest=$((DEADLINE - SECONDS))
  [ "$rest" -lt 10 ] && rest=10
  if [ "$1" -lt "$rest" ]; then echo "$1"; else echo "$rest"; fi
}

"$PY" - "$DRY" <<'EOF' || exit 1
import sys, torch, triton
dry = sys.argv[1] == "1"
assert dry or torch.cuda.is_available(), "no CUDA device: run with --dry-run on a CPU"
name = torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU (dry run)"
print("device:", name, "| torch", torch.__version__, "| triton", triton.__version__)
EOF

# ---- shared case list: small groups covering flat, broadcast, strided, scalar, float64
cat > "$OUT/.gpu_cases.py" <<'EOF'
import sys
import torch
from torch import fx
from graphopt import codegen

def cases():
    g = torch.Generator().manual_seed(0)
    r = lambda *s, dtype=torch.float32: torch.randn(*s, generator=g, dtype=dtype)
    chain8 = lambda x: -(((torch.relu(x * 1.5 + 0.5) - 0.25).abs() * 0.75) - 0.1)
    yield "chain8_flat_3001", chain8, (r(3001),)
    yield "bcast_strided_scalar", lambda x, w, s: torch.sigmoid(x * w) - s, \
        (r(5, 7, 3).permute(2, 0, 1), r(7), torch.tensor(0.25))
    yield "per_channel_4d", lambda x, a, b: torch.relu(x * a + b), \
        (r(2, 8, 9, 11), r(8, 1, 1), r(8, 1, 1))
    yield "float64_gelu_tanh", lambda x: torch.tanh(torch.nn.functional.gelu(x)), \
        (r(1000, dtype=torch.float64),)
    nan = r(257)
    nan[::7] = float("nan")
    yield "nan_relu_max_clamp", lambda x, y: torch.relu(x) + torch.maximum(x, y) \
        + torch.clamp(x, -0.5, 0.5), (nan, r(257))
    F = torch.nn.functional
    w, b = r(1000), r(1000)
    yield "row_softmax_short", lambda x: torch.softmax(x * 2.0, -1), (r(33, 37),)
    yield "row_softmax_long", lambda x: torch.softmax(x, -1) + 1.0, (r(64, 3000) * 8,)
    yield "row_log_softmax", lambda x: F.log_softmax(x, -1), (r(16, 1000),)
    yield "row_layer_norm", lambda x: F.layer_norm(x, [1000], w, b) * 0.5, \
        (r(64, 1000) * 100 + 1e3,)
    yield "row_rms_norm", lambda x: F.rms_norm(x, [1000], w), (r(64, 1000),)
    yield "row_gelu_layer_norm", lambda x: F.layer_norm(F.gelu(x), [1000]), \
        (r(8, 2, 1000),)
    yield "row_sum_amax", lambda x: x - x.amax(-1, keepdim=True) \
        + x.sum(-1, keepdim=True), (r(40, 513).t().contiguous().t()[:, :500],)

def run(mode, path):
    results = {}
    for name, fn, args in cases():
        gm = fx.symbolic_trace(fn)
        dev = "cuda" if mode == "real" else "cpu"
        args = tuple(a.to(dev) for a in args)
        k = codegen.compile_group(gm, args, backend="triton")
        out = k(*args)
        ref = gm(*args)
        assert out.isnan().eq(ref.isnan()).all(), f"{name}: NaN pattern differs"
        err = (out.double() - ref.double()).nan_to_num().abs().max().item()
        print(f"{mode:6} {name:24} max|triton - reference| = {err:.3g}")
        results[name] = out.cpu()
    torch.save(results, path)

if __name__ == "__main__":
    run(sys.argv[1], sys.argv[2])
EOF

echo "== 1. Triton kernels: real GPU vs reference vs interpreter"
if [ "$DRY" = 1 ]; then
  TRITON_INTERPRET=1 timeout "$(left 120)" "$PY" "$OUT/.gpu_cases.py" interp \
    "$OUT/.triton_interp.pt" 2>&1 | tee "$OUT/gpu_triton_check.txt" || status=1
else
{
  timeout "$(left 120)" "$PY" "$OUT/.gpu_cases.py" real "$OUT/.triton_real.pt" &&
  TRITON_INTERPRET=1 timeout "$(left 120)" "$PY" "$OUT/.gpu_cases.py" interp \
    "$OUT/.triton_interp.pt" &&
  "$PY" - "$OUT/.triton_real.pt" "$OUT/.triton_interp.pt" <<'EOF'
import sys, torch
real, interp = torch.load(sys.argv[1]), torch.load(sys.argv[2])
worst = 0.0
for name in real:
    d = (real[name].double() - interp[name].double()).nan_to_num().abs().max().item()
    worst = max(worst, d)
    print(f"real vs interpreter {name:24} max diff {d:.3g}")
print("TRITON_CHECK", "ok" if worst < 1e-4 else "MISMATCH", f"worst={worst:.3g}")
sys.exit(0 if worst < 1e-4 else 1)
EOF
} 2>&1 | tee "$OUT/gpu_triton_check.txt" || status=1
fi

for step in kernels graphs explorer; do
  echo "== gpu_paths.py $step"
  timeout "$(left 150)" "$PY" benchmarks/gpu_paths.py "$step" $DRYFLAG --out "$OUT" \
    || status=1
done

echo "== chapters 6 and 7 through nbval"
if [ "$NOTEBOOKS" = 1 ]; then
  timeout "$(left 300)" "$PY" -m pytest -p no:cacheprovider --nbval --nbval-current-env \
    --nbval-sanitize-with tests/nbval_sanitize.cfg --nbval-cell-timeout=300 \
    --nbval-kernel-startup-timeout=120 -q book/06_fused_kernels.ipynb \
    book/07_*.ipynb 2>&1 | tail -40 | tee "$OUT/gpu_notebooks.txt" || status=1
else
  echo "skipped in a dry run (add --notebooks to run them on the CPU)"
fi

if [ "$DRY" = 1 ]; then
  rm -f "$OUT"/.triton_*.pt "$OUT/.gpu_cases.py"
  echo "dry run finished with status $status; results in $OUT/ (not kept)"
  exit $status
fi

echo "== fusion benchmark on the GPU"
timeout "$(left 150)" "$PY" benchmarks/fusion.py --device cuda --quick 2>&1 | tr '\r' '\n' \
  | grep -v '^chain of\|^Conv+BN\|^MatMul\|^LayerNorm' | tee "$OUT/gpu_fusion.txt" || status=1

echo "== inductor's Triton source for the 8-op chain, softmax and layer norm"
timeout "$(left 120)" "$PY" - "$OUT/inductor_triton_chain8.py" <<'EOF' || status=1
import sys, torch
from graphopt.codegen.inductor import inductor_kernels
def chain8_out(x, out):
    return out.copy_(-(((torch.relu(x * 1.5 + 0.5) - 0.25).abs() * 0.75) - 0.1))
x = torch.randn(1 << 24, device="cuda")
code = inductor_kernels(chain8_out, x, torch.empty_like(x))
with open(sys.argv[1], "w") as f:
    f.write(f"# inductor's Triton kernels for the 8-op chain on {torch.cuda.get_device_name()}\n"
            f"# torch {torch.__version__}; captured by benchmarks/gpu_check.sh\n\n")
    f.write("\n\n".join(code.kernels) + "\n")
print(f"{len(code.kernels)} kernel(s) written to {sys.argv[1]}")
F = torch.nn.functional
xr = torch.randn(4096, 1024, device="cuda")
w, b = torch.randn(1024, device="cuda"), torch.randn(1024, device="cuda")
for name, fn in (("softmax", lambda x: torch.softmax(x, -1) + 1.0),
                 ("layer_norm", lambda x: F.layer_norm(x, [1024], w, b) + 1.0)):
    torch._dynamo.reset()
    code = inductor_kernels(fn, xr)
    path = sys.argv[1].replace("chain8", name)
    with open(path, "w") as f:
        f.write(f"# inductor's Triton kernels for {name} + 1 on 4096x1024, "
                f"{torch.cuda.get_device_name()}; torch {torch.__version__}\n\n")
        f.write("\n\n".join(code.kernels) + "\n")
    print(f"{len(code.kernels)} kernel(s) written to {path}")
EOF

rm -f "$OUT"/.triton_*.pt "$OUT/.gpu_cases.py"
echo "gpu_check finished with status $status; results in $OUT/"
exit $status
