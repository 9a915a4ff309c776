"""Keep torch's logs, warnings and the model's prints off the screen, and record them.

Chapter 2's table shows one line per capture method; the warnings and prints go into
the row instead. `capture._quiet_torch_logs` quiets the few loggers `capture` meets;
a side-by-side run meets them all (inductor, dynamo's recompiles), and must count what
the model printed, so it needs this wider net.
"""

from __future__ import annotations

import contextlib
import io
import logging
import warnings

from ..capture import _first_line

# How torch says "this is going away": told by the warning's category, never by its
# words. torch 2.13 warns about TorchScript with a DeprecationWarning, 2.14 with a
# FutureWarning (the one Python shows users by default); both reword it on Python 3.14.
DEPRECATION_CATEGORIES = (DeprecationWarning, PendingDeprecationWarning, FutureWarning)


class Record:
    """What happened while quiet: the warnings raised and the text printed."""

    def __init__(self):
        self.stdout = io.StringIO()
        self.caught: list[warnings.WarningMessage] = []

    @property
    def warnings(self) -> list[str]:
        """Each distinct warning once, as 'Category: first line'."""
        return _distinct(self.caught)

    @property
    def deprecations(self) -> list[str]:
        """The warnings whose category says deprecated, each once, in the same form."""
        return _distinct([w for w in self.caught
                          if issubclass(w.category, DEPRECATION_CATEGORIES)])

    def printed_lines(self) -> int:
        return len(self.stdout.getvalue().splitlines())


def _distinct(caught: list[warnings.WarningMessage]) -> list[str]:
    seen: list[str] = []
    for w in caught:
        text = f"{w.category.__name__}: {_first_line(w.message)}"
        if text not in seen:
            seen.append(text)
    return seen


@contextlib.contextmanager
def quiet():
    """Silence torch's loggers and stderr, record warnings and the model's prints.

    torch.export dumps partial graphs to its logs before it gives up, and dynamo logs
    recompilations; the learner should see the one line in the table instead.
    """
    record = Record()
    torch_loggers = [logging.getLogger(name) for name in
                     list(logging.root.manager.loggerDict) if name.startswith("torch")]
    disabled = [lg.disabled for lg in torch_loggers]
    for lg in torch_loggers:
        lg.disabled = True
    try:
        with warnings.catch_warnings(record=True) as caught, \
                contextlib.redirect_stderr(io.StringIO()), \
                contextlib.redirect_stdout(record.stdout):
            warnings.simplefilter("always")
            try:
                yield record
            finally:
                record.caught = list(caught)
    finally:
        for lg, was in zip(torch_loggers, disabled):
            lg.disabled = was
