#!/usr/bin/env bash
# One idempotent set-up for every make target: .venv, torch, the package, dot.
# Usage: tools/setup.sh [--browser]   (--browser also makes sure Chromium is there)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv
PY=$VENV/bin/python
TORCH_VERSION=${TORCH_VERSION:-2.13.0}

if [ ! -x "$PY" ]; then
    echo "setup: creating $VENV"
    python3 -m venv "$VENV"
fi

pip_quiet() {  # pip, minus the warnings about index folders this machine lacks
    "$PY" -m pip -q "$@" 2> >(grep -v "is ignored: it is neither" >&2)
}

# Install torch before the package: an unpinned torch requirement would make pip
# download a CUDA build of several GB.
if ! "$PY" -c "import torch" 2>/dev/null; then
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

if [ "${1:-}" = "--browser" ] && [ ! -x /usr/bin/chromium ] && [ -z "${GRAPHOPT_CHROMIUM:-}" ]; then
    apt_install "the browser tests drive Chromium" chromium chromium-driver fonts-noto-cjk || {
        echo "setup: Chromium is missing; the browser tests need it. Install it with" >&2
        echo "  sudo apt-get install chromium   (or set GRAPHOPT_CHROMIUM=/path/to/chrome)" >&2
        exit 1
    }
fi
