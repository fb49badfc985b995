"""AppTest and the dashboard's background analyses: the first run starts the analysis and shows its progress;
wait for the analysis, then run a fresh AppTest with the same preset state, which opens on the finished report
(a rerun of the same AppTest would drop the sidebar tree: a harness quirk with the app's pages/ folder)."""


def until_report(make, timeout_s: float = 900):
    """`make()` returns a fresh AppTest with its session state preset."""
    at = make().run()
    pending = at.session_state["pending"] if "pending" in at.session_state else None
    if not pending:
        return at
    from pages._ui import _service
    a = _service().get(pending)
    if a is not None and not a.finished.wait(timeout_s):
        raise TimeoutError("the dashboard's analysis did not finish")
    return make().run()
