"""One exception family. Every message says what went wrong and what to do next."""

from .i18n import N_


class GraphoptError(Exception):
    """Base class of every error graphopt raises on purpose (chapters 1-7)."""


class CaptureError(GraphoptError):
    """The model could not be turned into a graph (see chapter 2 for alternatives)."""


class InputError(GraphoptError, TypeError):
    """An example input has the wrong type or dtype for the model (chapters 1-7)."""


class ShapeError(GraphoptError, ValueError):
    """A captured graph was called with input shapes it was not specialised for.

    Raised throughout chapters 1-7.
    """


class UnsupportedOpError(GraphoptError):
    """A node uses an operator that this part of graphopt does not handle.

    Raised throughout chapters 1-7.
    """


class MissingDotError(GraphoptError):
    """Graphviz's `dot` program is not installed, so a drawing cannot be rendered.

    Raised throughout chapters 1-7.
    """


class NoGPUError(GraphoptError):
    """A CUDA device was asked for but this machine has none (chapters 1-7)."""


class ExplorerBudgetError(GraphoptError, ValueError):
    """A static explorer would precompute more than its budget (chapter 3): the
    message says which passes change the model, to pass fewer with `passes=[...]`."""


class NotEquivalentError(GraphoptError, AssertionError):
    """Two graphs disagree numerically on the same inputs (chapters 1-7)."""


# English; shown with graphopt.i18n._ (the reader's language, GRAPHOPT_LANG)
DOT_INSTALL_HINT = N_(
    "Graphviz's `dot` program is needed to render drawings. Install it with one of:\n"
    "  conda install -c conda-forge graphviz\n"
    "  brew install graphviz          (macOS)\n"
    "  sudo apt-get install graphviz  (Debian, Ubuntu)\n"
    "The DOT text is still available as `drawing.source`."
)


def first_line(e: BaseException) -> str:
    """The first line of `e`'s message, for errors that quote it (chapters 1-7)."""
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
