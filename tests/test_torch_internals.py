"""Every private torch name graphopt reads lives in torch_internals.py (chapter 7).

Private names (a leading underscore) can change in any torch release. ruff's
banned-api rule keeps private *imports* in torch_internals.py; this test does the
same for private *attributes* of torch objects, which ruff cannot see: it parses
every module of the package and fails on an attribute access (`x._schema`) or a
`getattr`/`setattr`/`hasattr` by name (`getattr(m, "_modules")`) of a name in
`torch_internals.PRIVATE_ATTRIBUTES` anywhere else. It also keeps that list honest
(each name is read in torch_internals.py) and checks that no module patches a
class's `forward` or `__call__` (`type(gm).forward = ...`).
"""

from __future__ import annotations

import ast
from pathlib import Path

import graphopt
from graphopt.torch_internals import PRIVATE_ATTRIBUTES

PACKAGE = Path(graphopt.__file__).parent
INTERNALS = PACKAGE / "torch_internals.py"
# graphopt's own attributes that happen to share a torch name, each with its reason
ALLOWED = {
    ("explorer/engine.py", "_modules"): "the Engine's own cache of graph modules, "
                                        "a dict on a plain class, not nn.Module's",
}
_BY_NAME = {"getattr", "setattr", "hasattr", "delattr"}


def private_uses(source: str) -> list[tuple[int, str]]:
    """(line, name) of each private torch attribute `source` reads or writes."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in PRIVATE_ATTRIBUTES:
            found.append((node.lineno, node.attr))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id in _BY_NAME and len(node.args) >= 2 and \
                isinstance(node.args[1], ast.Constant) and \
                node.args[1].value in PRIVATE_ATTRIBUTES:
            found.append((node.lineno, node.args[1].value))
    return found


def class_patches(source: str) -> list[int]:
    """Lines that assign `type(x).forward` or `type(x).__call__`."""
    return [node.lineno for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Assign) for t in node.targets
            if isinstance(t, ast.Attribute) and t.attr in ("forward", "__call__")
            and isinstance(t.value, ast.Call) and isinstance(t.value.func, ast.Name)
            and t.value.func.id == "type"]


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path.relative_to(PACKAGE).as_posix(), path.read_text()


def test_the_scanner_finds_each_way_of_reading_a_private_name():
    planted = ("s = op._schema.name\ngetattr(m, '_modules')\nm._parameters['w'] = w\n"
               "x.schema\ngetattr(m, 'modules')\n")
    assert sorted(private_uses(planted)) == [(1, "_schema"), (2, "_modules"),
                                             (3, "_parameters")]
    assert class_patches("type(gm).forward = f\ntype(gm).__call__ = g\nm.forward = f\n"
                         ) == [1, 2]


def test_private_torch_attributes_are_read_only_in_torch_internals():
    wrong = []
    for rel, source in _modules():
        if rel == "torch_internals.py":
            continue
        wrong += [f"{rel}:{line} {name}" for line, name in private_uses(source)
                  if (rel, name) not in ALLOWED]
    assert not wrong, (
        "private torch attributes outside torch_internals.py (add an accessor there, "
        "with its reason, and call it):\n" + "\n".join(wrong))


def test_every_listed_name_is_read_in_torch_internals_and_each_exception_is_used():
    source = INTERNALS.read_text()
    strings = {n.value for n in ast.walk(ast.parse(source))
               if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    listed = set(PRIVATE_ATTRIBUTES)
    read = {name for _, name in private_uses(source)} | (listed & strings)
    assert listed <= read, f"listed but never read: {sorted(listed - read)}"
    sources = dict(_modules())
    for (rel, name), reason in ALLOWED.items():
        assert reason and name in {n for _, n in private_uses(sources[rel])}, rel


def test_no_module_patches_a_class_forward_or_call():
    patched = [f"{rel}:{line}" for rel, source in _modules()
               for line in class_patches(source)]
    assert not patched, patched
