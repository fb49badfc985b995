"""A dashboard that is safe to leave running: it listens on loopback unless told otherwise, requires sign-in where
the deployment configures it (and shows nothing of its runs before), records who started each run, and bounds the
analyses per server (in order, with the queue position shown) and per browser session.

The sign-in itself, through a real OpenID Connect provider in a real browser, is test_browser_sign_in.py."""
import os
import re
import shlex
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.request

import pytest
from streamlit.testing.v1 import AppTest

from browser import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# An [auth] section as a deployment writes it; nothing here is contacted (the tests below never press "Sign in").
AUTH = {"redirect_uri": "http://localhost:8501/oauth2callback", "cookie_secret": "not-a-secret-" * 3,
        "client_id": "xc-dashboard", "client_secret": "not-a-secret",
        "server_metadata_url": "http://127.0.0.1:9/.well-known/openid-configuration"}
ADA = {"is_logged_in": True, "sub": "u-4711", "email": "ada@example.test", "name": "Ada Lovelace"}


def _report(name: str) -> dict:
    return {"source": {"name": name, "sha256": "0" * 64}, "targets": {"ort-cpu": {"status": "ok"}}}


# ------------------------------------------------------------------------------------------ loopback by default
def _readme_command() -> list[str]:
    """The command README's first code block ends with: the one that starts the dashboard."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        block = re.search(r"```bash\n(.*?)```", f.read(), re.S).group(1)
    return shlex.split(block.strip().split(" && ")[-1])


def _other_addresses() -> list[str]:
    """This machine's IPv4 addresses that are not loopback (none in a bare container)."""
    import psutil
    return [a.address for addrs in psutil.net_if_addrs().values() for a in addrs
            if a.family == socket.AF_INET and not a.address.startswith("127.")]


@pytest.mark.slow
def test_the_readme_command_listens_on_loopback_only(tmp_path):
    import psutil
    command = _readme_command()
    assert command == [".venv/bin/python", "-m", "streamlit", "run", "app.py"]
    port = free_port()
    # The README's command as it is, from the checkout; only the port (a free one: tests run side by side) and the
    # warm-up (nothing to analyse here) come from the environment, and no STREAMLIT_* setting of the caller's.
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMLIT_")}
    env.update(STREAMLIT_SERVER_PORT=str(port), XC_WARM_START="0", XC_HOME=str(tmp_path / "home"))
    proc = subprocess.Popen([sys.executable if command[0] == ".venv/bin/python" else command[0], *command[1:]],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        while True:
            try:
                assert urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=5).status == 200
                break
            except OSError:
                assert proc.poll() is None and time.time() < deadline, "the dashboard did not start"
                time.sleep(0.5)
        listening = {(c.laddr.ip, c.laddr.port) for c in psutil.Process(proc.pid).net_connections(kind="inet")
                     if c.status == psutil.CONN_LISTEN}
        assert listening == {("127.0.0.1", port)}
        for address in _other_addresses():      # from outside: another interface of this machine is refused
            with pytest.raises(OSError):
                socket.create_connection((address, port), timeout=5).close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_the_docker_image_publishes_on_purpose_and_leaves_secrets_out():
    with open(os.path.join(ROOT, "Dockerfile"), encoding="utf-8") as f:
        docker = f.read()
    head, cmd = docker.split("\nCMD ")
    assert "--server.address=0.0.0.0" in cmd
    comment = []                        # the comment right above CMD says why, and what a team adds
    for line in reversed(head.splitlines()):
        if not line.startswith("#"):
            break
        comment.insert(0, line)
    assert "on purpose" in " ".join(comment) and "sign-in" in " ".join(comment)
    assert "COPY .streamlit ./" not in docker and "COPY .streamlit/config.toml" in docker


# --------------------------------------------------------------------------------------------- sign-in screen
def _app(auth: dict | None, user: dict | None = None, **state) -> AppTest:
    at = AppTest.from_file(os.path.join(ROOT, "app.py"), default_timeout=300)
    if auth is not None:
        at.secrets["auth"] = auth
    if user is not None:
        at.user = user
    for k, v in state.items():
        at.session_state[k] = v
    return at


def test_with_auth_configured_a_visitor_sees_the_sign_in_screen_and_nothing_else():
    from xc_core.store import RunStore
    store, key = RunStore(), "5ec2e7" * 5 + "aa"
    store.put(key, _report("private-model"), None, origin="cli")
    try:
        at = _app(AUTH, {"is_logged_in": False})
        at.query_params["run"] = key[:12]        # a link to a stored run opens nothing before sign-in
        at.run()
    finally:
        store.delete(key)
    assert not at.exception
    assert [t.value for t in at.title] == ["Sign in"]
    assert [b.label for b in at.button] == ["Sign in"]
    assert len(at.sidebar) == 0                       # no source, no upload, no saved runs
    assert not at.get("file_uploader") and not at.selectbox and not at.dataframe
    shown = [e.value for kind in (at.markdown, at.caption, at.info, at.error) for e in kind]
    assert not any("private-model" in text or "5ec2e7" in text for text in shown)
    assert not any(k in at.session_state for k in ("report", "pending", "source_mode", "saved_run"))


@pytest.mark.parametrize("page", ["history", "fleet", "downloads"])
def test_a_page_run_on_its_own_shows_nothing_before_sign_in(page):
    """Pages run only behind app.py's gate; one run alone (as in Streamlit's legacy pages mode) stops at once."""
    at = AppTest.from_file(os.path.join(ROOT, "pages", f"{page}.py"), default_timeout=300)
    at.secrets["auth"] = AUTH
    at.user = {"is_logged_in": False}
    at.session_state["_xc_routed"] = True
    at.run()
    assert not at.exception and not at.title and not at.dataframe and not at.button


def test_signed_in_the_sidebar_says_who_with_a_sign_out_button():
    at = _app(AUTH, ADA, targets=[]).run()        # no targets: nothing analysed
    assert not at.exception
    assert any("Signed in as **Ada Lovelace" in c.value for c in at.sidebar.caption)
    assert at.button(key="sign_out").label == "Sign out"
    assert "Pick at least one target" in at.info[0].value


def test_without_auth_the_dashboard_is_open_as_before():
    at = _app(None, targets=[]).run()
    assert not at.exception
    assert "Pick at least one target" in at.info[0].value
    assert not any("Signed in" in c.value for c in at.sidebar.caption)
    assert "sign_out" not in [b.key for b in at.button]


def test_an_auth_section_without_a_provider_is_said_in_one_line_and_stays_closed():
    at = _app({"redirect_uri": AUTH["redirect_uri"], "cookie_secret": AUTH["cookie_secret"]},
              {"is_logged_in": False}).run()
    assert not at.exception and not at.button
    assert len(at.error) == 1 and "names no provider" in at.error[0].value


def test_a_secrets_file_that_cannot_be_read_keeps_the_dashboard_closed(tmp_path):
    from streamlit import config
    from pages import _auth
    broken = tmp_path / "secrets.toml"
    broken.write_text("[auth\nredirect_uri = ")
    before = config.get_option("secrets.files")
    config.set_option("secrets.files", [str(broken)])
    try:
        assert _auth.required()
        config.set_option("secrets.files", [str(tmp_path / "none.toml")])
        assert not _auth.required()     # no secrets file at all: local use, open
    finally:
        config.set_option("secrets.files", before)


# ------------------------------------------------------------------------------------------- who ran what
def test_the_store_records_who_started_a_run_and_migrates_an_older_index(tmp_path):
    from xc_core.store import INDEX_FILE, RunStore
    root = str(tmp_path / "home")
    RunStore(root).put("k-old", _report("older"), None, origin="dashboard")
    # An index written before users were recorded: the same table without the column.
    db = sqlite3.connect(os.path.join(root, INDEX_FILE))
    db.executescript("""
        CREATE TABLE runs_old (key TEXT PRIMARY KEY, created REAL NOT NULL, last_used REAL NOT NULL,
            bytes INTEGER NOT NULL, source_name TEXT, source_sha256 TEXT, targets TEXT, status TEXT,
            manifest TEXT NOT NULL, summary TEXT);
        INSERT INTO runs_old SELECT key, created, last_used, bytes, source_name, source_sha256, targets, status,
            manifest, summary FROM runs;
        DROP TABLE runs;
        ALTER TABLE runs_old RENAME TO runs;""")
    db.close()
    store = RunStore(root)
    assert store.problem is None
    assert [(r["key"], r["user"]) for r in store.runs()] == [("k-old", None)]
    time.sleep(0.01)
    store.put("k-new", _report("newer"), None, origin="dashboard", user="ada@example.test")
    assert [(r["key"], r["user"]) for r in store.runs()] == [("k-new", "ada@example.test"), ("k-old", None)]
    os.remove(os.path.join(root, INDEX_FILE))           # rebuilt from the run records: who is kept
    assert {r["key"]: r["user"] for r in RunStore(root).runs()} == {"k-new": "ada@example.test", "k-old": None}


# ------------------------------------------------------------------------------------ bounds on the analyses
@pytest.fixture
def blocked_service(tmp_path, monkeypatch):
    """A service whose analyses wait for `release` (one slot, two per session); each ends refused, so nothing is
    stored. Yields (service, release)."""
    import xc_core.api
    from xc_core.errors import XcInputError
    from xc_core.service import AnalysisService
    from xc_core.store import RunStore
    release = threading.Event()

    def fake_analyze(spec, out_dir=None, progress=None, **kwargs):
        release.wait(60)
        raise XcInputError(f"{spec}: done waiting")
    monkeypatch.setattr(xc_core.api, "analyze", fake_analyze)
    svc = AnalysisService(RunStore(str(tmp_path / "home")), max_concurrent=1, per_session=2)
    yield svc, release
    release.set()
    assert svc.wait_idle(60)


def _until(condition, timeout_s=30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.02)


def test_analyses_wait_their_turn_in_order_and_a_session_has_at_most_its_bound(blocked_service):
    from xc_core.service import QUEUED, RUNNING, SessionBusy
    svc, release = blocked_service
    first = svc.submit("k1", "sample:a", session="s1")
    _until(lambda: first.state == RUNNING)
    second = svc.submit("k2", "sample:b", session="s1")
    third = svc.submit("k3", "sample:c", session="s2")
    assert (second.state, third.state) == (QUEUED, QUEUED)
    assert [svc.queue_position(a) for a in (first, second, third)] == [0, 0, 1]
    with pytest.raises(SessionBusy) as refused:
        svc.submit("k4", "sample:d", session="s1")
    line = refused.value.for_dashboard()
    assert "\n" not in line and "already has 2 analyses queued or running" in line and "XC_SESSION_ANALYSES" in line
    assert svc.submit("k3", "sample:c", session="s1") is third      # joining another's analysis is never refused
    assert svc.submit("k5", "sample:e") is not None                  # the server itself is not a session
    release.set()
    for a in (first, second, third):
        assert a.finished.wait(30)
    assert second.state == third.state == "refused"
    svc.submit("k4", "sample:d", session="s1")                       # its own have finished: s1 may again


def test_the_server_bound_is_the_cores_unless_the_environment_says(monkeypatch, capfd):
    from xc_core.service import concurrent_analyses, session_analyses
    monkeypatch.delenv("XC_CONCURRENT_ANALYSES", raising=False)
    monkeypatch.delenv("XC_SESSION_ANALYSES", raising=False)
    assert concurrent_analyses() == len(os.sched_getaffinity(0)) and session_analyses() == 2
    monkeypatch.setenv("XC_CONCURRENT_ANALYSES", "3")
    assert concurrent_analyses() == 3
    monkeypatch.setenv("XC_CONCURRENT_ANALYSES", "lots")
    capfd.readouterr()
    assert concurrent_analyses() == len(os.sched_getaffinity(0))
    assert capfd.readouterr().err.strip() == (f"xc: XC_CONCURRENT_ANALYSES='lots' is not a whole number of at least "
                                              f"1; using {len(os.sched_getaffinity(0))}")


def test_a_queued_analysis_shows_how_many_are_ahead(blocked_service, monkeypatch):
    import xc_core.service
    from xc_core.service import RUNNING
    svc, release = blocked_service
    monkeypatch.setattr(xc_core.service, "_SHARED", svc)           # the dashboard's service: this one
    running = svc.submit("k1", "sample:a", session="other")
    _until(lambda: running.state == RUNNING)
    svc.submit("k2", "sample:b", session="other")
    at = _app(None, sample="vision-mini", targets=["ort-cpu"]).run()
    assert not at.exception
    labels = [s.label for s in at.status]      # the progress panel's heading
    assert "Waiting for a free analysis slot — queued: 1 analysis ahead (this server runs 1 at once)…" in labels


def test_a_session_over_its_bound_is_told_in_one_line(blocked_service, monkeypatch):
    import xc_core.service
    svc, release = blocked_service
    monkeypatch.setattr(xc_core.service, "_SHARED", svc)
    at = _app(None, sample="vision-mini", targets=["ort-cpu"], _xc_session="mine")
    svc.submit("k1", "sample:a", session="mine")
    svc.submit("k2", "sample:b", session="mine")
    at.run()
    assert not at.exception
    assert len(at.error) == 1 and "this browser session already has 2 analyses" in at.error[0].value
    assert at.button(key="retry_busy").label == "Try again"
