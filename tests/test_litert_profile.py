"""`litert-xnnpack` times no node (see the comment in xc_core/targets/litert/xnnpack.py): the Python interpreter
of ai-edge-litert has no way to install TFLite's profiler. If a release adds one, this fails, so the target gets
its `_profile`."""
import pytest

pytest.importorskip("ai_edge_litert")

from xc_core.targets.litert.xnnpack import LiteRTXnnpack  # noqa: E402


@pytest.mark.slow
def test_the_interpreter_wrapper_offers_no_profiler_so_litert_times_no_node():
    from ai_edge_litert import interpreter as litert_interpreter
    from ai_edge_litert import _pywrap_litert_compiled_model_wrapper as compiled_model_wrapper
    methods = [m for cls in (litert_interpreter._interpreter_wrapper.InterpreterWrapper,
                             compiled_model_wrapper.CompiledModelWrapper) for m in dir(cls)]
    assert not [m for m in methods if "profil" in m.lower()], "LiteRT's Python API now has a profiler: use it"
    assert "Invoke" in methods                  # the wrapper read is the one xc runs
    assert LiteRTXnnpack.profile_method is None
