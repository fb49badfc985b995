"""xc dashboard — router only: page config, the sidebar (source and targets), navigation.

The sidebar produces one Report (cached by content hash) and puts it in session state; every page only renders it.

This file is also the server's start-up hook: `streamlit run app.py` finds the `app = st.App(...)` below, imports
this file once as a module to serve it, and runs `_server_start` before the first session. The hook sweeps the
scratch folders a crashed or killed server left and opens the run store (a damaged index is repaired in the server's
log, not in a visitor's page) — milliseconds —, then starts a warm-up thread and returns, so the server answers its
first visitor at once (it holds every request until the hook returns). The warm-up imports the modules a session
needs and starts the default sample's analysis; a visitor who comes first starts that same analysis under the same key, and the warm-up
then joins it (one analysis per key, xc_core/service.py). Every session runs this same file as `__main__`: the page
script.
"""
import os

import streamlit as st

HERE = os.path.dirname(os.path.abspath(__file__))

if __name__ != "__main__":      # imported by `streamlit run` to serve the app: once per server process
    import contextlib

    def _warm_up() -> None:
        """The server's slow start-up work (workers, the default sample's analysis), on a thread of its own while
        the server already answers."""
        from xc_core.service import start_workers, warm_start_enabled
        from xc_core.store import say_once
        try:
            if warm_start_enabled():    # first: the workers' imports run on another core while this process imports
                start_workers()
            from pages import _ui
            _ui.warm_start()
        except Exception as e:  # noqa: BLE001 — a server that cannot warm up still serves: one line in its log
            say_once(f"the start-up warm-up failed ({type(e).__name__}: {e}); the server carries on")

    @contextlib.asynccontextmanager
    async def _server_start(_app):
        # Streamlit runs a process's first session in its legacy pages/ mode (a page list of every file in pages/,
        # private helpers included) until st.navigation has run once. This app always navigates itself: say so
        # before any session exists, so not even the first one shows that list.
        from streamlit.runtime.pages_manager import PagesManager
        PagesManager.uses_pages_directory = False
        # The sweep and the store's check take milliseconds and must precede any session (a visitor never meets a
        # crashed run's scratch or a damaged index): done here, before the server answers.
        from xc_core.service import on_server_start
        on_server_start()
        import threading
        # Not awaited: the server serves no request until this hook yields, and the warm-up takes tens of seconds.
        threading.Thread(target=_warm_up, name="xc-warm-up", daemon=True).start()
        yield

    app = st.App(os.path.join(HERE, "app.py"), lifespan=_server_start)
else:
    from pages import _auth, _ui

    # The favicon first, from a local file: a Material icon as favicon (this page's or a navigation entry's) is
    # fetched from Google's font CDN, and the dashboard makes no request to outside hosts.
    st.set_page_config(page_title="xc — what each compiler did", layout="wide",
                       page_icon=os.path.join(HERE, "assets", "favicon.svg"))
    _ui.leave_legacy_pages_mode()  # before any widget: the first run of a fresh server must not build the sidebar
    st.logo(os.path.join(HERE, "assets", "logo.svg"), size="large")  # the app's name above the pages

    # The page list first: it is in the first paint, above the sidebar's widgets. Where the deployment requires
    # sign-in (an [auth] section in its secrets.toml), a visitor who has not signed in gets the sign-in screen as
    # the only page, and no sidebar: nothing of the runs, no upload.
    page = _ui.navigation()
    if not _auth.must_sign_in():
        _auth.account_panel(st.sidebar)
        _ui.sidebar_and_analyze()
    page.run()
