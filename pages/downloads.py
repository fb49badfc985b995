"""Downloads: every file of the run — each target's compiled artifacts (what each is, where its name does not say),
the captured model, the inputs, the Model Explorer export (built from the report when its button is pressed) as
one zip with the command that opens it — plus report.json, the Markdown and HTML reports, and one zip of
everything."""
import io
import json
import os
import zipfile

import streamlit as st

from pages import _ui
from xc_core.export.model_explorer import MODEL_EXPLORER_DIR, model_explorer_zip
from xc_core.report.sidecar import SIDECAR_FILES, sidecar_in
from xc_core.views.rows import MODEL_EXPLORER_ZIP, artifact_groups, model_explorer_command
from xc_core.views.isolation import isolated_targets, repro_files, repro_zip, repro_zip_name

report = _ui.require_report()
_ui.header(report, "Downloads")
files = _ui.run_files(report)
key = _ui.run_key(report)
# Download names and the zip's folder come from the model's name: a file name, never a path ("../../x").
name = _ui._safe_filename(os.path.splitext(str(report.source.name))[0]) or "model"
as_stored = _ui.stored_report(report)      # report.json as the store keeps it (an older report not upgraded)

st.subheader("Reports")
c1, c2, c3, c4 = st.columns(4)
stored_report = _ui.file_reader(files["report.json"]) if "report.json" in files else None
c1.download_button("report.json", stored_report or (lambda: json.dumps(as_stored, indent=1)), file_name="report.json",
                   mime="application/json", key="dl_report_json", on_click="ignore")
sidecar = sidecar_in(files)
if sidecar:
    c1.download_button(sidecar, _ui.file_reader(files[sidecar]), file_name=sidecar,
                       mime="application/gzip" if sidecar.endswith(".gz") else "application/json",
                       key="dl_report_sidecar", on_click="ignore",
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
            if not rel.startswith(MODEL_EXPLORER_DIR + "/"):     # an older run's stored export: made afresh below
                z.write(path, f"{name}-xc/{rel}")
        if "report.json" not in files:       # the whole report inline: no sidecar to keep beside it
            z.writestr(f"{name}-xc/report.json", json.dumps(as_stored, indent=1))
        z.writestr(f"{name}-xc/report.md", _markdown())
        with zipfile.ZipFile(io.BytesIO(model_explorer_zip(report))) as explorer:
            for entry in explorer.namelist():
                z.writestr(f"{name}-xc/{entry}", explorer.read(entry))
    return buf.getvalue()


c2.download_button("Markdown (PR comment)", _markdown, file_name=f"{name}-xc.md", mime="text/markdown",
                   key="dl_report_md", on_click="ignore")
c3.download_button("HTML (one offline file)", _html, file_name=f"{name}-xc.html", mime="text/html",
                   key="dl_report_html", on_click="ignore")
c4.download_button("Whole run (.zip)", _zip, file_name=f"{name}-xc-run.zip", mime="application/zip",
                   key="dl_run_zip", on_click="ignore", disabled=not set(files) - {"report.json", *SIDECAR_FILES})
if key:
    st.caption(f"Run `{key[:12]}` · open it again with `?run={key[:12]}` · from the CLI: "
               f"`xc report {key[:12]} --format md`")

st.subheader("Artifacts")
if not set(files) - {"report.json", *SIDECAR_FILES}:
    st.info("This run has no files here: it was imported from a report.json, whose artifacts stay where it was "
            "made (a CI job's artifacts, or the folder given to analyze --out).")

for group in artifact_groups(report, list(files)):
    st.markdown(f"**{_ui.plain(group['title'])}** · {group['count']} file(s)")
    for note, entries in group["parts"]:
        if note:
            st.caption(_ui.plain(note))
        cols = st.columns(3)
        for i, f in enumerate(entries):
            size = os.path.getsize(files[f["rel"]]) / 1024
            cols[i % 3].download_button(_ui.plain(f["label"]), _ui.file_reader(files[f["rel"]]),
                                        file_name=f["label"], key=f"dl_{f['rel']}", on_click="ignore",
                                        icon=":material/download:", help=f"{_ui.plain(f['rel'])} · {size:,.1f} KiB")

# Culprit search's repro bundles (opt-in, the Drift page): each target's repro folder as one zip, made on the click
# from the run's stored files — what a toolchain's maintainers run without xc.
bundles = [(tid, repro_files(report, tid, files)) for tid in isolated_targets(report)
           if report.targets[tid].isolation.culprit.repro.folder]
if bundles:
    st.markdown("**Culprit repro bundles**")
    for tid, bundle in bundles:
        repro = report.targets[tid].isolation.culprit.repro
        if not bundle:
            st.caption(f"{_ui.plain(tid)}: its repro folder {_ui.code(repro.folder)} is not among this run's files "
                       "(a report imported without them).")
            continue
        st.download_button(f"{_ui.plain(tid)}: repro bundle ({len(bundle)} file(s))",
                           lambda tid=tid: repro_zip(report, tid, files), file_name=repro_zip_name(tid),
                           mime="application/zip", key=f"dl_repro_{tid}", on_click="ignore",
                           icon=":material/download:",
                           help=_ui.plain(f"{repro.folder}/ as one zip: "
                                          + (f"run {repro.script} with Python" if repro.script else
                                             repro.no_script or "the files to reproduce the culprit")))
        if repro.tracker:
            st.caption(f"Report it to {_ui.plain(tid)}'s toolchain: {_ui.plain(repro.tracker)}")

# The Model Explorer export is one graph, overlay and mapping file per target and pair (78 for eight targets): made
# from the report when the button is pressed (not stored with the run: a second copy of every graph), as one zip,
# with the command that opens it.
command = model_explorer_command(report)
if command:
    st.markdown("**Model Explorer**")
    st.download_button(MODEL_EXPLORER_ZIP, lambda: model_explorer_zip(report), file_name=MODEL_EXPLORER_ZIP,
                       mime="application/zip", key="dl_model_explorer", on_click="ignore",
                       icon=":material/download:",
                       help="every graph, the backend / precision / fallback / drift overlays and the sync-navigation "
                            "mappings, with README.txt saying which file is which — built from the report when "
                            "pressed (seconds for a graph of many thousand nodes)")
    st.caption("Open it with Google's Model Explorer (`pip install ai-edge-model-explorer`): the command below opens "
               "two of its graphs, the first with its backends coloured (the graph selector's 'Open in split pane' "
               "puts them side by side). Load the other overlays and the sync-navigation mappings from its side "
               "panel; README.txt in the zip says which file is which. From the CLI: "
               f"`xc report {(key or 'RUN')[:12]} --format model-explorer --out DIR`.")
    st.code(command, language="bash", wrap_lines=True)
    if key:     # a stored run: the live extension reads it from the store and computes what it lacks
        st.caption("Live instead, with the overlays of any target computed by xc when you pick it (the run's own "
                   "targets at once): `xc explorer " + key[:12] + "` starts Model Explorer with xc's extension on "
                   "this machine.")
