"""The grader's wire: a handle to an object of the other process answers
`getattr(handle, name, default)` as a Python object does, on every torch.

torch.fx's code generator asks call targets for optional attributes with a default
(torch 2.14 asks each one for a private name). A handle sends public names to the
other process, where a missing attribute comes back as an AttributeError; private
names never cross, so the handle answers them itself. Either way the default is
returned, whatever names a torch version asks for.
"""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools" / "grading"))
import wire  # noqa: E402


class Asked:
    """A side that records what it is asked and answers as the other process's
    refusal does: an AttributeError that is also a HandinError."""

    def __init__(self):
        self.asked = []

    def remote(self, op, ident, *rest):
        self.asked.append((op, ident, *rest))
        raise wire._error_class("AttributeError")("AttributeError", "", rest[0])


@pytest.mark.parametrize("name", ["_private", "__dunder__", "public"])
def test_getattr_with_a_default_gets_the_default(name):
    side = Asked()
    handle = wire.Remote(side, 7)
    assert getattr(handle, name, ()) == ()
    assert not hasattr(handle, name)
    crossed = [a for a in side.asked if a[2] == name]
    assert bool(crossed) == (not name.startswith("_")), side.asked
