"""Two sizes measured on this machine: the measured policy's data (chapter 6).

Only the measured policy's record holds them (`graphopt.tuning.tune`, which
`optimize(..., policy="measured")` runs first, writes them into it as "min_numel"
and "parallel_numel"); the default policy uses fixed sizes
(`graphopt.policy.Policy().min_numel`, `.parallel_numel`), so kernel counts never
follow a timing unless asked to.

- `min_numel`: below it, a fused node in "auto" mode runs its own eager subgraph:
  the first size at which the generated kernel of the smallest group (two ops,
  `x * 1.5 + 0.5`) is not slower than that group run eagerly; 0 when the kernel
  already wins on one element. The only thing that can make one pass lose to two is
  a fixed per-call cost, which matters less as tensors grow, so the first win
  decides. Larger groups save more dispatches: the kernel wins at least as early.
- `parallel_numel`: from this size on the kernel's parallel loop (one chunk per
  thread) is used; below it the serial loop, because waking numba's thread pool costs
  more than the work (again a fixed cost: the first win decides).

Each time is the fastest of several interleaved rounds: noise on a shared machine
only ever adds time, so the minimum is the estimate least moved by it.

Measured once per machine, thread count and library versions (a few seconds: sizes
1 to 4M elements, interleaved rounds) and kept in `$GRAPHOPT_CALIBRATION` when set,
else `$NUMBA_CACHE_DIR/graphopt_calibration.json` (else the kernel cache directory);
`calibration(refresh=True)` or GRAPHOPT_RECALIBRATE=1 measures again, and so does a
process that finds the stored record was taken on an oversubscribed machine (load
average above the core count) that is now less than half as busy. A busy machine at
calibration time moves both sizes: they decide speed, never results.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from . import cache
from .interleaved import fastest

SIZES = (1, 1 << 8, 1 << 12, 1 << 16, 1 << 18, 1 << 20, 1 << 22)
_MEMO: dict = {}


@dataclass(frozen=True)
class Calibration:
    """The measured sizes and the timings (µs per call, per size) they come from
    (chapter 6)."""

    min_numel: int
    parallel_numel: int
    sizes: tuple[int, ...]
    eager_us: tuple[float, ...]
    serial_us: tuple[float, ...]
    parallel_us: tuple[float, ...]
    key: str
    load: float = 0.0  # 1-minute load average while measuring


def _key() -> str:
    import numba
    return (f"cpus={os.cpu_count()} torch_threads={torch.get_num_threads()} "
            f"numba_threads={numba.get_num_threads()} torch={torch.__version__} "
            f"numba={numba.__version__} v2")


def _path() -> Path:
    from .triton import cache_dir
    if os.environ.get("GRAPHOPT_CALIBRATION"):
        return Path(os.environ["GRAPHOPT_CALIBRATION"])
    base = os.environ.get("NUMBA_CACHE_DIR")
    return Path(base) / "graphopt_calibration.json" if base else \
        cache_dir() / "graphopt_calibration.json"


def calibration(refresh: bool = False) -> Calibration:
    """This machine's measured sizes (cached on disk; measured on first use) (ch. 6)."""
    key = _key()
    if not refresh and key in _MEMO:
        return _MEMO[key]
    path = _path()
    stored = _load(path)
    if refresh or os.environ.get("GRAPHOPT_RECALIBRATE") or key not in stored or \
            _busier_then(stored[key]):
        stored[key] = asdict(measure())
        _save(path, stored)
    _MEMO[key] = Calibration(**{k: tuple(v) if isinstance(v, list) else v
                                for k, v in stored[key].items()})
    return _MEMO[key]


def _load_average() -> float:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0


def _busier_then(record: dict) -> bool:
    """Measured on an oversubscribed machine that is much quieter now: measure again."""
    then, cores = record.get("load", 0.0), os.cpu_count() or 1
    return then > cores and _load_average() < then / 2


def _load(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _save(path: Path, stored: dict) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(stored, indent=1))
        tmp.replace(path)  # atomic: parallel test processes may calibrate at once
    except OSError:
        pass  # a read-only cache: measure again next process


def measure(rounds: int = 5) -> Calibration:
    """Time the 2-op group eagerly and as serial and parallel kernels at SIZES (ch. 6).

    The kernel cache and its hit/miss counts are left as they were: measuring must
    not change what `codegen.cache_info()` shows a reader.
    """
    with cache.unchanged():
        return _measure(rounds)


def _measure(rounds: int) -> Calibration:
    from torch import fx

    from . import cpu
    from .kernel import compile_group
    from .launch import OutputPool

    gm = fx.symbolic_trace(lambda x: x * 1.5 + 0.5)
    kernel = compile_group(gm, backend="numba")
    rows = {"eager": [], "serial": [], "parallel": []}
    with torch.no_grad():
        for n in SIZES:
            x = torch.randn(n)
            spec = kernel.specialize([x], "numba")
            module, layout = cache.compiled(spec, kernel.program), kernel.layout
            pool = OutputPool(layout.out_shapes, x.dtype, x.device)
            runs = {"eager": lambda x=x: gm(x)}
            for name, at in (("serial", 1 << 62), ("parallel", 0)):
                run = cpu.plan(module, kernel.program, layout, [x], pool.take()[0],
                               at)
                runs[name] = lambda run=run, x=x, pool=pool: run([x], *pool.take())
            best = fastest(runs, rounds)
            for name in rows:
                rows[name].append(best[name] * 1e6)
    return _decide(rows)


def _first_from(wins: list[bool]) -> int:
    """Index of the first size that wins (len(wins) when none does)."""
    return next((k for k, w in enumerate(wins) if w), len(wins))


def _decide(rows: dict) -> Calibration:
    serial, par, eager = rows["serial"], rows["parallel"], rows["eager"]
    k_par = _first_from([p < s for p, s in zip(par, serial)])
    best = [min(s, p) for s, p in zip(serial, par)]
    k_min = _first_from([b <= e for b, e in zip(best, eager)])
    beyond = SIZES[-1] * 2  # never won in the range measured: only above it
    return Calibration(
        min_numel=0 if k_min == 0 else (SIZES[k_min] if k_min < len(SIZES) else beyond),
        parallel_numel=SIZES[k_par] if k_par < len(SIZES) else beyond,
        sizes=SIZES, eager_us=tuple(eager), serial_us=tuple(serial),
        parallel_us=tuple(par), key=_key(), load=_load_average())
