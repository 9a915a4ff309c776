"""How idle threads wait between parallel regions: a measurement's wait policy (ch. 7).

When a parallel region ends, torch's OpenMP threads and ONNX Runtime's thread pool
either sleep or spin until the next one. Each choice costs somewhere:

- **sleeping at once** (OMP_WAIT_POLICY=PASSIVE, ORT `allow_spinning=0`) makes every
  parallel region wake its threads again. On the 2-core VM of this project that wake-up
  cost about 0.1 ms per region, more than a small op's whole work: a 16x56x56 mean
  took 0.17 ms passive and 0.01 ms with warm threads, and a model launches dozens of
  parallel regions per call;
- **spinning without end** (OMP_WAIT_POLICY=ACTIVE) keeps the cores busy after the
  work is done; on a loaded machine a spinning thread that waits for a descheduled
  partner made eager ResNet-18 ten times slower.

WAIT_POLICIES, the default first:

    bounded   torch's threads spin GOMP_SPINCOUNT rounds (about a millisecond here),
              then sleep; ONNX Runtime spins as it does by default (its threads spin
              for tens of milliseconds after a run before they sleep).
              `interleave(..., settle_s=SETTLE_S)` waits before each variant's
              round, so no variant's spinning tail lands in the next one's time
    passive   sleep at once, in both runtimes
    active    spin: OMP_WAIT_POLICY=ACTIVE, ORT allow_spinning=1

OpenMP reads these variables once, when torch loads: a policy applies to a process
started after it is set (`child_env` for a `Worker`, the first cell of a notebook).
"""

from __future__ import annotations

import contextlib
import os

from .errors import PeerError

WAIT_POLICIES = ("bounded", "passive", "active")
SPIN_COUNT = "30000"   # libgomp's busy-wait rounds before a thread sleeps
SETTLE_S = 0.1         # longer than ONNX Runtime's spinning tail after a run

_OMP_ENV = {
    "bounded": {"OMP_WAIT_POLICY": None, "GOMP_SPINCOUNT": SPIN_COUNT},
    "passive": {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": None},
    "active": {"OMP_WAIT_POLICY": "ACTIVE", "GOMP_SPINCOUNT": None},
}


def check_policy(policy: str) -> None:
    """Raise PeerError unless `policy` is one of WAIT_POLICIES."""
    if policy not in WAIT_POLICIES:
        raise PeerError(f"unknown wait policy {policy!r}; choose from "
                        f"{', '.join(WAIT_POLICIES)}")


def omp_env(policy: str) -> dict[str, str | None]:
    """The OpenMP variables of `policy` (None: the variable must be unset)."""
    check_policy(policy)
    return dict(_OMP_ENV[policy])


def ort_spins(policy: str) -> bool:
    """Whether ONNX Runtime's intra-op threads may spin under `policy`."""
    check_policy(policy)
    return policy != "passive"


def set_policy(policy: str, environ=os.environ) -> None:
    """Put `policy`'s OpenMP variables in `environ` (for torch loaded after this)."""
    _apply(omp_env(policy), environ)


def _apply(values: dict[str, str | None], environ) -> None:
    for key, value in values.items():
        if value is None:
            environ.pop(key, None)
        else:
            environ[key] = value


def current(environ=os.environ) -> str:
    """The policy this process's OpenMP variables describe ("default" if none)."""
    got = {k: environ.get(k) for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    for policy in WAIT_POLICIES:
        if got == _OMP_ENV[policy]:
            return policy
    return "default" if got == {"OMP_WAIT_POLICY": None, "GOMP_SPINCOUNT": None} \
        else f"OMP_WAIT_POLICY={got['OMP_WAIT_POLICY']}, " \
             f"GOMP_SPINCOUNT={got['GOMP_SPINCOUNT']}"


@contextlib.contextmanager
def child_env(policy: str):
    """`policy`'s variables while a child process starts; this process's come back."""
    saved = {k: os.environ.get(k) for k in omp_env(policy)}
    set_policy(policy)
    try:
        yield
    finally:
        _apply(saved, os.environ)
