#!/usr/bin/env bash
# One idempotent set-up for every make target: .venv, torch, the package, dot.
# Usage: tools/setup.sh [--browser] [--site]
#   --browser also makes sure Chromium is there; --site, that node and npm are (make site).
#   GRAPHOPT_VENV=<dir> sets up another venv; TORCH_VERSION=<x.y.z> pins another torch,
#   TORCH_VERSION=newest upgrades to the newest pip serves (make test-newest-torch).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${GRAPHOPT_VENV:-.venv}
PY=$VENV/bin/python
TORCH_VERSION=${TORCH_VERSION:-2.13.0}

if [ ! -x "$PY" ]; then
    echo "setup: creating $VENV"
    python3 -m venv "$VENV" || {
        rm -rf "$VENV"
        echo "setup: 'python3 -m venv' failed; on Debian/Ubuntu install python3-venv" >&2
        echo "  (sudo apt-get install python3-venv) and run this again" >&2
        exit 1
    }
fi

pip_quiet() {  # pip, minus the warnings about index folders this machine lacks
    "$PY" -m pip -q "$@" 2> >(grep -v "is ignored: it is neither" >&2)
}

# Install torch before the package: an unpinned torch requirement would make pip
# download a CUDA build of several GB.
if [ "$TORCH_VERSION" = newest ]; then  # on every run: the newest may have moved
    echo "setup: upgrading $VENV to the newest torch pip serves (on Linux a CUDA build)"
    pip_quiet install --upgrade torch
elif ! "$PY" -c "import torch" 2>/dev/null; then
    echo "setup: installing torch==$TORCH_VERSION"
    pip_quiet install "torch==$TORCH_VERSION"
fi

stamp=$VENV/.graphopt-installed
want=$(cat pyproject.toml | sha1sum | cut -c1-16)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "setup: installing graphopt with its dev tools (one minute or two)"
    pip_quiet install -e ".[dev]"
    echo "$want" > "$stamp"
fi

apt_install() {  # apt_install <what it is for> <packages...>
    local why=$1; shift
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "setup: apt-get install $* ($why)"
        apt-get update -qq >/dev/null 2>&1 || true
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
    else
        return 1
    fi
}

if ! command -v dot >/dev/null; then
    apt_install "Graphviz's dot draws the graphs" graphviz || {
        echo "setup: Graphviz's 'dot' program is missing. Install it with one of:" >&2
        echo "  conda install -c conda-forge graphviz   |  brew install graphviz" >&2
        echo "  sudo apt-get install graphviz" >&2
        exit 1
    }
fi

# torch.compile (inductor) compiles the C++ kernels the book shows and times.
if ! command -v g++ >/dev/null && ! command -v clang++ >/dev/null; then
    apt_install "torch.compile builds C++ kernels" g++ || {
        echo "setup: a C++ compiler is missing (torch.compile needs one):" >&2
        echo "  sudo apt-get install g++   |  xcode-select --install" >&2
        exit 1
    }
fi

# make grade runs every student's code in a bubblewrap sandbox (tools/grading/sandbox.py).
if ! command -v bwrap >/dev/null; then
    apt_install "make grade jails each hand-in with bubblewrap" bubblewrap || {
        echo "setup: bubblewrap (bwrap) is missing; make grade needs it to sandbox" >&2
        echo "  students' code (make test's grading tests are skipped without it):" >&2
        echo "  sudo apt-get install bubblewrap   |  sudo dnf install bubblewrap" >&2
    }
fi

if [[ " $* " == *" --site "* ]] && ! { command -v node && command -v npm; } >/dev/null; then
    apt_install "make site bundles the widget JavaScript and MathJax with npm" nodejs npm || {
        echo "setup: node and npm are missing; make site needs them. Install them with" >&2
        echo "  sudo apt-get install nodejs npm   |  conda install nodejs  |  brew install node" >&2
        exit 1
    }
fi

if [[ " $* " == *" --browser "* ]] && [ ! -x /usr/bin/chromium ] && [ -z "${GRAPHOPT_CHROMIUM:-}" ]; then
    apt_install "the browser tests drive Chromium" chromium chromium-driver fonts-noto-cjk || {
        echo "setup: Chromium is missing; the browser tests need it. Install it with" >&2
        echo "  sudo apt-get install chromium   (or set GRAPHOPT_CHROMIUM=/path/to/chrome)" >&2
        exit 1
    }
fi

# The Chinese pages (book/_build/html/zh) need a CJK font: the site loads no web fonts,
# and without one Chromium draws every Chinese character as an empty box.
if [[ " $* " == *" --browser "* ]] && command -v fc-list >/dev/null \
        && [ -z "$(fc-list :lang=zh family)" ]; then
    apt_install "the Chinese pages need a CJK font" fonts-noto-cjk || {
        echo "setup: no Chinese font found (fc-list :lang=zh is empty); the Chinese" >&2
        echo "  site shows boxes. Install one: sudo apt-get install fonts-noto-cjk" >&2
        echo "  (macOS and Windows ship one)" >&2
    }
fi
