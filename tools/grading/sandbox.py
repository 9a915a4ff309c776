"""The jail each submission runs in: bubblewrap, an unprivileged uid, rlimits.

What the student's code sees: a read-only system (/usr, /lib, /bin, /etc), the
Python install and the venv read-only, graphopt's source read-only, a private /tmp
(a small tmpfs), /proc of its own PID namespace, and no network at all (a network
namespace with nothing in it: even 127.0.0.1 refuses). Not the checkout, the labs,
the class folder, the autograder zip or the output folder: they are not mounted.
The PID namespace makes the jail's first process its init: when it dies, the kernel
kills every process left in the jail, detached or not (ipykernel's own session,
a daemon started with setsid, a fork bomb). bwrap's --die-with-parent ties that init
to the grader.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

INSTALL_HINT = ("install bubblewrap (Debian/Ubuntu: sudo apt-get install bubblewrap; "
                "Fedora: sudo dnf install bubblewrap; `make setup` does it as root)")
# One uid per worker, so RLIMIT_NPROC counts one sandbox's processes and kill_uid ends
# only them: UID_BASE to UID_BASE + 63 (grade.TESTS_UID_OFFSET). Two class runs at once
# on one machine (the test suite's parallel workers) each need a base of their own.
UID_BASE = int(os.environ.get("GRAPHOPT_SANDBOX_UID_BASE", "61000"))


@dataclass
class Limits:
    """Per-sandbox resource limits."""

    memory: int = 4 << 30      # address space, bytes (torch reserves ~1.5 GiB)
    cpu: int = 600             # CPU seconds for the whole process
    nproc: int = 64            # processes and threads of the sandbox's uid
    fsize: int = 64 << 20      # largest file it may write
    tmp: int = 256 << 20       # size of its private /tmp (counts as memory)


def why_unavailable() -> str | None:
    """None when bwrap can build a jail here, else what is missing and what to do."""
    if sys.platform != "linux":
        return f"bubblewrap needs Linux namespaces (this is {sys.platform})"
    if not shutil.which("bwrap"):
        return f"bwrap is not installed: {INSTALL_HINT}"
    probe = subprocess.run(
        command(["/bin/true"], uid=UID_BASE, limits=Limits(), env={}),
        capture_output=True, text=True)
    if probe.returncode:
        return (f"bwrap cannot create a sandbox here ({probe.stderr.strip()[:200]}); "
                "run as root, or enable unprivileged user namespaces "
                "(sysctl kernel.unprivileged_userns_clone=1)")
    return None


def _ancestors(paths) -> list[str]:
    """Every parent folder of the mounts, created world-readable (bwrap's are 0700)."""
    seen = []
    for path in paths:
        for parent in reversed(Path(path).parents):
            if str(parent) != "/" and str(parent) not in seen:
                seen.append(str(parent))
    return seen


def _python_mounts() -> list[str]:
    """The interpreter, its standard library, the venv and graphopt's source."""
    mounts = {os.path.realpath(sys.base_prefix), os.path.realpath(sys.prefix),
              sys.prefix}
    try:
        import graphopt
        mounts.add(str(Path(graphopt.__file__).resolve().parents[1]))
    except ImportError:
        pass
    system = ("/usr", "/lib", "/lib64", "/bin", "/sbin", "/etc")
    return sorted(m for m in mounts if not m.startswith(system))


def command(argv: list[str], uid: int, limits: Limits, env: dict[str, str],
            binds: tuple[tuple[str, str], ...] = ()) -> list[str]:
    """The bwrap command line that runs argv jailed.

    As root, bwrap keeps no capabilities but CAP_SETUID/GID, and setpriv drops to
    `uid` before anything else runs: the process is a real unprivileged user, so
    RLIMIT_NPROC works and it cannot signal the grader. Otherwise a user namespace
    maps the caller to uid 65534.
    """
    mounts = _python_mounts()
    # The private /tmp comes first: bwrap mounts in order, and a tmpfs laid over /tmp
    # afterwards would hide a venv or checkout that lives under /tmp (CI clones there).
    cmd = ["bwrap", "--perms", "1777", "--size", str(limits.tmp), "--tmpfs", "/tmp"]
    for folder in _ancestors([*mounts, *(dst for _, dst in binds)]):
        cmd += ["--perms", "0755", "--dir", folder]
    for sysdir in ("/usr", "/lib", "/lib64", "/bin", "/sbin", "/etc"):
        cmd += ["--ro-bind-try", sysdir, sysdir]
    for path in mounts:
        cmd += ["--ro-bind", path, path]
    for src, dst in binds:
        cmd += ["--ro-bind", src, dst]
    cmd += ["--dev", "/dev", "--proc", "/proc", "--unshare-ipc", "--unshare-pid",
            "--unshare-net", "--unshare-uts",
            "--unshare-cgroup-try", "--die-with-parent", "--new-session",
            "--chdir", "/tmp", "--clearenv"]
    for key, value in env.items():
        cmd += ["--setenv", key, value]
    if os.geteuid() == 0:
        cmd += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--",
                "setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
    else:
        cmd[1:1] = ["--unshare-user", "--uid", "65534", "--gid", "65534"]
        cmd += ["--"]
    return cmd + rlimits(limits) + argv


def rlimits(limits: Limits) -> list[str]:
    return ["prlimit", f"--as={limits.memory}", f"--cpu={limits.cpu}",
            f"--nproc={limits.nproc}", f"--fsize={limits.fsize}", "--core=0", "--"]


def unsafe_command(argv: list[str], limits: Limits, uid: int) -> list[str]:
    """No jail: the same limits; as root, an unprivileged uid too (Gradescope)."""
    drop = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
            "--inh-caps=-all", "--bounding-set=-all"]
    if not _can_drop(tuple(drop + rlimits(limits)), argv[0]):
        drop = []
    return drop + (rlimits(limits) if shutil.which("prlimit") else []) + argv


@functools.lru_cache(maxsize=None)
def _can_drop(drop: tuple[str, ...], python: str) -> bool:
    """Whether an unprivileged uid can run the interpreter (not from under /root)."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        return False
    probe = subprocess.run([*drop, python, "-c", "pass"], capture_output=True)
    return probe.returncode == 0


def kill_uid(uid: int) -> None:
    """Without a PID namespace: end every process of the worker's uid (as root)."""
    if os.geteuid() == 0 and shutil.which("setpriv"):
        subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={uid}",
                        "--clear-groups", "kill", "-9", "-1"], capture_output=True)
