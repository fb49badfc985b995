"""Targets in groups of a few columns, by toolchain family, for the tables that give each target a column (Stages,
the Checklist grid, the Fleet grid, the HTML report): 15 targets side by side need sideways scrolling at 1280 px, a
few tables of at most a handful of columns each do not. A family stays in one table where it fits, so the
ONNX Runtime EPs are compared side by side."""
from __future__ import annotations

FAMILY_NAMES = {"ort": "ONNX Runtime", "openvino": "OpenVINO", "coreml": "Core ML", "coreai": "Core AI",
                "executorch": "ExecuTorch", "litert": "LiteRT", "inductor": "Inductor"}


def family(tid: str) -> str:
    """A target's family: its id up to the first dash ('ort-cpu[level=basic]' → 'ort'), as the Fleet page's filter
    reads it (fleet.matrix.family: the fleet is a layer above, so it is not imported from there)."""
    return tid.split("[", 1)[0].split("-", 1)[0]


def family_name(fam: str) -> str:
    return FAMILY_NAMES.get(fam, fam)


def target_groups(targets: list[str], per_group: int) -> list[tuple[str, list[str]]]:
    """(a title naming its families, its targets) for each group of at most `per_group` targets, in the targets'
    order. Families are packed whole into a group while they fit; a family larger than a group is cut into
    groups of its own ("ONNX Runtime (1 of 2)")."""
    if per_group < 1:
        raise ValueError("per_group must be at least 1")
    families: dict[str, list[str]] = {}
    for tid in targets:
        families.setdefault(family(tid), []).append(tid)
    groups: list[tuple[list[str], list[str], bool]] = []      # (family titles, targets, open to another family)
    for fam, members in families.items():
        if len(members) > per_group:
            chunks = [members[i:i + per_group] for i in range(0, len(members), per_group)]
            groups += [([f"{family_name(fam)} ({k} of {len(chunks)})"], chunk, False)
                       for k, chunk in enumerate(chunks, start=1)]
        elif groups and groups[-1][2] and len(groups[-1][1]) + len(members) <= per_group:
            groups[-1][0].append(family_name(fam))
            groups[-1][1].extend(members)
        else:
            groups.append(([family_name(fam)], list(members), True))
    return [(" · ".join(names), members) for names, members, _ in groups]
