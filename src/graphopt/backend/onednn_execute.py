"""A primitive's call in one crossing from Python into native code (chapter 7).

A `Primitive` call (`onednn_direct`) points three or four memory objects at the
call's tensors (`dnnl_memory_set_data_handle`) and runs the primitive
(`dnnl_primitive_execute`). Through ctypes each of those is a crossing of its own,
some 0.35 us, and ctypes releases the GIL around each one, so the sequence needs a
lock against another Python thread calling the same primitive. `runner()` gives
the same sequence compiled by numba: one crossing, and the GIL held throughout, so
no lock. On a 1x1 conv of a 4x4 map (almost no arithmetic) a call took 2.6 us
against 4.2 through ctypes; MobileNetV3-Small makes 37 such calls.

Where numba is missing the ctypes sequence runs, under one lock.
"""

from __future__ import annotations

import functools
import threading
from typing import Callable

from . import onednn_capi as capi
from .rowwise import _numba_installed


@functools.cache
def runner() -> Callable:
    """run(primitive, stream, nargs, args, src, x, dst, out, bias, b, other, o)
    -> status: the handles and addresses as ints; `bias` and `other` (memory
    objects) 0 where the primitive has none (chapter 7). Compiled on first use."""
    lib = capi.library().lib
    run = _sequence(lib.dnnl_memory_set_data_handle, lib.dnnl_primitive_execute)
    if _numba_installed():
        from numba import njit

        return njit(cache=False)(run)  # it calls the loaded library: not cacheable
    lock = threading.Lock()  # ctypes lets go of the GIL between the calls

    def locked(*args):
        with lock:
            return run(*args)

    return locked


def _sequence(set_data, execute) -> Callable:
    """The call's steps, for numba to compile (or ctypes to run)."""

    def run(primitive, stream, nargs, args, src, x, dst, out, bias, b, other, o):
        set_data(src, x)
        set_data(dst, out)
        if bias:
            set_data(bias, b)
        if other:
            set_data(other, o)
        return execute(primitive, stream, nargs, args)

    return run
