"""report.json stays small: per-node lists too big for it go beside it (report.nodes.json.gz) and come back on
reading; a report.json without its sidecar is refused in one line, never shown with empty lists."""
import gzip
import json
import os
import shutil
import subprocess
import sys

import pytest

from xc_core.report import sidecar

from tiny_models import chain_onnx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
def test_big_lists_leave_report_json_and_come_back_whole(sample_report, monkeypatch):
    from xc_core.errors import XcInputError
    from xc_core.review.runs import parse_report
    report, _ = sample_report("vision-mini")
    whole = json.dumps(report, separators=(",", ":"))
    text, side = sidecar.dumps(report)
    assert side is None and text == whole          # a bundled sample's report is self-contained

    monkeypatch.setattr(sidecar, "DETACH_BYTES", 20_000)   # as if its graphs were many thousand nodes
    monkeypatch.setattr(sidecar, "_MEASURE_FROM", 100)
    text, side = sidecar.dumps(report)
    small = json.loads(text)
    pointers = small["detached"]["pointers"]
    assert "/targets/coreml-ane/graph/nodes" in pointers and len(text) < len(whole) * 0.6
    assert small["targets"]["coreml-ane"]["graph"]["nodes"] == {"$detached": "/targets/coreml-ane/graph/nodes"}
    assert json.dumps(report, separators=(",", ":")) == whole      # dumps left the report itself alone
    assert sidecar.attach(small, lambda: side) == report

    # Imported with its sidecar, it validates; without, it is refused in one line naming the file.
    assert parse_report(text.encode(), "report.json", side.encode())["targets"].keys() == report["targets"].keys()
    with pytest.raises(XcInputError) as err:
        parse_report(text.encode(), "report.json")
    assert "report.nodes.json" in str(err.value) and "\n" not in str(err.value)
    other = json.loads(side)
    del other["values"][pointers[0]]
    with pytest.raises(XcInputError, match="does not hold"):
        parse_report(text.encode(), "report.json", json.dumps(other).encode())


@pytest.mark.slow
def test_the_run_store_keeps_the_sidecar_with_its_report(sample_report, monkeypatch, tmp_path):
    from xc_core.store import RunStore
    report, _ = sample_report("tts-mini")
    monkeypatch.setattr(sidecar, "DETACH_BYTES", 20_000)
    monkeypatch.setattr(sidecar, "_MEASURE_FROM", 100)
    store = RunStore(str(tmp_path / "store"))
    store.put("k1", report)
    assert set(store.files("k1")) == {"report.json", sidecar.SIDECAR_FILE}
    assert RunStore(str(tmp_path / "store")).get("k1") == report
    assert [r["key"] for r in RunStore(str(tmp_path / "store")).runs()] == ["k1"]


@pytest.mark.slow
def test_the_sidecar_is_gzip_and_an_older_plain_one_still_reads(sample_report, monkeypatch, tmp_path):
    """Written compressed and byte-identical for the same lists (the store keeps a file once by its hash); a plain
    report.nodes.json of an older run reads the same; a sidecar that inflates past the limit, or is cut short, is
    refused in one line."""
    from xc_core.errors import XcInputError
    from xc_core.review.runs import parse_report
    report, _ = sample_report("vision-mini")
    monkeypatch.setattr(sidecar, "DETACH_BYTES", 20_000)
    monkeypatch.setattr(sidecar, "_MEASURE_FROM", 100)
    text, side = sidecar.dumps(report)
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        sidecar.write(report, str(tmp_path / folder))
    raw = (tmp_path / "a" / sidecar.SIDECAR_FILE).read_bytes()
    assert raw == (tmp_path / "b" / sidecar.SIDECAR_FILE).read_bytes()
    assert gzip.decompress(raw).decode() == side and len(raw) < len(side) / 5
    assert sidecar.read_file(str(tmp_path / "a" / "report.json")) == report

    os.remove(tmp_path / "a" / sidecar.SIDECAR_FILE)
    (tmp_path / "a" / sidecar.PLAIN_SIDECAR_FILE).write_text(side)
    assert sidecar.read_file(str(tmp_path / "a" / "report.json")) == report
    sidecar.write(report, str(tmp_path / "a"))            # written again: no stale plain sidecar beside it
    assert sorted(os.listdir(tmp_path / "a")) == ["report.json", sidecar.SIDECAR_FILE]

    monkeypatch.setenv("XC_MAX_SIDECAR_MB", "1")
    bomb = gzip.compress(side.encode() + b" " * (2 << 20))
    assert len(bomb) < 1 << 20
    for data, needle in ((bomb, "more than 1 MiB once decompressed"), (raw[:len(raw) // 2], "cut short")):
        with pytest.raises(XcInputError) as err:
            parse_report(text.encode(), "report.json", data)
        assert needle in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_a_big_graph_goes_beside_report_json_through_the_cli(tmp_path):
    """4,000 nodes: the compiled and captured graphs are written beside report.json; `report` reads the two
    together; report.json copied alone is refused in one line that names the sidecar."""
    model = chain_onnx(tmp_path / "chain.onnx", 4000)
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": ROOT}

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "xc_core", *args], cwd=ROOT, capture_output=True, text=True,
                              timeout=900, env=env)
    r = cli("analyze", model, "--targets", "ort-cpu", "--out", str(out), "--no-store")
    assert r.returncode == 0, r.stderr
    small = json.loads((out / "report.json").read_text())
    assert "/targets/ort-cpu/graph/nodes" in small["detached"]["pointers"]
    assert "/capture/graph/nodes" in small["detached"]["pointers"]
    side = out / sidecar.SIDECAR_FILE
    assert side.exists() and (out / "report.json").stat().st_size < len(gzip.decompress(side.read_bytes())) / 2
    whole = sidecar.read_file(str(out / "report.json"))
    assert len(whole["targets"]["ort-cpu"]["graph"]["nodes"]) >= 4000
    r = cli("report", str(out), "--format", "md")
    assert r.returncode == 0, r.stderr
    assert "ort-cpu" in r.stdout

    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(out / "report.json", alone / "report.json")
    r = cli("report", str(alone / "report.json"), "--format", "md")
    assert r.returncode == 2 and sidecar.SIDECAR_FILE in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_a_built_report_checks_the_first_nodes_of_a_big_graph_and_an_import_checks_all(sample_report):
    """validate_built_report samples each long node list (xc made its nodes with one constructor); a node beyond the
    sample that is wrong passes there and is refused by the full check every import gets."""
    import copy

    from xc_core.report import schema
    report, _ = sample_report("vision-mini")
    big = copy.deepcopy(report)
    nodes = big["targets"]["ort-cpu"]["graph"]["nodes"]
    while len(nodes) <= schema.BUILT_NODES_CHECKED:
        nodes.extend(copy.deepcopy(nodes))
    schema.validate_built_report(big)
    nodes[-1]["kind"] = 5                      # not a string: only the full check reaches it
    schema.validate_built_report(big)
    with pytest.raises(ValueError):
        schema.validate_report(big)
    nodes[0]["kind"] = 5
    with pytest.raises(ValueError):
        schema.validate_built_report(big)
    assert len(big["targets"]["ort-cpu"]["graph"]["nodes"]) > schema.BUILT_NODES_CHECKED    # the report is untouched
