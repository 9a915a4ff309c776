"""The wait policy of a measurement: the variables a child process starts with."""

import os
import subprocess
import sys

import pytest

from graphopt import peers
from graphopt.peers import waiting


def test_each_policy_sets_exactly_its_variables():
    for policy in peers.WAIT_POLICIES:
        env = {"OMP_WAIT_POLICY": "stale", "GOMP_SPINCOUNT": "stale", "OTHER": "x"}
        waiting.set_policy(policy, env)
        assert waiting.current(env) == policy
        assert env["OTHER"] == "x"
    assert waiting.omp_env("bounded") == {"OMP_WAIT_POLICY": None,
                                          "GOMP_SPINCOUNT": waiting.SPIN_COUNT}
    assert waiting.current({}) == "default"
    assert "GOMP_SPINCOUNT=7" in waiting.current({"GOMP_SPINCOUNT": "7"})


def test_ort_spins_unless_passive():
    assert [waiting.ort_spins(p) for p in ("bounded", "passive", "active")] == \
        [True, False, True]


def test_unknown_policy_is_refused_with_the_choices():
    with pytest.raises(peers.PeerError, match="bounded, passive, active"):
        waiting.omp_env("lazy")
    with pytest.raises(peers.PeerError, match="unknown wait policy"):
        peers.Worker(lambda: None, "eager", threads=1, wait="lazy")


def test_child_env_reaches_the_child_and_restores_the_parent(monkeypatch):
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    code = ("import os; print(os.environ.get('OMP_WAIT_POLICY'), "
            "os.environ.get('GOMP_SPINCOUNT'))")
    with waiting.child_env("bounded"):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True,
                             text=True, check=True).stdout.split()
    assert out == ["None", waiting.SPIN_COUNT]
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    assert "GOMP_SPINCOUNT" not in os.environ


def test_interleave_waits_settle_s_before_each_round():
    stamps = []

    def timer(calls):
        import time
        stamps.append(time.perf_counter())
        return [1e-3] * calls

    peers.interleave({"a": timer, "b": timer}, rounds=2, calls=1, settle_s=0.05)
    gaps = [b - a for a, b in zip(stamps, stamps[1:])]
    assert len(stamps) == 4 and min(gaps) >= 0.05


def test_benchmarks_set_the_policy_peers_waiting_means(monkeypatch):
    # benchmarks/wait_policy.py must set, before torch loads, what waiting checks later
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
    try:
        import wait_policy
    finally:
        sys.path.pop(0)
    for policy in wait_policy.CHOICES:
        monkeypatch.setenv("OMP_WAIT_POLICY", "stale")
        monkeypatch.setenv("GOMP_SPINCOUNT", "stale")
        assert wait_policy.from_argv(["fusion.py", "--wait", policy]) == policy
        assert waiting.current() == policy
        wait_policy.check(policy)
    assert wait_policy.from_argv(["fusion.py"]) == "bounded"  # the default
    with pytest.raises(SystemExit, match="--wait passive"):
        wait_policy.check("passive")  # the variables say bounded
