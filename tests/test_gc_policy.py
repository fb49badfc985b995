"""The collector's thresholds while xc works on a graph in this process, and the caller's own afterwards."""
import gc
import threading

from xc_core import gc_policy


def test_thresholds_hold_inside_and_are_restored_after_nested_and_concurrent_blocks():
    before = gc.get_threshold()
    gc.set_threshold(1234, 5, 6)
    try:
        inside = threading.Event()
        release = threading.Event()

        def other():
            with gc_policy.fewer_collections():
                inside.set()
                release.wait(30)
        t = threading.Thread(target=other)
        with gc_policy.fewer_collections():
            assert gc.get_threshold() == gc_policy.THRESHOLDS
            t.start()
            assert inside.wait(30)
            with gc_policy.fewer_collections():
                assert gc.get_threshold() == gc_policy.THRESHOLDS
        assert gc.get_threshold() == gc_policy.THRESHOLDS    # the other block still runs
        release.set()
        t.join(30)
        assert gc.get_threshold() == (1234, 5, 6)
    finally:
        gc.set_threshold(*before)


def test_an_analysis_in_this_process_uses_them_and_gives_the_callers_back():
    from xc_core.api import analyze
    before = gc.get_threshold()
    seen = []
    analyze("sample:vision-mini", ["ort-cpu"], isolate=False,
            progress=lambda ev: seen.append(gc.get_threshold()) if ev.step == "target" else None)
    assert seen and all(s == gc_policy.THRESHOLDS for s in seen)
    assert gc.get_threshold() == before
