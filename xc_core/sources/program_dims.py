"""The dims an ExportedProgram leaves free, read from its range constraints: what the loader records as the
source's dim bounds and what a re-export (pt2_constants.py) gives each dim back."""
from __future__ import annotations


def program_dim_bounds(ep) -> dict[str, tuple[int | None, int | None]]:
    """(min, max) per symbol from the program's range constraints; unbounded sides are None."""
    def bound(v):
        try:
            n = int(v)
        except (TypeError, ValueError, OverflowError, AttributeError):
            return None  # oo / int_oo: unbounded on that side
        return n if abs(n) < 1 << 62 else None

    return {str(sym): (bound(vr.lower), bound(vr.upper)) for sym, vr in (ep.range_constraints or {}).items()}
