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


CLASSIC_TARGETS = "ort-cpu,ort-nnapi,ort-coreml,ort-cpu-int8,coreml-ane,coreml-cpu,openvino-cpu,inductor-cpu"


@contextlib.contextmanager
def dashboard(env: dict | None = None, port: int | None = None):
    """A Streamlit server on a free port; its log is kept (and its path printed) only if the body failed.

    The server does not start the default sample's analysis when it starts (XC_WARM_START=0) unless `env` says
    so: most tests open other models, and on a small shared machine that analysis would only compete with theirs.
    Sessions start with the eight ONNX Runtime, Core ML, OpenVINO and Inductor targets (XC_DEFAULT_TARGETS) unless
    `env` says otherwise: these tests are about the browser; the ExecuTorch columns on every page are
    test_pages.py's (AppTest), and each of them would add a few CPU-seconds to every analysis here."""
    import tempfile
    port = port or free_port()
    fd, log_path = tempfile.mkstemp(prefix=f"streamlit-{port}-", suffix=".log")
    log = os.fdopen(fd, "w")
    proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
                             "--server.port", str(port), "--browser.gatherUsageStats", "false"],
                            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                            env={**os.environ, "XC_WARM_START": "0", "XC_DEFAULT_TARGETS": CLASSIC_TARGETS,
                                 **(env or {})})
    failed = True
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            time.sleep(0.5)
        yield f"http://127.0.0.1:{port}/"
        failed = False
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()
        if failed:
            print(f"streamlit log: {log_path}")
        else:
            os.remove(log_path)


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


def health_latencies(url: str, stop, out: list) -> None:
    """Poll Streamlit's health endpoint until `stop` is set; append each answer's latency in seconds (a
    timeout counts as 5 s)."""
    import urllib.request
    while not stop.is_set():
        t0 = time.monotonic()
        try:
            urllib.request.urlopen(url + "_stcore/health", timeout=5).read()
            out.append(time.monotonic() - t0)
        except OSError:
            out.append(5.0)
        stop.wait(0.2)
