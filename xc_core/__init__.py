"""xc: compile one model for every target, read back what each compiler decided, compare.

The package has no UI dependency: the CLI, CI and the Streamlit pages all go through `xc_core.api.analyze`.
"""
__version__ = "0.1.0"
