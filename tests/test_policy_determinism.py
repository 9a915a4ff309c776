"""The default kernel policy decides from shapes, never from a timing (chapter 7).

Two fresh processes optimise ResNet-18, MobileNetV3-Small and the BERT encoder, one
after the other: a QUIET one, alone on the machine and with no calibration record on
disk (a measuring policy would time afresh), then a BUSY one while a spinning process
holds every core (a measuring policy would see a loaded machine and choose
otherwise). The graphs (each node's op, target, arguments and chosen kernel), the
kernel counts, the bytes moved and the notes must be identical. Small inputs keep
each process to a few seconds.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from graphopt.backend import onednn

CHILD = textwrap.dedent("""
    import json, sys, torch
    import graphopt
    from graphopt import models

    def describe(gm):
        def arg(a):
            if isinstance(a, torch.fx.Node):
                return a.name
            if isinstance(a, (list, tuple)):
                return [arg(b) for b in a]
            return repr(a)
        rows = []
        for n in gm.graph.nodes:
            row = [n.op, str(n.target), arg(n.args), arg(dict(n.kwargs))]
            if n.op == "call_module":
                m = gm.get_submodule(n.target)
                row += [type(m).__name__, str(getattr(m, "kernel", "")),
                        str(getattr(m, "backend", "")),
                        " -> ".join(getattr(m, "ops", []))]
            rows.append(row)
        return rows

    out = {}
    for name, sizes in (("resnet18", {"size": 32}),
                        ("mobilenet_v3_small", {"size": 32}),
                        ("bert", {"seq_len": 8})):
        try:
            model, x = models.example(name, **sizes)
        except models.MissingPackageError:
            continue
        with torch.no_grad():
            res = graphopt.optimize(model, *x, keep_stages=False, stats=False)
            report = graphopt.run(res.module, *x)
        out[name] = {"graph": describe(res.module), "kernels": report.kernels,
                     "bytes": report.bytes_moved, "notes": res.notes}
    json.dump(out, sys.stdout)
""")

SPIN = "import time\nend = time.time() + 300\nwhile time.time() < end: pass\n"


def _start(env):
    return subprocess.Popen([sys.executable, "-c", CHILD], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _result(proc):
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out)


@pytest.mark.skipif(not onednn.available(), reason="no oneDNN")
def test_optimize_is_the_same_on_a_quiet_and_a_busy_machine(tmp_path):
    env = dict(os.environ, PYTHONHASHSEED="0")
    quiet = _result(_start(dict(env, GRAPHOPT_CALIBRATION=str(tmp_path / "none.json"))))
    assert not (tmp_path / "none.json").exists()  # nothing was measured
    spinners = [subprocess.Popen([sys.executable, "-c", SPIN])
                for _ in range(os.cpu_count() or 1)]  # every core busy
    try:
        busy = _result(_start(env))
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
    a, b = quiet, busy
    assert {"resnet18", "mobilenet_v3_small"} <= set(a)
    assert set(a) == set(b)
    for name in a:
        assert a[name]["graph"] == b[name]["graph"], name
        assert (a[name]["kernels"], a[name]["bytes"]) == \
            (b[name]["kernels"], b[name]["bytes"]), name
        assert a[name]["notes"] == b[name]["notes"], name
