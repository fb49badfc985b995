"""Downloads: every file of the run — each target's compiled artifacts, the captured model, the inputs, the
Model Explorer export — plus report.json, the Markdown and HTML reports, and one zip of everything."""
import io
import json
import os
import zipfile

import streamlit as st

from pages import _ui
from xc_core.report.sidecar import SIDECAR_FILE

report = _ui.require_report()
_ui.header(report, "Downloads")
files = _ui.run_files(report)
key = (report.get("run") or {}).get("key")
# Download names and the zip's folder come from the model's name: a file name, never a path ("../../x").
name = _ui._safe_filename(os.path.splitext(str(report["source"]["name"]))[0]) or "model"

st.subheader("Reports")
c1, c2, c3, c4 = st.columns(4)
stored_report = _ui.file_reader(files["report.json"]) if "report.json" in files else None
c1.download_button("report.json", stored_report or (lambda: json.dumps(report, indent=1)), file_name="report.json",
                   mime="application/json", key="dl_report_json", on_click="ignore")
if SIDECAR_FILE in files:
    c1.download_button(SIDECAR_FILE, _ui.file_reader(files[SIDECAR_FILE]), file_name=SIDECAR_FILE,
                       mime="application/json", key="dl_report_sidecar", on_click="ignore",
                       help="the per-node lists too big for report.json (a graph of many thousand ops): keep it "
                            "beside report.json — xc reads the two together")


def _markdown() -> str:
    from xc_core.review.markdown import report_markdown
    return report_markdown(report)


def _html() -> str:
    from xc_core.review.html import report_html
    return report_html(report)


def _zip() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for rel, path in sorted(files.items()):
            z.write(path, f"{name}-xc/{rel}")
        if "report.json" not in files:       # the whole report inline: no sidecar to keep beside it
            z.writestr(f"{name}-xc/report.json", json.dumps(report, indent=1))
        z.writestr(f"{name}-xc/report.md", _markdown())
    return buf.getvalue()


c2.download_button("Markdown (PR comment)", _markdown, file_name=f"{name}-xc.md", mime="text/markdown",
                   key="dl_report_md", on_click="ignore")
c3.download_button("HTML (one offline file)", _html, file_name=f"{name}-xc.html", mime="text/html",
                   key="dl_report_html", on_click="ignore")
c4.download_button("Whole run (.zip)", _zip, file_name=f"{name}-xc-run.zip", mime="application/zip",
                   key="dl_run_zip", on_click="ignore", disabled=not set(files) - {"report.json", SIDECAR_FILE})
if key:
    st.caption(f"Run `{key[:12]}` · open it again with `?run={key[:12]}` · from the CLI: "
               f"`python -m xc_core report {key[:12]} --format md`")

st.subheader("Artifacts")
if not set(files) - {"report.json", SIDECAR_FILE}:
    st.info("This run has no files here: it was imported from a report.json, whose artifacts stay where it was "
            "made (a CI job's artifacts, or the folder given to analyze --out).")
    st.stop()


def _group(rel: str) -> str:
    parts = rel.split("/")
    if parts[0] == "artifacts" and len(parts) > 2:
        return parts[1]
    return {"capture": "capture", "model_explorer": "Model Explorer", "inputs.npz": "inputs"}.get(parts[0], parts[0])


by_group: dict[str, list[str]] = {}
for rel in sorted(files):
    if rel not in ("report.json", SIDECAR_FILE):
        by_group.setdefault(_group(rel), []).append(rel)
order = [t for t in report["targets"] if t in by_group] + sorted(g for g in by_group if g not in report["targets"])
for g in order:
    label = f"{g} — {report['targets'][g]['label']}" if g in report["targets"] else g
    st.markdown(f"**{_ui.plain(label)}** · {len(by_group[g])} file(s)")
    cols = st.columns(3)
    for i, rel in enumerate(by_group[g]):
        cols[i % 3].download_button(rel.split("/", 1)[1] if rel.startswith("artifacts/") else rel,
                                    _ui.file_reader(files[rel]), file_name=os.path.basename(rel),
                                    key=f"dl_{g}_{i}", on_click="ignore", icon=":material/download:",
                                    help=f"{_ui.plain(rel)} · {os.path.getsize(files[rel]) / 1024:,.1f} KiB")
export_error = ((report.get("exports") or {}).get("model_explorer") or {}).get("error")
if export_error:
    st.warning(f"The Model Explorer export failed (the analysis did not): {_ui.plain(export_error)}")
if "Model Explorer" in by_group:
    st.caption("Model Explorer: `pip install ai-edge-model-explorer`, then `model-explorer <target>.graph.json`; "
               "load the .nodedata.json overlays and the sync-navigation mapping from its side panel "
               "(model_explorer/README.txt says which file is which).")
