"""Shared helpers for the browser tests: Chromium, a local server, a watched page.

The site tests (test_site.py), the JupyterLab end-to-end test (test_jupyterlab.py) and the
pass-explorer tests all drive Debian's Chromium through Playwright. Nothing here downloads a
browser (`playwright install` is never used): the machine's Chromium is required, and its
absence is a test failure that says how to install it, never a skip.

Usage::

    from browser import chromium, serve, watch, built_site

    def test_something(chromium):            # session-scoped fixture from this module
        with serve(built_site()) as base:    # http://127.0.0.1:<port>/
            page = chromium.new_page()
            log = watch(page)
            page.goto(base + "index.html")
            log.assert_clean()
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import pytest

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
SITE = BOOK / "_build" / "html"  # en/ and zh/ (make site), and an index.html
LANGUAGES = ("en", "zh")  # the site's folders: tools/site/book_languages.py
ARTIFACTS = ROOT / "tests" / "_artifacts"
PYTHON = ROOT / ".venv" / "bin" / "python"

# Flags from TOOLCHAIN.md: headless, no sandbox (root in containers), and no background
# traffic of Chromium's own that would show up as requests leaving 127.0.0.1.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--disable-dev-shm-usage",
]
INSTALL_HINT = (
    "Chromium is needed for the browser tests but was not found at {path}. Install it with "
    "`sudo apt-get install chromium` (Debian/Ubuntu; `make setup-browser` does it when run "
    "as root) or point GRAPHOPT_CHROMIUM at a Chrome/Chromium executable."
)
LOCAL_HOSTS = ("127.0.0.1",)
# Schemes that never touch the network.
LOCAL_SCHEMES = ("data", "blob", "about", "chrome-error", "chrome")


def chromium_path() -> str:
    """The Chromium executable to drive; fails (never skips) when it is missing."""
    path = os.environ.get("GRAPHOPT_CHROMIUM") or "/usr/bin/chromium"
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        found = shutil.which(path) if os.sep not in path else None
        if not found:
            pytest.fail(INSTALL_HINT.format(path=path), pytrace=False)
        path = found
    return path


@contextlib.contextmanager
def launch(**options):
    """A headless Chromium Browser (Playwright sync API), closed on exit."""
    from playwright.sync_api import sync_playwright

    executable = chromium_path()
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=executable, headless=True, args=CHROMIUM_ARGS, **options
        )
        try:
            yield browser
        finally:
            browser.close()


_SHARED: dict = {}


@pytest.fixture(scope="session")
def chromium():
    """Session-wide headless Chromium; import this fixture into a test module to use it."""
    # Each module that imports this fixture gets its own session instance, and Playwright's
    # sync API refuses a second one while the first runs: share one browser among them.
    if "browser" in _SHARED:
        yield _SHARED["browser"]
        return
    with launch() as browser:
        _SHARED["browser"] = browser
        try:
            yield browser
        finally:
            del _SHARED["browser"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    """Static file handler that does not print a line per request."""

    extensions_map = {
        **http.server.SimpleHTTPRequestHandler.extensions_map,
        ".js": "text/javascript",
        ".mjs": "text/javascript",
        ".svg": "image/svg+xml",
        ".ipynb": "application/x-ipynb+json",
    }

    def log_message(self, format, *args):  # noqa: A002 - the base class names it so
        pass


@contextlib.contextmanager
def serve(directory: str | os.PathLike):
    """Serve `directory` on 127.0.0.1 in a thread; yields the base URL ending in '/'."""
    directory = Path(directory)
    if not directory.is_dir():
        pytest.fail(f"nothing to serve: {directory} is not a directory", pytrace=False)
    handler = functools.partial(_QuietHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def is_local(url: str) -> bool:
    """True when loading `url` stays on this machine (127.0.0.1 or a local scheme)."""
    parsed = urlparse(url)
    if parsed.scheme in LOCAL_SCHEMES:
        return True
    return parsed.hostname in LOCAL_HOSTS


@dataclass
class PageLog:
    """What went wrong while a page was open: console errors, failed and remote requests."""

    console_errors: list[str] = field(default_factory=list)
    failed_requests: list[str] = field(default_factory=list)
    external_requests: list[str] = field(default_factory=list)
    ignore_console: tuple[str, ...] = ()

    def problems(self) -> list[str]:
        """Every problem seen so far, one line each."""
        return (
            [f"console error: {m}" for m in self.console_errors]
            + [f"failed request: {r}" for r in self.failed_requests]
            + [f"request leaving 127.0.0.1: {r}" for r in self.external_requests]
        )

    def clear(self) -> None:
        """Forget what was seen (before loading the next page with the same tab)."""
        self.console_errors.clear()
        self.failed_requests.clear()
        self.external_requests.clear()

    def assert_clean(self, where: str = "") -> None:
        """Fail the test listing every problem, if there was any."""
        problems = self.problems()
        if problems:
            head = f"{where}: " if where else ""
            pytest.fail(head + f"{len(problems)} problem(s)\n  " + "\n  ".join(problems))


def watch(page, block_external: bool = True, ignore_console=()) -> PageLog:
    """Record console errors, failed requests and non-local requests of `page`.

    With `block_external` (the default) a request to any other host is recorded and then
    aborted, so a test can never depend on, or leak to, the internet. An aborted external
    request is reported once, as external, not again as failed.
    """
    log = PageLog(ignore_console=tuple(ignore_console))

    def on_console(msg):
        # A blocked remote load also logs a console error; it is reported as external.
        if "ERR_BLOCKED_BY_CLIENT" in msg.text:
            return
        if msg.type == "error" and not any(s in msg.text for s in log.ignore_console):
            where = msg.location.get("url", "") if msg.location else ""
            log.console_errors.append(f"{msg.text} ({where})" if where else msg.text)

    def on_pageerror(exc):
        log.console_errors.append(f"uncaught: {exc}")

    def on_requestfailed(request):
        # ERR_ABORTED is the browser cancelling a load it no longer wants (a link was
        # followed while the favicon loaded): not the site's fault. A file the server
        # lacks still fails, as an HTTP 404 in on_response.
        if request.failure == "net::ERR_ABORTED":
            return
        if is_local(request.url):
            log.failed_requests.append(f"{request.url} ({request.failure})")

    def on_response(response):
        if response.status >= 400 and is_local(response.url):
            log.failed_requests.append(f"{response.url} (HTTP {response.status})")

    def on_request(request):
        if not is_local(request.url):
            log.external_requests.append(request.url)

    page.on("console", on_console)
    page.on("pageerror", on_pageerror)
    page.on("requestfailed", on_requestfailed)
    page.on("response", on_response)
    page.on("request", on_request)
    if block_external:
        page.route(
            lambda url: not is_local(url), lambda route: route.abort("blockedbyclient")
        )
    return log


def screenshot_path(*parts: str) -> Path:
    """A path under tests/_artifacts/ (ignored by git), parent folders created."""
    path = ARTIFACTS.joinpath(*parts)
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


# --------------------------------------------------------------------------- the site


def _newest_source_mtime() -> float:
    """Latest modification time among the files the site is built from."""
    sources = [p for p in BOOK.glob("*") if p.suffix in (".ipynb", ".md", ".py")]
    sources += list((BOOK / "_static").glob("**/*"))
    sources += list((BOOK / "locales").glob("**/*.po"))  # the Chinese book's text
    sources += list((ROOT / "src" / "graphopt").glob("**/*.py"))
    sources += [p for p in (ROOT / "tools" / "site").glob("**/*")
                if p.is_file() and "node_modules" not in p.parts]
    return max((p.stat().st_mtime for p in sources if p.is_file()), default=0.0)


_site_lock = threading.Lock()


def built_site(force: bool = False, lang: str = "en") -> Path:
    """Build the book with `make site` when it is missing or stale; return the folder
    of one language's pages (`lang` "en" or "zh", under book/_build/html).

    The build executes every notebook (cached by jupyter-cache), so a warm rebuild is
    quick. GRAPHOPT_SITE=<folder> tests a site built elsewhere instead (a folder that
    holds en/ and zh/, as `make site` writes), e.g. a quick build without execution
    while working on the layout: `make site SITE_OPTS="-D nb_execution_mode=off"`.
    """
    import fcntl

    if lang not in LANGUAGES:
        raise ValueError(f"lang must be one of {LANGUAGES}, not {lang!r}")
    prebuilt = os.environ.get("GRAPHOPT_SITE")
    if prebuilt:  # a site built elsewhere, tested as it is (no build, no staleness)
        path = Path(prebuilt) / lang
        if not (path / "index.html").is_file():
            pytest.fail(f"GRAPHOPT_SITE={prebuilt} holds no {lang}/index.html (it "
                        "must be the folder with en/ and zh/)", pytrace=False)
        return path
    lock_path = BOOK / "_build" / ".site.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    # One build at a time, also across processes (several test runs may want the site).
    with _site_lock, open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        indexes = [SITE / code / "index.html" for code in LANGUAGES]
        newest = _newest_source_mtime()
        stale = any(not i.exists() or i.stat().st_mtime < newest for i in indexes)
        if force or stale:
            proc = subprocess.run(
                ["make", "site"], cwd=ROOT, capture_output=True, text=True
            )
            if proc.returncode != 0:
                tail = (proc.stdout + proc.stderr)[-6000:]
                pytest.fail(f"`make site` failed (exit {proc.returncode}):\n{tail}")
            for index in indexes:
                index.touch()  # a no-op rebuild must still count as fresh
        return SITE / lang


# --------------------------------------------------------------------------- JupyterLab


@dataclass
class Lab:
    """A running JupyterLab server: its base URL, token, root folder and process."""

    url: str
    token: str
    root: Path
    process: subprocess.Popen
    log_path: Path

    def open_url(self, path: str = "") -> str:
        """URL that opens `path` (relative to root) in the Lab UI, logged in by token."""
        return f"{self.url}lab/tree/{path}?token={self.token}"

    def log_tail(self, n: int = 4000) -> str:
        """The last characters the server wrote (for failure messages)."""
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""


# Lab settings for tests: every cell in the DOM (no windowing, so a test sees them all),
# no news or update checks (they would call the internet).
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "checkForUpdates": False,
        "fetchNews": "false",
    },
}


@contextlib.contextmanager
def jupyterlab(root_dir: str | os.PathLike, timeout: float = 90.0):
    """Start JupyterLab on 127.0.0.1 serving `root_dir`; stop it by its PID on exit.

    Uses the project's venv Python directly, with its own settings and workspace folders
    (LAB_SETTINGS) and the app exposed as `window.jupyterapp` so tests can read the
    notebook model. The server runs in its own session so that stopping it also stops
    the kernels it started, and nothing else.
    """
    import json
    import tempfile

    root = Path(root_dir)
    port = free_port()
    token = f"graphopt-test-{os.getpid()}-{port}"
    log_path = screenshot_path("jupyterlab", f"server-{port}.log")
    python = str(PYTHON if PYTHON.exists() else sys.executable)
    state = Path(tempfile.mkdtemp(prefix="graphopt-lab-"))
    for rel, values in LAB_SETTINGS.items():
        path = state / "settings" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    cmd = [
        python, "-m", "jupyter", "lab", "--no-browser",
        f"--port={port}", "--ServerApp.ip=127.0.0.1", "--ServerApp.port_retries=0",
        f"--ServerApp.token={token}", f"--ServerApp.root_dir={root}",
        "--LabApp.news_url=", "--LabApp.expose_app_in_browser=True",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
    ]
    if os.geteuid() == 0:
        cmd.append("--allow-root")
    env = {
        **os.environ,
        "JUPYTER_PLATFORM_DIRS": "1",
        "PYTHONHASHSEED": "0",
        "JUPYTERLAB_SETTINGS_DIR": str(state / "settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(state / "workspaces"),
    }
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(
            cmd, cwd=root, stdout=log_file, stderr=subprocess.STDOUT,
            env=env, start_new_session=True,
        )
    lab = Lab(f"http://127.0.0.1:{port}/", token, root, proc, log_path)
    try:
        _wait_for_server(lab, timeout)
        yield lab
    finally:
        _stop(proc)
        shutil.rmtree(state, ignore_errors=True)


def _wait_for_server(lab: Lab, timeout: float) -> None:
    """Poll the server's status API until it answers, or fail with its log."""
    deadline = time.monotonic() + timeout
    status = f"{lab.url}api/status?token={lab.token}"
    while time.monotonic() < deadline:
        if lab.process.poll() is not None:
            pytest.fail(f"JupyterLab exited with {lab.process.returncode}:\n{lab.log_tail()}")
        try:
            with urllib.request.urlopen(status, timeout=2) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            pass
        time.sleep(0.3)
    pytest.fail(f"JupyterLab did not answer within {timeout:.0f} s:\n{lab.log_tail()}")


def _stop(proc: subprocess.Popen) -> None:
    """Stop the server we started (its process group: the server and its kernels)."""
    if proc.poll() is not None:
        return
    pgid = os.getpgid(proc.pid)
    try:
        os.killpg(pgid, 15)
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(pgid, 9)
        proc.wait(timeout=5)
    except ProcessLookupError:
        pass
