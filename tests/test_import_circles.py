"""No import circle among the modules of xc_core and pages/, inside a package included. The layer contract
(.importlinter, tests/test_layers.py) orders whole layers, so two modules of one package importing each other — the
way targets/base.py and targets/routed.py, fleet/batch.py and fleet/ray_backend.py, pages/_ui.py and its panels
once did — pass it unseen. This test builds the import graph with grimp (what import-linter builds; imports inside
functions count like the others) and looks for circles in it.

Run as a script (`python tests/test_import_circles.py`, with the checkout on PYTHONPATH), it prints the circles of
that checkout as JSON: the tests run it in a fresh interpreter so it can read a planted copy of the code too."""
import json
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("xc_core", "pages")

# Circles tolerated, named one by one (none today: issue 52 opened the last three — onnx_route's helpers and
# route.py, review's diff and gate, run_keys and store). A new circle fails at once; one listed here must still
# exist, so whoever opens it deletes it from the list.
KNOWN_CIRCLES: list[list[str]] = []


def circles_in(imports: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of a graph (module → the modules it imports): each the set of modules that all reach
    one another, sorted. A module is in a circle when it reaches itself."""
    reach = {m: _reachable(m, imports) for m in imports}
    found = {frozenset({m} | {n for n in reach[m] if m in reach[n]}) for m in imports if m in reach[m]}
    return sorted(sorted(c) for c in found)


def _reachable(start: str, imports: dict[str, set[str]]) -> set[str]:
    seen, todo = set(), list(imports.get(start, ()))
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo.extend(imports.get(m, ()))
    return seen


def _circles_of_checkout() -> list[dict]:
    """This interpreter's xc_core and pages: each circle with one loop through it, as chains of imports."""
    import grimp
    graph = grimp.build_graph(*PACKAGES, include_external_packages=False, cache_dir=None)
    imports = {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    out = []
    for circle in circles_in(imports):
        first = circle[0]
        step = sorted(imports[first] & set(circle))[0]
        out.append({"modules": circle, "loop": [first, *graph.find_shortest_chain(importer=step, imported=first)]})
    return out


def _circles(root: str) -> list[dict]:
    run = subprocess.run([sys.executable, os.path.abspath(__file__)], cwd=root, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": root}, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout)


def _said(found: list[dict]) -> str:
    return "\n".join(" → ".join(c["loop"]) for c in found)


def test_no_import_circle_but_the_known_ones():
    found = _circles(ROOT)
    new = [c for c in found if c["modules"] not in KNOWN_CIRCLES]
    assert not new, "import circles (open each: move what both sides need into a module of its own):\n" + _said(new)
    gone = [c for c in KNOWN_CIRCLES if c not in [f["modules"] for f in found]]
    assert not gone, f"no longer circles: delete them from KNOWN_CIRCLES: {gone}"


def _copy(tmp_path) -> str:
    copy = tmp_path / "repo"
    for package in PACKAGES:
        shutil.copytree(os.path.join(ROOT, package), copy / package, ignore=shutil.ignore_patterns("__pycache__"))
    return str(copy)


def test_a_planted_circle_inside_a_package_is_found(tmp_path):
    """The circle this test was written for: routed.py reaching back, from inside a function, into the module that
    decides the route (targets/execute.py imports routed.py). The layer contract has nothing to say about it."""
    copy = _copy(tmp_path)
    with open(os.path.join(copy, "xc_core", "targets", "routed.py"), "a") as f:
        f.write("\n\ndef _planted():\n    from .execute import execute_target\n    return execute_target\n")
    new = [c for c in _circles(copy) if c["modules"] not in KNOWN_CIRCLES]
    assert [c["modules"] for c in new] == [["xc_core.targets.execute", "xc_core.targets.routed"]], _said(new)
    assert new[0]["loop"] in (["xc_core.targets.execute", "xc_core.targets.routed", "xc_core.targets.execute"],
                              ["xc_core.targets.routed", "xc_core.targets.execute", "xc_core.targets.routed"])


def test_a_planted_circle_among_the_pages_is_found(tmp_path):
    """_markup.py reaching back into _ui.py: the sidebar's panels, which _ui imports and which import _markup, are
    in the circle too — the one this step opened."""
    copy = _copy(tmp_path)
    with open(os.path.join(copy, "pages", "_markup.py"), "a") as f:
        f.write("\n\ndef _planted():\n    from pages import _ui\n    return _ui\n")
    new = [c["modules"] for c in _circles(copy) if c["modules"] not in KNOWN_CIRCLES]
    assert new == [["pages._capture_preview", "pages._inputs_panel", "pages._markup", "pages._ui"]], new


def test_circles_in_a_small_graph():
    imports = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": {"e"}, "e": set(), "f": {"f"}}
    assert circles_in(imports) == [["a", "b", "c"], ["f"]]
    assert circles_in({"a": {"b"}, "b": set()}) == []


if __name__ == "__main__":
    print(json.dumps(_circles_of_checkout()))
