"""Float64 references and derived error bounds for float32 kernels (any CPU).

A generated float32 kernel is right when it is close to the exact answer, not when
it matches torch's float32 result on one instruction set: torch's vectorised exp and
erf differ between AVX2, AVX-512 and ARM builds, and torch can be the less accurate
side (exact GELU loses digits where ``1 + erf`` cancels in the negative tail). So
each kernel test runs the same graph in float64, the truth to within 2**-53, and
bounds the float32 kernel's distance to it:

    |kernel(x) - exact(x)| <= slack * u * E(x) + TINY,    u = 2**-24

``E`` is a first-order *error envelope* carried through the graph beside the float64
values, one rule per op (the rules of running error analysis; Higham, "Accuracy and
Stability of Numerical Algorithms", ch. 2-4): an op passes its inputs' envelopes on,
scaled by how much it can amplify them (``|df/dx|``), and adds its own rounding,
``ulps * |result|``, where ``ulps`` is what its float32 implementation may lose
(1 for + - * /, the measured bound of our exp32 and erf32, more for composites).
``slack`` (2 unless a test says why) covers second-order terms and algorithms
that round in another order (online softmax, Welford's variance). ``TINY`` is
float32's smallest normal number, 2**-126: below it float32 keeps fewer digits, and
a result there may flush to 0 (sigmoid as 1 / (1 + exp(-x)) gives 0 once exp(-x)
overflows, in our kernels as in torch's).

Where the float64 answer is NaN or infinite, the kernel must give exactly that.
"""

import math

import torch
from torch import fx

U = 2.0 ** -24
TINY = 2.0 ** -126
# ulps lost by one call of each float32 implementation (exp32 is tested within 1 ulp
# of the rounded exact value, erf32 within 3; torch's and Triton's are of that order).
EXP_ULPS, ERF_ULPS, TANH_ULPS = 2.0, 4.0, 4.0


def _mul(a, e):
    """a * e with 0 * inf = 0: an exact zero (exp underflow) carries no error."""
    return torch.where(a == 0, torch.zeros_like(e), a.abs() * e)


def _row(e, dim):
    return e.amax(dim, keepdim=True)


def _sum_rule(x, e, dim, keepdim=True):
    """Summing n terms: each of the n-1 additions rounds by at most u * sum |x|."""
    n = x.shape[dim]
    return (e + n * x.abs()).sum(dim, keepdim=keepdim)


def _softmax(x, e, dim):
    m = x.amax(dim, keepdim=True)                  # exact: max only compares
    ed = e + _row(e, dim) + (x - m).abs()
    p = torch.softmax(x, dim)
    # p_i = exp(d_i) / sum_j exp(d_j): a change of d shifts log p_i by at most
    # ed_i + max_j ed_j; exp, the sum of n terms and the division round too
    n = x.shape[dim]
    return p, _mul(p, ed + _row(ed, dim) + EXP_ULPS + n + 2)


def _log_softmax(x, e, dim):
    p, ep = _softmax(x, e, dim)
    y = torch.log_softmax(x, dim)
    # log p: the envelope of p relative to p, plus the rounding of the log and sub
    rel = torch.where(p == 0, torch.full_like(p, math.inf), ep / p)
    return y, rel + 2 * y.abs() + (x - x.amax(dim, keepdim=True)).abs()


def _norm(x, e, shape, weight, bias, eps, rms):
    dims = tuple(range(-len(shape), 0))
    n = math.prod(shape)
    mu = torch.zeros_like(x) if rms else x.mean(dims, keepdim=True)
    d = x - mu
    var = (d * d).mean(dims, keepdim=True)
    r = torch.rsqrt(var + eps)
    # (x - mu): its inputs' envelopes, the mean's rounding (n terms of |x|);
    # r: var is a mean of n squares, relative error about (n + 4) u, halved by rsqrt
    emax = e.amax(dims, keepdim=True)
    ed = e + emax + n * x.abs().amax(dims, keepdim=True) + d.abs()
    er_rel = (n + 4) + 2 * emax * d.abs().amax(dims, keepdim=True) / (var + eps)
    w = torch.ones_like(x) if weight is None else weight
    b = torch.zeros_like(x) if bias is None else bias
    y = d * r * w + b
    return y, (ed * r + d.abs() * r * er_rel) * w.abs() + 2 * y.abs() + b.abs()


def _unary(name, x, e):
    """(value, envelope) of a one-input elementwise op."""
    if name in ("relu", "abs", "neg", "clone", "contiguous", "identity"):
        return {"relu": torch.relu, "abs": torch.abs, "neg": torch.neg}.get(
            name, lambda t: t)(x), e                       # exact: nothing rounds
    if name == "square":
        y = x * x
        return y, 2 * _mul(x, e) + y.abs()
    if name == "exp":
        y = torch.exp(x)
        return y, _mul(y, e) + EXP_ULPS * y.abs()
    if name == "sigmoid":                                  # 1 / (1 + exp(-x))
        y = torch.sigmoid(x)
        return y, _mul(y * (1 - y), e) + (EXP_ULPS + 3) * y.abs()
    if name == "silu":                                     # x * sigmoid(x)
        y = torch.nn.functional.silu(x)
        return y, 1.1 * e + (EXP_ULPS + 4) * y.abs()      # |silu'| <= 1.1
    if name == "tanh":
        y = torch.tanh(x)
        return y, _mul(1 - y * y, e) + TANH_ULPS * y.abs()
    if name == "gelu":                                     # x/2 * (1 + erf(x/sqrt2))
        y = torch.nn.functional.gelu(x)
        # |gelu'| <= 1.13; erf's absolute error (ERF_ULPS u, |erf| <= 1) is
        # multiplied by |x| / 2; then three roundings of the products
        return y, 1.13 * e + (ERF_ULPS / 2 + 1) * x.abs() + 3 * y.abs()
    if name == "erf":                                      # |erf'| <= 2/sqrt(pi)
        y = torch.erf(x)
        return y, 1.13 * e + ERF_ULPS * y.abs()
    if name in ("hardsigmoid", "hardswish"):               # relu6(x + 3) / 6 (* x)
        f = getattr(torch.nn.functional, name)
        y = f(x)
        slope = 1.5 if name == "hardswish" else 1 / 6
        return y, slope * e + 3 * (y.abs() + x.abs())
    if name == "rsqrt":
        y = torch.rsqrt(x)
        return y, _mul(y / (2 * x), e) + 2 * y.abs()
    raise NotImplementedError(f"no error rule for {name!r}: add one to tests/numerics.py")


def _binary(name, a, ea, b, eb):
    if name in ("add", "sub"):
        y = a + b if name == "add" else a - b
        return y, ea + eb + y.abs()
    if name == "mul":
        y = a * b
        return y, _mul(b, ea) + _mul(a, eb) + y.abs()
    if name in ("div", "truediv"):
        y = a / b
        return y, _mul(1 / b, ea) + _mul(y / b, eb) + y.abs()
    if name in ("maximum", "minimum", "clamp_min", "clamp_max", "max", "min"):
        f = torch.maximum if name in ("maximum", "clamp_min", "max") else torch.minimum
        return f(a, b), torch.maximum(ea, eb)              # exact: picks one input
    raise NotImplementedError(f"no error rule for {name!r}: add one to tests/numerics.py")


def _name(node):
    t = node.target
    if node.op == "call_method":
        return t
    name = getattr(t, "__name__", str(t)).split(".")[-1]
    return {"sub_": "sub", "add_": "add", "relu_": "relu"}.get(name, name)


def _dim(node, default=-1):
    dim = node.kwargs.get("dim", node.args[1] if len(node.args) > 1 else default)
    dim = default if dim is None else dim
    return dim if isinstance(dim, int) else dim[0]


class Envelope(fx.Interpreter):
    """Runs a GraphModule in float64, each value paired with its error envelope."""

    def run_node(self, n):
        if n.op in ("placeholder", "get_attr", "output"):
            return super().run_node(n)
        args, kwargs = self.fetch_args_kwargs_from_env(n)
        vals = [a[0] if _paired(a) else a for a in args]
        errs = [a[1] if _paired(a) else _const_err(a) for a in args]
        kw = {k: v[0] if _paired(v) else v for k, v in kwargs.items()}
        return _apply(_name(n), n, vals, errs, kw)

    def placeholder(self, target, args, kwargs):
        x = super().placeholder(target, args, kwargs)
        return _as64(x), torch.zeros_like(_as64(x))        # inputs are exact

    def get_attr(self, target, args, kwargs):
        x = _as64(super().get_attr(target, args, kwargs))
        return x, torch.zeros_like(x)

    def output(self, target, args, kwargs):
        (out,) = args
        return out[0] if isinstance(out, (list, tuple)) and len(out) == 1 else out


def _paired(a):
    return isinstance(a, tuple) and len(a) == 2 and torch.is_tensor(a[0])


def _as64(x):
    return x.double() if torch.is_tensor(x) and x.is_floating_point() else x


def _const_err(c):
    """A Python float is rounded once to float32 when a kernel bakes it in."""
    return abs(c) if isinstance(c, float) else 0.0


def _apply(name, node, vals, errs, kw):
    x, e = vals[0], errs[0]
    if name in ("softmax", "_softmax"):
        return _softmax(x, e, _dim(node))
    if name in ("log_softmax", "_log_softmax"):
        return _log_softmax(x, e, _dim(node))
    if name in ("layer_norm", "rms_norm"):
        shape = vals[1]
        w = vals[2] if len(vals) > 2 else kw.get("weight")
        b = None if name == "rms_norm" else (vals[3] if len(vals) > 3
                                             else kw.get("bias"))
        eps = next((v for v in vals[3:] if isinstance(v, float)), kw.get("eps"))
        if eps is None:  # rms_norm's default: the eps of the kernel's float32
            eps = 1e-5 if name == "layer_norm" else torch.finfo(torch.float32).eps
        return _norm(x, e, shape, _as64(w), _as64(b), eps, name == "rms_norm")
    if name in ("sum", "mean"):
        dim = _dim(node)
        y = x.sum(dim, keepdim=True) if name == "sum" else x.mean(dim, keepdim=True)
        ey = _sum_rule(x, e, dim) / (x.shape[dim] if name == "mean" else 1)
        return y, ey + y.abs()
    if name in ("amax", "amin"):
        f = torch.amax if name == "amax" else torch.amin
        return f(x, _dim(node), keepdim=True), e.amax(_dim(node), keepdim=True)
    if name == "pow" and vals[1] == 2:
        name = "square"
    if name == "clamp":
        lo, hi = (list(vals[1:]) + [None, None])[:2]
        return x.clamp(lo, hi), e
    if len(vals) == 1 or name in ("relu", "gelu", "exp", "sigmoid", "tanh", "silu",
                                  "abs", "neg", "square", "hardsigmoid", "hardswish"):
        return _unary(name, x, e)
    b, eb = vals[1], errs[1]
    if not torch.is_tensor(b):
        b, eb = torch.tensor(float(b), dtype=torch.float64), torch.tensor(eb)
    if not torch.is_tensor(x):
        x, e = torch.tensor(float(x), dtype=torch.float64), torch.tensor(e)
    return _binary(name, x, e, b, eb)


def reference(fn, *inputs):
    """(float64 result, error envelope E) of `fn` (a GraphModule, module or function
    fx can trace) on `inputs`."""
    gm = fn if isinstance(fn, fx.GraphModule) else fx.symbolic_trace(fn)
    with torch.no_grad():
        return Envelope(gm).run(*inputs)


def assert_near_truth(got, fn, *inputs, slack=2.0):
    """`got`, a float32 kernel's output for fn(*inputs), is within the derived bound
    of the float64 answer; NaN and inf exactly where float32 has them (the float64
    answer rounded to float32: past 3.4e38 the right float32 answer is inf).
    Returns the worst error as a share of the bound."""
    exact, env = reference(fn, *inputs)
    assert got.shape == exact.shape, (got.shape, exact.shape)
    got64, rounded = got.double(), exact.float().double()
    special = ~torch.isfinite(rounded)
    same = (got64[special] == rounded[special]) | (got64[special].isnan()
                                                   & rounded[special].isnan())
    assert same.all(), (f"NaN/inf differ from float64 at {special.nonzero()[:5]}: "
                        f"kernel {got64[special][:5]}, float64 {exact[special][:5]}")
    fin = ~special
    err = (got64 - exact).abs()[fin]
    bound = (slack * U * env + TINY)[fin]
    bound = torch.where(bound.isnan(), torch.full_like(bound, math.inf), bound)
    if not err.numel():
        return 0.0
    worst = int((err / bound).argmax())
    assert (err <= bound).all(), (
        f"{int((err > bound).sum())} of {err.numel()} values beyond the bound; worst: "
        f"|error| {err[worst]:.3g} > bound {bound[worst]:.3g} "
        f"(float64 answer {exact[fin][worst]:.6g}, kernel {got64[fin][worst]:.6g})")
    return float((err / bound).max())
