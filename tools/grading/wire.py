"""The wire between the hand-in's process and the tests' process: values as data.

The tests never hold an object the hand-in made, only a copy rebuilt from data:
None, numbers, strings, tuples, lists, dicts, sets, tensors, dtypes, torch.nn
modules (their state, never their code) and fx GraphModules (their graph, rebuilt by
fx from an allowlist of functions: aten ops, operator, math, torch, F, and the
hand-out's own functions by name). Anything else stays where it was made and
crosses as a handle: calling a handle asks the other process to run it there.
A message is torch.save of a tree of plain containers and tensors, read back with
torch.load(weights_only=True): no pickled code ever reaches the tests.

    wire.py        messages, handles (Remote) and one end of the wire (Conn)
    wire_side.py   Side: what a value becomes on the wire, and back
    wire_graph.py  GraphModules as data, and the functions a graph may call
    wire_code.py   mirrors of the tests' models and functions
    wire_nodes.py  fx nodes and enum members

These files are mounted into both sandboxes; they import nothing of the grader.
"""

import io
import os
import re
import struct

import torch
import torch.fx as fx

MAX_MESSAGE = 512 << 20   # bytes; a larger message is refused
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class GraderNote(Exception):
    """A failure the grader itself words (no test data in it): shown for hidden
    cases too."""


class WireError(GraderNote):
    """A value that cannot cross, or a message that breaks the rules."""


class Stale(GraderNote, RuntimeError):
    """A module whose code is older than its graph (no recompile())."""


class Mutated(GraderNote, AssertionError):
    """A call changed the objects the tests gave it."""


# ---------------------------------------------------------------- framing

def pack(message) -> bytes:
    """One message as bytes: raises (nothing sent) when a value cannot be saved."""
    buffer = io.BytesIO()
    torch.save(message, buffer)
    data = buffer.getvalue()
    return struct.pack(">Q", len(data)) + data


def send(fd: int, message) -> None:
    write(fd, pack(message))


def write(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _read(fd: int, n: int) -> bytes:
    parts, left = [], n
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError("the other process closed the wire")
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def receive(fd: int):
    (size,) = struct.unpack(">Q", _read(fd, 8))
    if size > MAX_MESSAGE:
        raise WireError(f"a message of {size} bytes (the limit is {MAX_MESSAGE})")
    return torch.load(io.BytesIO(_read(fd, size)), weights_only=True)


def _remote_class(name: str):
    """A Remote subclass named as the object's class, for the tests' messages
    ("must return a GraphModule, not _Anything")."""
    name = name if _IDENT.match(name) and len(name) <= 60 else "Remote"
    return type(name, (Remote,), {})


class Remote:
    """An object of the other process: calling it, or reading an attribute, asks
    that process, which answers with a value (or another handle)."""

    def __init__(self, side, ident: int):
        self.__dict__.update(_side=side, _id=ident, __name__=f"handin_{ident}",
                             __qualname__=f"handin_{ident}")

    def __call__(self, *args, **kwargs):
        return self._side.remote("call", self._id, args, kwargs)

    def __getattr__(self, name):
        # private names never cross (the other side refuses them): answer here, as
        # getattr(obj, "_x", default) expects (torch 2.14's fx codegen asks so)
        if name.startswith("_"):
            raise AttributeError(name)
        return self._side.remote("getattr", self._id, name)

    def __repr__(self):
        return f"<an object of the other process ({self._id})>"

    def __deepcopy__(self, memo):  # a copy of a reference to the other process's
        return self                # object refers to it too

    def __copy__(self):
        return self


class HandinError(Exception):
    """An exception raised by the hand-in's code, in its own process."""

    def __init__(self, kind: str, where: str, text: str):
        super().__init__(f"{kind}{where}: {text}" if text else f"{kind}{where}")
        self.kind, self.where, self.text = kind, where, text


class Conn:
    """One process's end of the wire: requests to the other side, and answers to
    the other side's requests that arrive while it waits."""

    def __init__(self, side, rfd: int, wfd: int, on_other=None):
        self.side, self.rfd, self.wfd = side, rfd, wfd
        self.on_other = on_other   # a message that is no request nor reply
        self.used: set = set()     # what the other side reported using (spies)
        self.broken = ""           # why the wire cannot be trusted any more
        self.after = None          # the arguments of the last call, as it left them
        side.remote = self.request

    def _receive(self):
        try:
            return receive(self.rfd)
        except Exception as e:  # EOF, garbage, a message too large: no resync
            self.broken = self.broken or f"{type(e).__name__}: {e}"[:200]
            raise WireError(f"the wire to the other process broke ({e})"[:300]) \
                from None

    def request(self, kind, ident, *rest):
        send(self.wfd, {"op": kind, "id": ident, "rest": self.side.encode(list(rest))})
        value = self.wait()
        if self.after is not None and kind == "call":
            what = changed(list(rest), self.after)
            if what:
                raise Mutated(
                    f"your function changed {what} it was given: leave the caller's "
                    "objects as they were (work on a copy, copy.deepcopy)")
        return value

    def wait(self):
        while True:
            msg = self._receive()
            op = msg.get("op") if isinstance(msg, dict) else None
            if op in ("call", "getattr"):
                self.answer(msg)
            elif op == "result":
                self.used.update(str(u) for u in msg.get("used", ()))
                self.after = self.side.decode(msg["args"]) if "args" in msg else None
                return self.side.decode(msg["value"])
            elif op == "error":
                self.used.update(str(u) for u in msg.get("used", ()))
                raise _error_class(str(msg["kind"]))(
                    str(msg["kind"]), str(msg["where"]), str(msg["text"]))
            elif self.on_other is not None:
                result = self.on_other(msg)
                if result is not None:
                    return result
            else:
                raise WireError(f"an unexpected message {op!r}")

    def answer(self, msg, used=()):
        try:
            obj = self.side.handles[int(msg["id"])]
            rest = self.side.decode(msg["rest"])
            if msg["op"] == "call":
                value = obj(*rest[0], **rest[1])
            elif not self.side.trusting and str(rest[0]).startswith("_"):
                raise AttributeError(f"{rest[0]} is private to the tests")
            else:
                value = getattr(obj, str(rest[0]))
            reply = {"op": "result", "value": self.side.encode(value)}
            if msg["op"] == "call" and self.side.trusting:  # the hand-in's side
                try:  # what the call did to its arguments, for the tests to see
                    reply["args"] = self.side.encode(rest)
                except WireError:
                    pass
            reply["used"] = sorted(used() if callable(used) else used)
            data = pack(reply)  # a value torch.save refuses is an error reply
        except BaseException as e:  # SystemExit too: it is the hand-in's answer
            kind, where, text = describe(e)
            data = pack({"op": "error", "kind": kind, "where": where, "text": text,
                         "used": sorted(used() if callable(used) else used)})
        write(self.wfd, data)


def _error_class(kind: str):
    """HandinError, also an instance of the builtin exception it stands for, so a
    test's `except AttributeError` still catches the hand-in's AttributeError."""
    import builtins
    base = getattr(builtins, kind, None) if _IDENT.match(kind) else None
    if not (isinstance(base, type) and issubclass(base, Exception)) \
            or issubclass(base, (KeyError, UnicodeError, OSError)):
        return HandinError  # their own str() or arguments: a plain HandinError
    try:
        cls = type(kind, (HandinError, base), {})
        cls("x", "", "")
        return cls
    except TypeError:
        return HandinError


def changed(before, after, where="") -> str:
    """'' when `after` (the hand-in's copies after a call) equals `before`, else
    what changed: the tests' own objects never change, so they check here."""
    if isinstance(before, torch.Tensor):
        same = isinstance(after, torch.Tensor) and before.shape == after.shape \
            and before.dtype == after.dtype and bool(torch.equal(
                torch.nan_to_num(before.detach()), torch.nan_to_num(after.detach())))
        return "" if same else f"the tensor{where}"
    if isinstance(before, fx.GraphModule):
        if not isinstance(after, fx.GraphModule) or [
                n.format_node() for n in before.graph.nodes] != [
                n.format_node() for n in after.graph.nodes]:
            return f"the graph{where}"
    if isinstance(before, torch.nn.Module):
        a, b = before.state_dict(), getattr(after, "state_dict", dict)()
        if set(a) != set(b):
            return f"the module{where}"
        return next((changed(a[k], b[k], f" {k} of the module{where}") for k in a
                     if changed(a[k], b[k])), "")
    if isinstance(before, (list, tuple)) and isinstance(after, (list, tuple)) \
            and len(before) == len(after):
        return next((changed(x, y, where) for x, y in zip(before, after)
                     if changed(x, y, where)), "")
    if isinstance(before, dict) and isinstance(after, dict):
        return next((changed(v, after[k], where) for k, v in before.items()
                     if k in after and changed(v, after[k], where)), "")
    return ""


def describe(e: BaseException) -> tuple[str, str, str]:
    """(type, ' (cell 6 line 3)', message) of an exception from a notebook cell."""
    import traceback
    if isinstance(e, SystemExit):
        return "SystemExit", "", "exit() called" + (f" ({e})" if str(e) else "")
    frames = [f for f in traceback.extract_tb(e.__traceback__)
              if f.filename.startswith("<cell")]
    where = f" ({frames[-1].filename[1:-1]} line {frames[-1].lineno})" if frames else ""
    return type(e).__name__, where, " ".join(str(e).split())[:300]


from wire_side import Side  # noqa: E402, F401  (after what it imports from here)
