"""The fast subset of bench/fuzz.py: two inputs from every family of hostile input through the whole analysis.
None may crash xc, hang, run code from the file, or be refused with more than one line."""
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))


@pytest.mark.slow
def test_two_of_every_family_end_cleanly():
    import fuzz
    result = fuzz.run(per_family=2, targets=("ort-cpu",), timeout_s=20, memory_gib=2.0, log=None)
    families = [f for f in result if not f.startswith("_")]
    assert set(families) == set(fuzz.FAMILIES)
    for family in families:
        c = result[family]
        assert c["inputs"] == 2, family
        bad = {k: c.get(k, 0) for k in fuzz.BAD if c.get(k, 0)}
        assert not bad, (family, bad, result["_examples"])
    assert sum(result[f].get("refused", 0) for f in families) >= 15   # most of it is refused, in one line
