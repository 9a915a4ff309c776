"""torch.compile (inductor) as a peer, with or without freezing (chapter 7).

Freezing makes the weights constants: BN folds into the conv, conv weights are
prepacked in a blocked layout. Inductor reads the flag when the first call
compiles, and a freezing compile made after a plain one in the same process ran at
the plain one's speed: make each configuration in its own process (`Worker`).
"""

from __future__ import annotations

from typing import Callable

import torch

from ..torch_internals import inductor_config
from .quiet import quiet


def compiled(model, freezing: bool = False) -> Callable:
    """torch.compile(model) (inductor); `freezing` folds and prepacks the weights.

    Freezing is read when the first call compiles, so that call happens here, inside
    the config patch. Make each configuration in its own process (`Worker`).
    """
    fn = torch.compile(model)
    return _CompiledOnce(fn, freezing, inductor_config())


class _CompiledOnce:
    def __init__(self, fn, freezing, config):
        self.fn, self.freezing, self.config, self.ready = fn, freezing, config, False

    def __call__(self, *args):
        if not self.ready:
            with self.config.patch(freezing=self.freezing), quiet():
                out = self.fn(*args)
            self.ready = True
            return out
        return self.fn(*args)
