"""Helpers to drive the real dashboard in Debian's headless Chromium (playwright's own browsers do not install
here)."""
import contextlib
import os
import socket
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def dashboard():
    port = free_port()
    log = open(os.path.join(os.environ.get("TMPDIR", "/tmp"), f"xc-streamlit-{port}.log"), "w")
    proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
                             "--server.port", str(port), "--browser.gatherUsageStats", "false"],
                            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            time.sleep(0.5)
        yield f"http://127.0.0.1:{port}/"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def settle(page, timeout_ms=600_000):
    """Wait until Streamlit has finished running the script: no running-status widget on several polls in a row
    (a slow, shared machine can take a while to even start the run)."""
    page.wait_for_timeout(1000)
    page.wait_for_function(
        """() => {
            const busy = !!document.querySelector('[data-testid="stStatusWidget"]');
            window.__xcIdle = busy ? 0 : (window.__xcIdle || 0) + 1;
            return window.__xcIdle >= 4;
        }""", timeout=timeout_ms, polling=500)
