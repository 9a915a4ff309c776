"""Read a hand-in and the autograder, outside the sandbox (trusted code only).

The hand-in runs in a process of its own and the tests in another (student.py,
runner.py), so nothing a cell does can reach the tests: every statement is run,
prints, `helpers.extend(...)` and `os.makedirs(...)` included. Only what cannot
run outside Jupyter is left out, and named in the feedback with its line: otter's
init and check cells, a statement that uses otter's `grader`, an IPython magic.
"""

from __future__ import annotations

import ast
import doctest
import re
import threading
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

_TASK_HEADER = re.compile(r"^##\s*Task\s+(\d+)\.(\d+)", re.M)
# CPython 3.11.7's ast.parse is not thread-safe ("AST constructor recursion depth
# mismatch" when two threads parse at once), and classrun grades in threads.
_PARSING = threading.Lock()


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """ast.parse, one thread at a time."""
    with _PARSING:
        return ast.parse(source, filename)


@dataclass
class Case:
    """One test case of the autograder's own table."""

    task: str          # task_2_1
    index: int         # 1-based within its task
    hidden: bool
    points: float
    message: str
    examples: list[tuple[str, str]]  # doctest (source, expected output)

    @property
    def id(self) -> str:
        return f"{self.task}#{self.index}"


def _test_files(source: Path) -> dict[str, str]:
    """{name: text} of tests/task_*.py in the autograder zip or its unpacked folder."""
    pattern = r"tests/task_\d+_\d+\.py"
    if Path(source).is_dir():
        return {f"tests/{p.name}": p.read_text()
                for p in sorted(Path(source).glob("tests/task_*.py"))
                if re.fullmatch(pattern, f"tests/{p.name}")}
    with zipfile.ZipFile(source) as z:
        return {n: z.read(n).decode() for n in sorted(z.namelist())
                if re.fullmatch(pattern, n)}


def read_cases(source: Path) -> list[Case]:
    """The cases in the autograder's tests/*.py (otter's format), in task order."""
    parser, cases = doctest.DocTestParser(), []
    for _name, text in sorted(_test_files(source).items()):
        namespace = {}
        exec(text, namespace)  # our own zip, hashed before and after the run
        test = namespace["test"]
        for i, case in enumerate(test["suites"][0]["cases"], 1):
            examples = [(ex.source, ex.want)
                        for ex in parser.get_examples(case["code"])]
            cases.append(Case(test["name"], i, bool(case["hidden"]),
                              float(case["points"]),
                              case.get("failure_message") or "", examples))
    return cases


def not_a_notebook(path: Path) -> str | None:
    """Why `path` cannot be graded as a notebook, or None when it can."""
    if path.is_dir():
        count = len(list(path.glob("*.ipynb")))
        return f"a folder with {count} notebooks (hand in exactly one)"
    if path.suffix != ".ipynb":
        return f"not a notebook ({path.suffix or 'no extension'} file)"
    try:
        nbformat.validate(nbformat.read(path, as_version=4))
    except Exception as e:  # invalid JSON, wrong schema, binary junk
        first = " ".join(str(e).split()) or type(e).__name__
        return f"not a valid notebook: {first[:120]}"
    return None


def _is_init(source: str) -> bool:
    return "otter.Notebook(" in source or source.lstrip().startswith("grader.")


def _code_cells(nb) -> list[tuple[int, object]]:
    return [(i, c) for i, c in enumerate(nb.cells) if c.cell_type == "code"]


def provided(release: Path) -> list[tuple[str, str]]:
    """The hand-out's own code cells (not answers, not otter's): (label, source)."""
    nb = nbformat.read(release, as_version=4)
    return [(f"<provided {i}>", c.source) for i, c in _code_cells(nb)
            if "otter_answer_cell" not in c.metadata.get("tags", [])
            and not _is_init(c.source)]


def answer_names(release: Path) -> dict[str, set[str]]:
    """{task: names its answer cells define}, from the hand-out."""
    nb = nbformat.read(release, as_version=4)
    names, pending = {}, set()
    for _, cell in _code_cells(nb):
        check = re.search(r'grader\.check\("(task_\d+_\d+)"\)', cell.source)
        if check:
            names.setdefault(check[1], set()).update(pending)
            pending = set()
        elif "otter_answer_cell" in cell.metadata.get("tags", []):
            pending |= _defined(parse(cell.source))
    return names


def wrong_lab(sub: "Submission", names: dict[str, set[str]], lab: int) -> str:
    """Why the hand-in is another lab's notebook, or '' when it may be this one.

    A notebook that defines none of the lab's answers and names other tasks in its
    headers ("## Task 2.1") is another lab: say so, not a NameError per test.
    """
    answers = set().union(*names.values()) if names else set()
    defined = set().union(*(_defined(parse(c.source)) for c in sub.cells)) \
        if sub.cells else set()
    if answers & defined:
        return ""
    others = sorted({int(t.split("_")[1]) for t in sub.tasks} - {lab})
    which = (f"this is lab {', '.join(map(str, others))}'s notebook, not lab {lab}'s"
             if others else f"this is not lab {lab}'s notebook")
    return (f"{which}: it defines none of lab {lab}'s answers "
            f"({', '.join(sorted(answers)[:4])}, ...); hand in the lab {lab} notebook")


def _defined(tree: ast.Module) -> set[str]:
    out = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, ast.Assign):
            out |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return out


@dataclass
class Cell:
    label: str                 # "<cell 6>": the name tracebacks and checks use
    source: str                # what the sandbox runs
    task: str | None = None    # the task whose answers it holds
    dropped: list[str] = field(default_factory=list)


@dataclass
class Submission:
    """What the grader takes from one notebook."""

    cells: list[Cell]
    problems: list[str]        # reasons to show: syntax errors, dropped statements
    warnings: list[str]
    forbidden: dict[str, str]  # task -> what it used
    notes: list[str] = field(default_factory=list)  # cell-order traps, for students
    forbidden_in: dict[str, str] = field(default_factory=dict)  # task -> what
    tasks: set[str] = field(default_factory=set)   # tasks its headers name


def read_submission(path: Path, names: dict[str, set[str]],
                    forbidden: tuple[str, ...] = (),
                    forbidden_in: dict[str, tuple[str, ...]] | None = None
                    ) -> Submission:
    from IPython.core.inputtransformer2 import TransformerManager

    nb = nbformat.read(path, as_version=4)
    transform = TransformerManager().transform_cell
    cells, problems, warnings = [], [], []
    if not any("otter_answer_cell" in c.metadata.get("tags", []) for c in nb.cells):
        warnings.append("no otter metadata (pasted into a new notebook?): "
                        "answers found by the names they define")
    task_here, tasks = None, set()
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            header = _TASK_HEADER.search(cell.source)
            task_here = f"task_{header[1]}_{header[2]}" if header else task_here
            tasks |= {f"task_{a}_{b}" for a, b in _TASK_HEADER.findall(cell.source)}
            continue
        if cell.cell_type != "code" or _is_init(cell.source):
            continue
        label = f"<cell {i + 1}>"
        try:
            source = transform(cell.source)
            tree = parse(source, label)
        except SyntaxError as e:
            problems.append(f"syntax error in cell {i + 1} line {e.lineno}: {e.msg}")
            continue
        kept, dropped = _filter(tree, source)
        task = _task_of(tree, names) or task_here
        cells.append(Cell(label, kept, task, dropped))
    found = _forbidden_uses(cells, names, forbidden)
    notes = redefined(cells, names) + used_before_defined(cells)
    scoped = _forbidden_in_answers(cells, names, forbidden_in or {})
    return Submission(cells, problems, warnings, found, notes, scoped, tasks)


def _definitions(cells) -> dict[str, list[str]]:
    """{name: labels of the cells that define it with def or class}, in order."""
    found = {}
    for cell in cells:
        for node in parse(cell.source).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                found.setdefault(node.name, []).append(cell.label[1:-1])
    return found


def redefined(cells, names) -> list[str]:
    """A warning per graded function defined in more than one cell.

    Every cell runs before the tests, so the last definition is the one graded:
    a later experiment with the same name silently replaces the answer.
    """
    graded = set().union(*names.values()) if names else set()
    notes = []
    for name, where in _definitions(cells).items():
        if name in graded and len(where) > 1:
            notes.append(f"redefined: {name} is defined in {', '.join(where)}; the "
                         f"grader tests the last one ({where[-1]}): delete or rename "
                         "the other definitions")
    return notes


def used_before_defined(cells) -> list[str]:
    """A warning per function or class used in a cell above the one defining it.

    Restart & Run All runs cells top to bottom: a helper defined below its first
    use raises NameError there (the grader runs the cells in notebook order too).
    """
    first = {name: where[0] for name, where in _definitions(cells).items()}
    order = {cell.label[1:-1]: n for n, cell in enumerate(cells)}
    notes, seen = [], set()
    for n, cell in enumerate(cells):
        for node in ast.walk(parse(cell.source)):
            if not (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)):
                continue
            name = node.id
            if name in first and order[first[name]] > n and name not in seen:
                seen.add(name)
                notes.append(f"used before defined: {name} is used in "
                             f"{cell.label[1:-1]} line {node.lineno} but defined only "
                             f"later, in {first[name]}: after Restart & Run All this "
                             "raises NameError; move the definition above its use")
    return notes


def _task_of(tree, names) -> str | None:
    defined = _defined(tree)
    return next((t for t, ns in names.items() if ns & defined), None)


def _filter(tree: ast.Module, source: str) -> tuple[str, list[str]]:
    """The statements kept, as source lines; a note per statement dropped."""
    lines = source.splitlines()
    keep = [""] * len(lines)
    dropped = []
    for node in tree.body:
        why = _drop_reason(node)
        first = min([node.lineno] + [d.lineno for d in
                                     getattr(node, "decorator_list", [])])
        segment = lines[first - 1:node.end_lineno]
        if why:
            dropped.append(f"line {node.lineno}: {why}")
        if why:
            continue
        # same line numbers as the notebook: tracebacks point at the cell
        keep[first - 1:node.end_lineno] = segment
    return "\n".join(keep), dropped


def _drop_reason(node: ast.stmt) -> str | None:
    """Why a top-level statement is not run when grading; None to keep it."""
    text = ast.unparse(node)
    defines = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    if not isinstance(node, defines) and re.search(r"\b(grader|otter)\b", text):
        return "uses otter's grader (the grader runs the tests itself)"
    if not isinstance(node, defines) and "get_ipython()" in text:
        return "an IPython magic (% or !), which runs only in Jupyter"
    return None


def _leaves(target):
    if isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            yield from _leaves(element)
    elif isinstance(target, ast.Starred):
        yield from _leaves(target.value)
    else:
        yield target


def _forbidden_uses(cells, names, forbidden) -> dict[str, str]:
    """{task: 'graphopt.passes'} for each task whose answers use forbidden code."""
    if not forbidden:
        return {}
    aliases = {}  # local name -> forbidden module it stands for
    for cell in cells:
        for node in ast.walk(parse(cell.source)):
            for local, full in _imports(node):
                hit = next((f for f in forbidden if full == f
                            or full.startswith(f + ".")), None)
                if hit:
                    aliases[local] = hit
    found = {}
    for cell in cells:
        for node in ast.walk(parse(cell.source)):
            hit = _forbidden_node(node, forbidden, aliases)
            if hit and cell.task:
                found.setdefault(cell.task, hit)
    for task, defined in names.items():
        for name in defined & set(aliases):
            found.setdefault(task, aliases[name])
    return found


def _forbidden_in_answers(cells, names, forbidden_in) -> dict[str, str]:
    """{task: 'graphopt.run'} for each task whose own answer functions use what that
    task forbids (FORBIDDEN_IN). Only the bodies of the functions and classes the
    task's answer cells define are read: a scratch cell that checks an answer with
    graphopt.run is fine; a helper the answer calls is caught while the tests run.
    """
    found = {}
    for task, banned in forbidden_in.items():
        aliases = {}
        for cell in cells:
            for node in ast.walk(parse(cell.source)):
                for local, full in _imports(node):
                    hit = next((f for f in banned if full == f
                                or full.startswith(f + ".")), None)
                    if hit:
                        aliases[local] = hit
        defs = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
        for cell in cells:
            for top in parse(cell.source).body:
                if not (isinstance(top, defs) and top.name in names.get(task, ())):
                    continue
                for node in ast.walk(top):
                    hit = _forbidden_node(node, banned, aliases)
                    if hit:
                        found.setdefault(task, hit)
    return found


def _imports(node):
    if isinstance(node, ast.Import):
        for a in node.names:  # `import graphopt.passes` binds graphopt: no alias
            yield (a.asname or a.name), a.name
    elif isinstance(node, ast.ImportFrom) and node.module:
        for a in node.names:
            yield (a.asname or a.name), f"{node.module}.{a.name}"


def _forbidden_node(node, forbidden, aliases) -> str | None:
    for _, full in _imports(node):
        hit = next((f for f in forbidden if full == f or full.startswith(f + ".")),
                   None)
        if hit:
            return hit
    if isinstance(node, ast.Name) and node.id in aliases:
        return aliases[node.id]
    if isinstance(node, ast.Attribute):
        dotted = ast.unparse(node)
        return next((f for f in forbidden if dotted == f
                     or dotted.startswith(f + ".")), None)
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return next((f for f in forbidden if f in node.value), None)
    return None


def pin_predictions(sub: Submission, names: tuple[str, ...]) -> dict[str, str]:
    """{name: why} for each prediction the hand-in computes instead of writing out.

    "Predict before you run" answers (lab 5's FLATTEN_COUNTS, PREDICTED) are graded
    only as literals the student wrote: one that calls try_capture, or anything
    else, would always be right. The tests then see the last literal assignment
    of the source, pinned by a cell run after the student's, so a loop, exec() or
    a function with `global` that rebinds the name later changes nothing.
    """
    literal, why = {}, {}
    for cell in sub.cells:
        for stmt in parse(cell.source).body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue  # a function's own locals; a `global` rebinding is pinned
            for name in names:
                binding = _binding(stmt, name)
                if binding is None:
                    continue
                value = _literal(stmt, name)
                if value is not None:
                    literal[name] = value
                    why.pop(name, None)
                    continue
                literal.pop(name, None)
                calls = sorted({ast.unparse(n.func) for n in ast.walk(stmt)
                                if isinstance(n, ast.Call)})
                how = f" (it calls {', '.join(calls)})" if calls else ""
                why[name] = (f"{name} is a prediction: write it out by hand, as a "
                             "literal (numbers, True/False, tuples, a dict of them), "
                             "before running anything; "
                             f"{cell.label[1:-1]} line {binding} computes it{how}")
    if literal:
        sub.cells.append(Cell("<predictions>", "".join(
            f"{name} = {value}\n" for name, value in literal.items())))
    return why


def _binding(stmt, name) -> int | None:
    """The line where a top-level statement binds `name` (anywhere inside), or None."""
    for node in ast.walk(stmt):
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For,
                               ast.comprehension, ast.NamedExpr)):
            targets = [node.target]
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            targets = [node.optional_vars]
        for leaf in (x for t in targets for x in _leaves(t)):
            if isinstance(leaf, (ast.Subscript, ast.Attribute)):
                leaf = leaf.value  # PREDICTED[name] = ... in a loop fills it in
            if isinstance(leaf, ast.Name) and leaf.id == name:
                return getattr(node, "lineno", getattr(stmt, "lineno", 0))
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in _MUTATORS
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == name):
            return node.lineno
    return None


_MUTATORS = {"update", "setdefault", "append", "extend", "insert", "__setitem__"}


def _literal(stmt, name) -> str | None:
    """The source of the literal in `name = <literal>`, or None for anything else."""
    if isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
        target, value = stmt.target, stmt.value
    elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
        target, value = stmt.targets[0], stmt.value
    else:
        return None
    if not (isinstance(target, ast.Name) and target.id == name):
        return None
    try:
        ast.literal_eval(value)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    return ast.unparse(value)
