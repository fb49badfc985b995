"""xc: compile one model for every target, read back what each compiler decided, compare.

The package has no UI dependency: the CLI, CI and the Streamlit pages all go through `xc_core.api.analyze`.
"""
__version__ = "0.1.0"


def _inductor_cache_beside_the_store() -> None:
    """Importing torch creates TorchInductor's cache folder in /tmp unless told otherwise; xc keeps it beside its run
    store ($XC_HOME/cache/inductor), so an analysis leaves nothing in /tmp."""
    import os

    from .paths import home
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(home(), "cache", "inductor"))


_inductor_cache_beside_the_store()
