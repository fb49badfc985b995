"""What a source file says about itself beyond its graph (`source.metadata` in the report), as lines for the CLI,
the Markdown report and the dashboard: a .tflite's TFLite Support metadata with its associated files (labels
counted, their first lines quoted), a Core ML neuralNetwork model's spec facts. Reports without the field give no
lines."""
from __future__ import annotations

FIRST_LABELS = 5


def source_fact_lines(report: dict) -> list[str]:
    # Constants a torch.export program recorded (use_cache=False), baked in by the loader: said first.
    constants = (report.get("source") or {}).get("constant_inputs") or {}
    from .pt2_constants import baked_in_note
    lines = [baked_in_note(constants)] if constants else []
    meta = (report.get("source") or {}).get("metadata") or {}
    if not meta:
        return lines
    evidence = meta.get("evidence", "reported")
    if "associated_files" in meta or meta.get("identifier") or meta.get("metadata_error"):
        head = "TFLite metadata" if meta.get("identifier") else "Files zipped after the flatbuffer (no TFLite metadata)"
        if meta.get("name"):
            head += f" of '{meta['name']}'" + (f" version {meta['version']}" if meta.get("version") else "")
        if meta.get("author"):
            head += f" by {meta['author']}"
        lines.append(f"{head} ({evidence})" + (f": {meta['description']}" if meta.get("description") else ""))
        for f in meta.get("associated_files") or []:
            kind = (f.get("type") or "UNKNOWN").lower().replace("_", " ")
            where = ", ".join(w for w in (kind if kind != "unknown" else "", f.get("owner") or "") if w)
            where = f" ({where})" if where else ""
            if "lines" in f:
                shown = (f.get("first_lines") or [])[:FIRST_LABELS]
                more = ", …" if f["lines"] > len(shown) else ""
                body = f"{f['lines']} line{'s' if f['lines'] != 1 else ''}" + \
                    (f" — {', '.join(shown)}{more}" if shown else "")
            elif f.get("in_zip"):
                body = f"{f.get('bytes', 0)} bytes (not text)"
            else:
                body = "declared in the metadata, not in the file"
            lines.append(f"  associated file {f['name']}{where}: {body}")
        if (meta.get("appended_zip") or {}).get("error"):
            lines.append(f"  the zip after the flatbuffer was not read: {meta['appended_zip']['error']}")
        if meta.get("metadata_error"):
            lines.append(f"  the metadata buffer could not be read: {meta['metadata_error']}")
    if meta.get("coreml_type"):
        lines.append(f"Core ML {meta['coreml_type']} model ({evidence}): " + (meta.get("summary") or ""))
    return lines
