"""Exporters: a run's report written in other tools' file formats (xc_core.export.model_explorer)."""
