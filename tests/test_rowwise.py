"""The backend's LayerNorm+Add row kernel (`graphopt.backend.rowwise`): into how many
blocks its rows are split (`row_blocks`), and that both loops give eager's values."""

import pytest
import torch
import torch.nn.functional as F

from graphopt.backend import rowwise
from graphopt.measure.thread_count import threads

numba = pytest.importorskip("numba")


def test_rows_split_only_with_two_threads_two_rows_and_enough_elements():
    with threads(1):
        assert rowwise.row_blocks(1 << 20, 1024, 1 << 17) == 1  # one thread: serial
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("numba has one thread here")
    with threads(2):
        assert rowwise.row_blocks(1 << 18, 1024, 1 << 17) == 2
        assert rowwise.row_blocks(1 << 16, 256, 1 << 17) == 1  # below the threshold
        assert rowwise.row_blocks(1 << 18, 1, 1 << 17) == 1  # one row: no split


@pytest.mark.parametrize("n_threads", [1, 2])
def test_serial_and_parallel_rows_match_eager(n_threads):
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(2, 64, 96, generator=g) for _ in range(2))
    w, bias = torch.randn(96, generator=g), torch.randn(96, generator=g)
    want = F.layer_norm(a + b, (96,), w, bias, 1e-5)
    with threads(n_threads):
        for at in (1, 1 << 30):  # every size split (where threads allow), none split
            got = rowwise.add_layer_norm(a, b, w, bias, 1e-5, parallel_numel=at)
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_uneven_blocks_cover_every_row_once():
    """5 rows in 4 blocks of 2: the last block is empty; every row is written."""
    import numpy as np

    from graphopt.backend import rowwise_numba as k
    g = torch.Generator().manual_seed(1)
    a, b = (torch.randn(5, 64, generator=g) for _ in range(2))
    w, bias = torch.randn(64, generator=g), torch.randn(64, generator=g)
    out = torch.full_like(a, float("nan"))
    k.rows_parallel(a.view(-1).numpy(), b.view(-1).numpy(), w.numpy(), bias.numpy(),
                    out.view(-1).numpy(), 5, 64, np.float32(1e-5), True, True, False,
                    4)
    want = F.layer_norm(a + b, (64,), w, bias, 1e-5)
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)
