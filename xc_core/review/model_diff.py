"""What changed in the model itself between two runs: ops added, removed or replaced, attributes, shapes, dtypes
and retrained weights — a structural diff of the two captured graphs, as plain data (JSON) for the renderers.

Matching is hierarchy-aware. Each side's nodes form a module tree (a node belongs to its deepest nn.Module path;
no path: the root). From the root down, each matched module pair aligns its child modules and its own ops, in order
of first appearance, with difflib on tokens, finest first:
  - children by (structure, weights): the op-type multiset and child count of the subtree, plus the hashes of the
    weights it reads — so a block inserted into a Sequential, which renumbers every later index, lines up the
    later blocks by content, not by index; what is left by structure alone; what is left by name, then by
    op-type similarity (multiset Jaccard ≥ SIMILAR_MODULES).
    A child matched under another name is not a change: `renamed_modules` lists it, why "renumbered" when its
    integer index moved by exactly the insertions/removals before it, else "renamed". Unmatched children are whole
    blocks added or removed: one `blocks` entry each, their ops in `changes` with `block` set. Unmatched blocks with
    the same structure and the same weights on both sides are one block moved (a rename).
  - own ops by (op type, input and output counts, weight hashes), then by op type; what is left pairs up by
    position as "replaced" (ReLU → Hardswish), the rest is added / removed. Shapes are not in the tokens: a shape
    changed upstream (a stride) would un-align every op after it.
A flat graph (an ONNX file without module metadata) is all root ops: long sequences are aligned by their common
prefix and suffix, then exactly when the edits are few (Myers), else by anchors (tokens that occur once on each
side) and windows — never quadratic.

Matched node pairs are compared on the chosen fields:
  - attributes: all but bookkeeping (`target`, the aten overload's name, is implied by the op and its arguments,
    whose changes show themselves); numbers closer than attribute_rtol (relative) are equal.
  - shapes / dtypes of inputs and outputs, where a change starts: an input change that comes from another node's
    output is that node's change (a stride change reports the conv's output once, not every shape after it). An
    input that is a weight or a graph input reports at its consumer.
  - weights: the weight inputs of the two nodes (and outputs: an ONNX Constant node makes one), paired by slot
    (weights are matched through the nodes that read them, since renumbering renames them). Equal sha256:
    unchanged. Else rel_l2 = |new - base| / |base| from the values when both sides have them ("exact"; one
    batched read per side), else the lower bound ||new| - |base|| / |base| from the records' norms ("lower"). An
    exact rel_l2 <= weight_rtol is unchanged; a lower bound cannot show that, so such a change stays (with its
    bound).
Weights no node reads (BatchNorm's num_batches_tracked, unused buffers) are matched by name, through the module
renames, else by content (same sha256 and shape: renamed, not changed); one that changed, or exists on one side
only, is a "weights" change of its module (op_type "", no node), its tensor entry with the missing side's name and
hash None. Weights read only by added / removed ops belong to those
ops and are not listed again.

When fewer than UNRELATED_SHARE of the smaller graph's compute nodes line up with the same op (and it has at
least UNRELATED_MIN_OPS: a one-op graph whose op was swapped is an edit), the models are unrelated: `comparable`
False, one `line` ("… have nothing in common beyond 3 ops (linear, relu, add)"), no changes.
"""
from __future__ import annotations

import bisect
import difflib
import math
import re
from collections import Counter, defaultdict
from dataclasses import dataclass

from ..errors import XcInputError, printable_line
from ..ir import COMPUTE
from ..report.types import NodeRecord, WeightRecord
from .model_sides import ModelSide

FIELDS = ("ops", "attributes", "shapes", "dtypes", "weights")
CHANGE_KINDS = ("added", "removed", "replaced", "attributes", "shapes", "dtypes", "weights")
BOOKKEEPING_ATTRIBUTES = frozenset({"target"})
UNRELATED_SHARE = 0.2        # matched share of the smaller graph's compute nodes below which models are unrelated
UNRELATED_MIN_OPS = 3        # … when the smaller graph has at least this many compute nodes
SIMILAR_MODULES = 0.5        # op-type multiset Jaccard at which two leftover modules are the same one, edited
DOMINANT_SHARE = 0.8         # by_module: a module holding more than this share of the changes is split by child
DIRECT_ALIGN_CELLS = 2_000_000   # difflib on sequences up to this len(a) * len(b); beyond, anchors / chunks
MAX_EXACT_EDITS = 64         # beyond, Myers' exact alignment gives up for anchors and windows (it costs N·D)
ALIGN_CHUNK = 800
SIMILARITY_CELLS = 10_000    # pair leftovers by similarity only when there are at most this many candidate pairs
MAX_TEXT_VALUE = 60          # characters of an attribute value in a change's text
_INDEX = re.compile(r"^(.*?)(\d+)$")


@dataclass(frozen=True)
class ModelDiffOptions:
    """What to compare and how strictly."""
    fields: tuple[str, ...] = FIELDS
    weight_rtol: float = 0.0      # a weight whose exact relative L2 change is at most this is unchanged
    attribute_rtol: float = 0.0   # numeric attributes closer than this (relative) are equal

    def __post_init__(self):
        unknown = [f for f in self.fields if f not in FIELDS]
        if unknown:
            raise XcInputError(f"model diff fields: {', '.join(map(printable_line, unknown))} unknown "
                               f"(accepted: {', '.join(FIELDS)})")
        for name in ("weight_rtol", "attribute_rtol"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) \
                    or value < 0:
                raise XcInputError(f"model diff {name}: {printable_line(value)} is not a tolerance "
                                   f"(accepted: a number >= 0)")
        object.__setattr__(self, "fields", tuple(self.fields))


# ---- alignment -----------------------------------------------------------------------------------------------------
def _opcodes(a: list, b: list) -> list[tuple[str, int, int, int, int]]:
    """difflib-style opcodes aligning a and b (adjacent insertions and deletions merged into one "replace"), in
    time close to linear for long sequences of repeated tokens (where SequenceMatcher is quadratic, and fooled by
    shifted copies of the repeated unit): common prefix and suffix first; then the exact shortest edit script when
    it has at most MAX_EXACT_EDITS edits; else difflib when small, else anchors that occur once on each side, else
    windows."""
    la, lb = len(a), len(b)
    p, n = 0, min(la, lb)
    while p < n and a[p] == b[p]:
        p += 1
    s = 0
    while s < n - p and a[la - 1 - s] == b[lb - 1 - s]:
        s += 1
    out = [("equal", 0, p, 0, p)] if p else []
    out += _middle(a, b, p, la - s, p, lb - s)
    if s:
        out.append(("equal", la - s, la, lb - s, lb))
    return _merged(out)


def _middle(a, b, i1, i2, j1, j2) -> list:
    if i1 == i2 and j1 == j2:
        return []
    if i1 == i2:
        return [("insert", i1, i1, j1, j2)]
    if j1 == j2:
        return [("delete", i1, i2, j1, j1)]
    few_edits = _myers(a, b, i1, i2, j1, j2, MAX_EXACT_EDITS)
    if few_edits is not None:
        return few_edits
    if (i2 - i1) * (j2 - j1) <= DIRECT_ALIGN_CELLS:
        sm = difflib.SequenceMatcher(None, a[i1:i2], b[j1:j2], autojunk=False)
        return [(t, x1 + i1, x2 + i1, y1 + j1, y2 + j1) for t, x1, x2, y1, y2 in sm.get_opcodes()]
    anchors = _unique_anchors(a, b, i1, i2, j1, j2)
    if anchors:
        out, pi, pj = [], i1, j1
        for ai, bj in anchors:
            out += _middle_trimmed(a, b, pi, ai, pj, bj)
            out.append(("equal", ai, ai + 1, bj, bj + 1))
            pi, pj = ai + 1, bj + 1
        return out + _middle_trimmed(a, b, pi, i2, pj, j2)
    return _windowed(a, b, i1, i2, j1, j2)


def _windowed(a, b, i1, i2, j1, j2) -> list:
    """No anchor at all (a long run of look-alike units): Myers (else difflib) on a window of ALIGN_CHUNK tokens of
    each side at a time, keeping what it aligned up to its last equal block in the window's first three quarters
    (the window's cut end aligns badly), and starting the next window there."""
    out = []
    while (i2 - i1) * (j2 - j1) > DIRECT_ALIGN_CELLS:
        wi, wj = min(i2, i1 + ALIGN_CHUNK), min(j2, j1 + ALIGN_CHUNK)
        ops = _myers(a, b, i1, wi, j1, wj, MAX_EXACT_EDITS)
        if ops is None:
            ops = difflib.SequenceMatcher(None, a[i1:wi], b[j1:wj], autojunk=False).get_opcodes()
        else:
            ops = [(t, x1 - i1, x2 - i1, y1 - j1, y2 - j1) for t, x1, x2, y1, y2 in ops]
        keep = max((k for k, (tag, _, x2, _, y2) in enumerate(ops)
                    if tag == "equal" and x2 <= 3 * ALIGN_CHUNK // 4 and y2 <= 3 * ALIGN_CHUNK // 4), default=None)
        if keep is None:
            keep = max((k for k, op in enumerate(ops) if op[0] == "equal"), default=None)
        if keep is None:            # nothing alike in the window: it is one replaced stretch
            out.append(("replace", i1, wi, j1, wj))
            i1, j1 = wi, wj
            continue
        out += [(t, x1 + i1, x2 + i1, y1 + j1, y2 + j1) for t, x1, x2, y1, y2 in ops[:keep + 1]]
        i1, j1 = i1 + ops[keep][2], j1 + ops[keep][4]
    return out + _middle(a, b, i1, i2, j1, j2)


def _myers(a, b, i1, i2, j1, j2, max_edits: int) -> list | None:
    """The shortest edit script of a[i1:i2] → b[j1:j2] (Myers' O((N+M)·D) algorithm) as opcodes, or None when it
    needs more than max_edits insertions and deletions. Exact where difflib's longest-block-first is fooled: long
    runs of a repeated unit, where a shifted copy of the unit looks as good as the right one."""
    n, m = i2 - i1, j2 - j1
    offset = max_edits + 1
    furthest = [0] * (2 * max_edits + 3)        # by diagonal k = x - y, shifted by offset
    trace = []
    for d in range(max_edits + 1):
        trace.append(furthest[:])
        for k in range(-d, d + 1, 2):
            if k == -d or (k != d and furthest[offset + k - 1] < furthest[offset + k + 1]):
                x = furthest[offset + k + 1]
            else:
                x = furthest[offset + k - 1] + 1
            y = x - k
            while x < n and y < m and a[i1 + x] == b[j1 + y]:
                x += 1
                y += 1
            furthest[offset + k] = x
            if x >= n and y >= m:
                return _myers_opcodes(trace, offset, n, m, i1, j1)
    return None


def _myers_opcodes(trace, offset, n, m, i1, j1) -> list:
    moves = []          # ("equal" | "delete" | "insert", x, y) from the end back to the start
    x, y = n, m
    for d in range(len(trace) - 1, -1, -1):
        v, k = trace[d], x - y
        prev_k = k + 1 if k == -d or (k != d and v[offset + k - 1] < v[offset + k + 1]) else k - 1
        prev_x = v[offset + prev_k]
        prev_y = prev_x - prev_k
        while x > prev_x and y > prev_y:
            x, y = x - 1, y - 1
            moves.append(("equal", x, y))
        if d:
            if x == prev_x:
                moves.append(("insert", x, prev_y))
            else:
                moves.append(("delete", prev_x, y))
        x, y = prev_x, prev_y
    out = []
    for tag, x, y in reversed(moves):
        di, dj = (0, 1) if tag == "insert" else (1, 0) if tag == "delete" else (1, 1)
        if out and out[-1][0] == tag:
            t, a1, _, b1, _ = out[-1]
            out[-1] = (t, a1, x + i1 + di, b1, y + j1 + dj)
        else:
            out.append((tag, x + i1, x + i1 + di, y + j1, y + j1 + dj))
    return out


def _merged(ops: list) -> list:
    """Adjacent opcodes of one kind made one; an insertion next to a deletion is one replaced stretch (the callers
    pair what is left within one opcode)."""
    out = []
    for op in ops:
        if op[1] == op[2] and op[3] == op[4]:
            continue
        if out and (out[-1][0] == "equal") == (op[0] == "equal"):
            t, a1, _, b1, _ = out[-1]
            if t != "equal":
                t = "replace" if (a1 < op[2]) and (b1 < op[4]) else ("delete" if b1 == op[4] else "insert")
            out[-1] = (t, a1, op[2], b1, op[4])
        else:
            out.append(op)
    return out


def _middle_trimmed(a, b, i1, i2, j1, j2) -> list:
    """_middle after stripping the stretch's own common prefix and suffix."""
    out_head, out_tail = [], []
    p = 0
    while i1 + p < i2 and j1 + p < j2 and a[i1 + p] == b[j1 + p]:
        p += 1
    if p:
        out_head.append(("equal", i1, i1 + p, j1, j1 + p))
    i1, j1 = i1 + p, j1 + p
    s = 0
    while i1 < i2 - s and j1 < j2 - s and a[i2 - 1 - s] == b[j2 - 1 - s]:
        s += 1
    if s:
        out_tail.append(("equal", i2 - s, i2, j2 - s, j2))
    return out_head + _middle(a, b, i1, i2 - s, j1, j2 - s) + out_tail


def _unique_anchors(a, b, i1, i2, j1, j2) -> list[tuple[int, int]]:
    """Positions of tokens that occur exactly once in a[i1:i2] and once in b[j1:j2], the longest run of them in
    the same order on both sides (patience diff)."""
    count_a, count_b, pos_a, pos_b = Counter(a[i1:i2]), Counter(b[j1:j2]), {}, {}
    for i in range(i1, i2):
        if count_a[a[i]] == 1 and count_b.get(a[i]) == 1:
            pos_a[a[i]] = i
    for j in range(j1, j2):
        if b[j] in pos_a:
            pos_b[b[j]] = j
    pairs = sorted((pos_a[t], pos_b[t]) for t in pos_b)
    # longest increasing subsequence of the b positions
    tails, tails_at, back = [], [], [None] * len(pairs)
    for k, (_, bj) in enumerate(pairs):
        at = bisect.bisect_left(tails, bj)
        back[k] = tails_at[at - 1] if at else None
        if at == len(tails):
            tails.append(bj)
            tails_at.append(k)
        else:
            tails[at], tails_at[at] = bj, k
    chain, k = [], tails_at[-1] if tails_at else None
    while k is not None:
        chain.append(pairs[k])
        k = back[k]
    return chain[::-1]


# ---- the module tree -----------------------------------------------------------------------------------------------
class _Module:
    __slots__ = ("path", "name", "children", "ops", "counts", "weight_hash", "has_weights", "coarse", "fine")

    def __init__(self, path: str, name: str):
        self.path, self.name = path, name
        self.children: list[_Module] = []
        self.ops: list[int] = []          # indices of the side's nodes whose deepest module this is
        self.counts: Counter = Counter()  # op types in the whole subtree
        self.weight_hash = 0              # order-free hash of the weights the subtree reads
        self.has_weights = False
        self.coarse = self.fine = 0

    def subtree_ops(self) -> list[int]:
        out, stack = [], [self]
        while stack:
            m = stack.pop()
            out += m.ops
            stack += m.children
        return sorted(out)


class _Side:
    """A ModelSide prepared for matching: its module tree, tokens, and weights by the names the nodes use."""

    def __init__(self, side: ModelSide, use_weight_hashes: bool):
        self.side = side
        self.nodes: list[NodeRecord] = list(side.nodes)
        self.position = {n.id: i for i, n in enumerate(self.nodes)}
        self.weight_of: dict[str, WeightRecord] = {}
        for w in side.weights:
            self.weight_of.setdefault(w.name, w)
        for w in side.weights:              # the graph's names win over the model's own, where both exist
            if w.graph_name:
                self.weight_of[w.graph_name] = w
        self.produced = {t.name for n in self.nodes for t in n.outputs}
        # The weights each node reads (or, for an ONNX Constant node, makes), by slot: ("input", k) / ("output", k).
        self.node_weights: list[dict[tuple[str, int], WeightRecord]] = [
            {**{("input", k): self.weight_of[t.name] for k, t in enumerate(n.inputs) if t.name in self.weight_of},
             **{("output", k): self.weight_of[t.name] for k, t in enumerate(n.outputs) if t.name in self.weight_of}}
            for n in self.nodes]
        # Tokens: no shapes (a shape change upstream would un-align everything after it); the weights' hashes tell
        # repeated units apart.
        self.fine: list[int] = []
        for n, ws in zip(self.nodes, self.node_weights):
            shas = tuple(w.sha256 for w in ws.values()) if use_weight_hashes else ()
            self.fine.append(hash((n.op_type, len(n.inputs), len(n.outputs), shas)))
        self.root = self._tree(use_weight_hashes)

    def _tree(self, use_weight_hashes: bool) -> _Module:
        root = _Module("", "")
        by_path = {"": root}
        for i, n in enumerate(self.nodes):
            path = n.module_path or ""
            mod = by_path.get(path)
            if mod is None:
                parent, parts = root, path.split(".")
                for depth in range(1, len(parts) + 1):
                    sub = ".".join(parts[:depth])
                    mod = by_path.get(sub)
                    if mod is None:
                        mod = by_path[sub] = _Module(sub, parts[depth - 1])
                        parent.children.append(mod)
                    parent = mod
            mod.ops.append(i)
        order, stack = [], [root]             # parents before children; summed in reverse
        while stack:
            m = stack.pop()
            order.append(m)
            stack += m.children
        for m in reversed(order):
            m.counts.update(self.nodes[i].op_type for i in m.ops)
            for i in m.ops:
                for w in self.node_weights[i].values():
                    m.weight_hash = (m.weight_hash + hash(w.sha256)) & 0xFFFFFFFFFFFFFFFF
                    m.has_weights = True
            for c in m.children:
                m.counts.update(c.counts)
                m.weight_hash = (m.weight_hash + c.weight_hash) & 0xFFFFFFFFFFFFFFFF
                m.has_weights |= c.has_weights
            m.coarse = hash((tuple(sorted(m.counts.items())), len(m.children)))
            m.fine = hash((m.coarse, m.weight_hash if use_weight_hashes else 0))
        return root


def _jaccard(a: Counter, b: Counter) -> float:
    union = sum((a | b).values())
    return sum((a & b).values()) / union if union else 1.0


class _Matcher:
    """Walks the two module trees from the root, pairing modules and nodes."""

    def __init__(self, base: _Side, new: _Side):
        self.base, self.new = base, new
        self.pairs: list[tuple[int, int, bool]] = []      # (base node, new node, replaced)
        self.module_pairs: dict[str, str] = {}             # base path -> new path
        self.renamed: list[dict] = []
        self.unmatched_base: list[_Module] = []
        self.unmatched_new: list[_Module] = []
        self.removed_ops: list[int] = []                   # own ops without a partner (not in a block)
        self.added_ops: list[int] = []

    def run(self) -> None:
        self._match(self.base.root, self.new.root)
        self._match_moved_blocks()
        self._match_leftovers()

    def _match(self, root_b: _Module, root_n: _Module) -> None:
        stack = [(root_b, root_n)]
        while stack:
            mb, mn = stack.pop()
            self.module_pairs[mb.path] = mn.path
            self._match_ops(mb.ops, mn.ops)
            for cb, cn, why in self._match_children(mb.children, mn.children):
                if why:
                    self.renamed.append({"base": cb.path, "new": cn.path, "why": why})
                stack.append((cb, cn))

    def _match_ops(self, ops_b: list[int], ops_n: list[int]) -> None:
        fb, fn = self.base.fine, self.new.fine
        for tag, i1, i2, j1, j2 in _opcodes([fb[i] for i in ops_b], [fn[j] for j in ops_n]):
            if tag == "equal":
                self.pairs += [(ops_b[i], ops_n[j], False) for i, j in zip(range(i1, i2), range(j1, j2))]
                continue
            sub_b, sub_n = ops_b[i1:i2], ops_n[j1:j2]
            types_b = [self.base.nodes[i].op_type for i in sub_b]
            types_n = [self.new.nodes[j].op_type for j in sub_n]
            for tag2, x1, x2, y1, y2 in _opcodes(types_b, types_n):
                replaced = tag2 != "equal"
                k = min(x2 - x1, y2 - y1)
                self.pairs += [(sub_b[x1 + d], sub_n[y1 + d], replaced) for d in range(k)]
                self.removed_ops += sub_b[x1 + k:x2]
                self.added_ops += sub_n[y1 + k:y2]

    def _match_children(self, kids_b: list[_Module], kids_n: list[_Module]) -> list[tuple]:
        """Child module pairs (base, new, why renamed or None); the unmatched ones become blocks."""
        matched: list[tuple[int, int]] = []
        for tag, i1, i2, j1, j2 in _opcodes([m.fine for m in kids_b], [m.fine for m in kids_n]):
            if tag == "equal":
                matched += zip(range(i1, i2), range(j1, j2))
                continue
            for tag2, x1, x2, y1, y2 in _opcodes([m.coarse for m in kids_b[i1:i2]], [m.coarse for m in kids_n[j1:j2]]):
                if tag2 == "equal":
                    matched += zip(range(i1 + x1, i1 + x2), range(j1 + y1, j1 + y2))
                else:
                    matched += self._pair_leftovers(kids_b, kids_n, range(i1 + x1, i1 + x2), range(j1 + y1, j1 + y2))
        matched.sort()
        paired_b = {i for i, _ in matched}
        paired_n = {j for _, j in matched}
        self.unmatched_base += [m for i, m in enumerate(kids_b) if i not in paired_b]
        self.unmatched_new += [m for j, m in enumerate(kids_n) if j not in paired_n]
        removed_before = _prefix_counts(len(kids_b), paired_b)
        added_before = _prefix_counts(len(kids_n), paired_n)
        out = []
        for i, j in matched:
            cb, cn = kids_b[i], kids_n[j]
            why = None
            if cb.name != cn.name:
                shift = added_before[j] - removed_before[i]
                mb, mn = _INDEX.match(cb.name), _INDEX.match(cn.name)
                renumbered = (mb and mn and mb.group(1) == mn.group(1) and shift
                              and int(mn.group(2)) - int(mb.group(2)) == shift)
                why = "renumbered" if renumbered else "renamed"
            out.append((cb, cn, why))
        return out

    @staticmethod
    def _pair_leftovers(kids_b, kids_n, range_b: range, range_n: range) -> list[tuple[int, int]]:
        """Leftover children paired by name, then by op-type similarity (best first), in order."""
        pairs = []
        names_n = {kids_n[j].name: j for j in range_n}
        free_b = []
        for i in range_b:
            j = names_n.pop(kids_b[i].name, None)
            if j is None:
                free_b.append(i)
            else:
                pairs.append((i, j))
        free_n = sorted(names_n.values())
        if free_b and free_n and len(free_b) * len(free_n) <= SIMILARITY_CELLS:
            scored = sorted(((_jaccard(kids_b[i].counts, kids_n[j].counts), -abs(x - y), i, j)
                             for x, i in enumerate(free_b) for y, j in enumerate(free_n)), reverse=True)
            used_b, used_n = set(), set()
            for score, _, i, j in scored:
                if score < SIMILAR_MODULES:
                    break
                if i in used_b or j in used_n:
                    continue
                # keep the pairs in order on both sides: a crossing pair would reorder the model
                if any((i < pi) != (j < pj) for pi, pj in pairs):
                    continue
                used_b.add(i)
                used_n.add(j)
                pairs.append((i, j))
        return pairs

    def _match_moved_blocks(self) -> None:
        """An unmatched block with the same structure and the same weights on both sides moved (a rename)."""
        waiting = defaultdict(list)
        for m in self.unmatched_base:
            if m.has_weights:
                waiting[m.fine].append(m)
        still_new, moved_base = [], set()
        for m in self.unmatched_new:
            if m.has_weights and waiting.get(m.fine):
                mb = waiting[m.fine].pop(0)
                moved_base.add(id(mb))
                self.renamed.append({"base": mb.path, "new": m.path, "why": "renamed"})
                self._match(mb, m)
            else:
                still_new.append(m)
        self.unmatched_base = [m for m in self.unmatched_base if id(m) not in moved_base]
        self.unmatched_new = still_new


    def _match_leftovers(self) -> None:
        """The ops the module trees left without a partner on both sides, lined up once more in graph order: a run
        of the same ops (op type, arity, weights) pairs them. Module trees that disagree in shape — a scope split
        into deeper levels, a nested side against a flat one — then still match their ops. A block whose ops all
        pair this way is no longer a block; one partly paired leaves its other ops added or removed one by one."""
        left_b = sorted(self.removed_ops + [i for m in self.unmatched_base for i in m.subtree_ops()])
        left_n = sorted(self.added_ops + [j for m in self.unmatched_new for j in m.subtree_ops()])
        if not left_b or not left_n:
            return
        paired_b, paired_n = set(), set()
        for tag, i1, i2, j1, j2 in _opcodes([self.base.fine[i] for i in left_b], [self.new.fine[j] for j in left_n]):
            if tag == "equal":
                for i, j in zip(left_b[i1:i2], left_n[j1:j2]):
                    self.pairs.append((i, j, False))
                    paired_b.add(i)
                    paired_n.add(j)
        if not paired_b:
            return
        for blocks, paired, loose in ((self.unmatched_base, paired_b, self.removed_ops),
                                      (self.unmatched_new, paired_n, self.added_ops)):
            kept = []
            for m in blocks:
                ops = m.subtree_ops()
                if not any(i in paired for i in ops):
                    kept.append(m)
                else:
                    loose += [i for i in ops if i not in paired]
            blocks[:] = kept
        self.removed_ops[:] = [i for i in self.removed_ops if i not in paired_b]
        self.added_ops[:] = [j for j in self.added_ops if j not in paired_n]


def _prefix_counts(n: int, paired: set[int]) -> list[int]:
    """For each index, how many indices before it are not paired."""
    out, unpaired = [], 0
    for i in range(n):
        out.append(unpaired)
        if i not in paired:
            unpaired += 1
    return out


# ---- comparing matched nodes ---------------------------------------------------------------------------------------
def _close(a, b, rtol: float) -> bool:
    if a == b:
        return True
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) \
            and not isinstance(b, bool):
        return rtol > 0 and abs(a - b) <= rtol * max(abs(a), abs(b))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_close(x, y, rtol) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k], rtol) for k in a)
    return False


def _attribute_changes(nb: NodeRecord, nn: NodeRecord, rtol: float) -> dict:
    out = {}
    for key in list(nb.attributes) + [k for k in nn.attributes if k not in nb.attributes]:
        if key in BOOKKEEPING_ATTRIBUTES:
            continue
        vb, vn = nb.attributes.get(key), nn.attributes.get(key)
        if not _close(vb, vn, rtol):
            out[key] = [_json(vb), _json(vn)]
    return out


def _json(value):
    if isinstance(value, tuple):
        return [_json(v) for v in value]
    if isinstance(value, list):
        return [_json(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _json(v) for k, v in value.items()}
    return value


def _tensor_changes(nb: NodeRecord, nn: NodeRecord, new: _Side, read, attributes_changed: bool) -> dict:
    """{"input i" | "output i": [base, new]} for the tensor property `read` (shape or dtype), where the change
    starts at this node: not when every changed input comes from another node's output (that node reports it)."""
    inputs, started_here = {}, False
    for k in range(max(len(nb.inputs), len(nn.inputs))):
        tb = nb.inputs[k] if k < len(nb.inputs) else None
        tn = nn.inputs[k] if k < len(nn.inputs) else None
        vb, vn = read(tb), read(tn)
        if vb != vn:
            inputs[f"input {k}"] = [vb, vn]
            if tn is None or tn.name not in new.produced:
                started_here = True
    outputs = {}
    for k in range(max(len(nb.outputs), len(nn.outputs))):
        vb = read(nb.outputs[k] if k < len(nb.outputs) else None)
        vn = read(nn.outputs[k] if k < len(nn.outputs) else None)
        if vb != vn:
            outputs[f"output {k}"] = [vb, vn]
    if started_here:
        return {**{k: v for k, v in inputs.items()}, **outputs}
    if outputs and (not inputs or attributes_changed):
        return outputs
    return {}


def _read_shape(t):
    return None if t is None or t.shape is None else [_json(d) for d in t.shape]


def _read_dtype(t):
    return None if t is None else t.dtype


def _tensor_entry(wb: WeightRecord | None, wn: WeightRecord | None) -> dict:
    w = wn or wb
    return {"name": wn.name if wn else None, "base_name": wb.name if wb else None,
            "shape": list(w.shape), "numel": w.numel, "rel_l2": None, "rel_l2_bound": None,
            "base_sha256": wb.sha256 if wb else None, "new_sha256": wn.sha256 if wn else None}


def _measure(pending: list[tuple[WeightRecord, WeightRecord, dict]], base: ModelSide, new: ModelSide,
             notes: list[str]) -> None:
    """Fill each tensor entry's rel_l2: exact from the values (one read per side), else the norms' lower bound."""
    import numpy as np
    values_b, values_n = {}, {}
    if pending and base.values is not None and new.values is not None:
        try:
            values_b = base.values([wb.name for wb, _, _ in pending]) or {}
            values_n = new.values([wn.name for _, wn, _ in pending]) or {}
        except Exception as e:  # noqa: BLE001 — unreadable files: the norms still bound the change
            notes.append(f"weight values could not be read ({printable_line(e)}): changes are lower bounds")
            values_b, values_n = {}, {}
    for wb, wn, entry in pending:
        vb, vn = values_b.get(wb.name), values_n.get(wn.name)
        if vb is not None and vn is not None:
            vb, vn = np.asarray(vb, dtype=np.float64), np.asarray(vn, dtype=np.float64)
            norm = float(np.linalg.norm(vb))
            if vb.shape == vn.shape and norm > 0:
                entry["rel_l2"] = float(np.linalg.norm(vn - vb)) / norm
                entry["rel_l2_bound"] = "exact"
                continue
        if wb.l2 is not None and wn.l2 is not None and wb.l2 > 0:
            entry["rel_l2"] = abs(wn.l2 - wb.l2) / wb.l2
            entry["rel_l2_bound"] = "lower"


# ---- words ---------------------------------------------------------------------------------------------------------
def _where(path: str) -> str:
    return printable_line(path) if path else "the top level"


def _value_text(value) -> str:
    text = printable_line(value if isinstance(value, str) else repr(value) if not isinstance(value, list)
                          else "[" + ", ".join(map(str, value)) + "]")
    return text if len(text) <= MAX_TEXT_VALUE else text[:MAX_TEXT_VALUE - 1] + "…"


def _change_text(c: dict) -> str:
    kind, op, where = c["kind"], printable_line(c["op_type"]), _where(c["module_path"])
    if kind in ("added", "removed"):
        return f"{kind}: {op} at {where}"
    if kind == "replaced":
        return f"replaced: {printable_line(c['base_op'])} → {op} at {where}"
    subject = f"{op} at {where}" if op else where
    if kind == "weights":
        parts = []
        for t in c["detail"]["tensors"]:
            name = printable_line(t["name"] or t["base_name"])
            if t["base_name"] is None:
                parts.append(f"{name} added")
            elif t["name"] is None:
                parts.append(f"{name} removed")
            elif t["rel_l2_bound"] == "exact":
                parts.append(f"{name} changed, relative L2 {t['rel_l2']:.3g}")
            elif t["rel_l2_bound"] == "lower":
                parts.append(f"{name} changed, relative L2 at least {t['rel_l2']:.3g}")
            else:
                parts.append(f"{name} changed")
        return f"weights of {subject}: {'; '.join(parts)}"
    parts = [f"{printable_line(k)} {_value_text(b)} → {_value_text(n)}" for k, (b, n) in c["detail"].items()]
    return f"{kind} of {subject}: {'; '.join(parts)}"


# ---- the diff ------------------------------------------------------------------------------------------------------
def diff_models(base: ModelSide, new: ModelSide, options: ModelDiffOptions | None = None) -> dict:
    """The model-diff dict of two model sides (see the module docstring for how they are matched)."""
    options = options or ModelDiffOptions()
    fields = set(options.fields)
    notes = [printable_line(n) for s in (base, new) for n in s.notes]
    result = _empty(base, new, options, notes)
    if base.family != new.family:
        result.update(comparable=False, line=f"{printable_line(base.label)} is {_family(base.family)} and "
                                             f"{printable_line(new.label)} {_family(new.family)}: their ops do "
                                             f"not line up")
        return result
    weights_known = bool(base.weights) and bool(new.weights)
    if "weights" in fields and not notes:        # the sides' own notes say it when they were built from runs
        for s, name in ((base, "base"), (new, "new")):
            if not s.weights:
                notes.append(f"{name} ({printable_line(s.label)}) has no weight records (a run made before they "
                             f"were recorded): weights not compared")
        if weights_known and (base.values is None or new.values is None):
            notes.append("weight values are not at hand for both runs: weight changes are lower bounds from the "
                         "norms")
    sb, sn = _Side(base, weights_known), _Side(new, weights_known)
    matcher = _Matcher(sb, sn)
    matcher.run()

    common = Counter(sb.nodes[i].op_type for i, _, replaced in matcher.pairs
                     if not replaced and sb.nodes[i].kind == COMPUTE)
    smaller = min(sum(n.kind == COMPUTE for n in sb.nodes), sum(n.kind == COMPUTE for n in sn.nodes))
    result["matched"] = len(matcher.pairs)
    if smaller >= UNRELATED_MIN_OPS and sum(common.values()) < UNRELATED_SHARE * smaller:
        result.update(comparable=False, line=_unrelated_line(base, new, common))
        return result

    blocks, changes = [], []
    in_block_b, in_block_n = {}, {}
    for kind, modules, owner, into in (("removed", matcher.unmatched_base, sb, in_block_b),
                                       ("added", matcher.unmatched_new, sn, in_block_n)):
        for m in modules:
            ops = m.subtree_ops()
            for i in ops:
                into[i] = m.path
            blocks.append({"kind": kind, "module_path": m.path, "ops": len(ops),
                           "op_types": dict(Counter(owner.nodes[i].op_type for i in ops).most_common())})
    removed = sorted(list(in_block_b) + matcher.removed_ops)
    added = sorted(list(in_block_n) + matcher.added_ops)

    node_status_b, node_status_n, node_map = {}, {}, {}
    if "ops" in fields:
        for i in removed:
            node = sb.nodes[i]
            changes.append(_change("removed", node.module_path, node.op_type, None, node.id, None, {},
                                   in_block_b.get(i)))
            node_status_b[node.id] = "removed"
        for j in added:
            node = sn.nodes[j]
            changes.append(_change("added", node.module_path, node.op_type, None, None, node.id, {},
                                   in_block_n.get(j)))
            node_status_n[node.id] = "added"
    else:
        blocks = []

    pending: list[tuple[WeightRecord, WeightRecord, dict]] = []
    weight_changes: list[dict] = []
    seen_weights: set[tuple[str, str]] = set()
    for i, j, replaced in matcher.pairs:
        nb, nn = sb.nodes[i], sn.nodes[j]
        node_map[nn.id] = nb.id
        if replaced:
            if "ops" in fields:
                changes.append(_change("replaced", nn.module_path, nn.op_type, nb.op_type, nb.id, nn.id, {}, None))
                node_status_b[nb.id] = node_status_n[nn.id] = "replaced"
            continue
        found = []
        attrs = _attribute_changes(nb, nn, options.attribute_rtol)
        if "attributes" in fields and attrs:
            found.append(("attributes", attrs))
        if "shapes" in fields:
            detail = _tensor_changes(nb, nn, sn, _read_shape, bool(attrs))
            if detail:
                found.append(("shapes", detail))
        if "dtypes" in fields:
            detail = _tensor_changes(nb, nn, sn, _read_dtype, bool(attrs))
            if detail:
                found.append(("dtypes", detail))
        if "weights" in fields and weights_known:
            tensors = []
            weights_b, weights_n = sb.node_weights[i], sn.node_weights[j]
            for wb, wn in ((weights_b[slot], weights_n[slot]) for slot in weights_b if slot in weights_n):
                if (wb.name, wn.name) in seen_weights:
                    continue
                seen_weights.add((wb.name, wn.name))
                if wb.sha256 == wn.sha256 or tuple(wb.shape) != tuple(wn.shape):   # a new shape shows as shapes
                    continue
                entry = _tensor_entry(wb, wn)
                tensors.append(entry)
                pending.append((wb, wn, entry))
            if tensors:
                found.append(("weights", {"tensors": tensors}))
        for kind, detail in found:
            c = _change(kind, nn.module_path, nn.op_type, None, nb.id, nn.id, detail, None)
            (weight_changes if kind == "weights" else changes).append(c)
        if found:
            node_status_b[nb.id] = node_status_n[nn.id] = "changed"

    if "weights" in fields and weights_known:
        weight_changes += _unread_weights(sb, sn, matcher, pending)
        _measure(pending, base, new, notes)
        kept, other_changes = [], {c["new_node"] for c in changes}
        for c in weight_changes:
            c["detail"]["tensors"] = [t for t in c["detail"]["tensors"]
                                      if not (t["rel_l2_bound"] == "exact" and t["rel_l2"] <= options.weight_rtol)]
            if c["detail"]["tensors"]:
                kept.append(c)
            elif c["new_node"] is not None and c["new_node"] not in other_changes:
                node_status_b.pop(c["base_node"], None)     # its only change was within tolerance
                node_status_n.pop(c["new_node"], None)
        changes += kept

    changes.sort(key=_graph_order(sb, sn, matcher.pairs))
    for c in changes:
        c["text"] = _change_text(c)
    summary = dict.fromkeys(CHANGE_KINDS, 0)
    for c in changes:
        summary[c["kind"]] += 1
    first_at = _first_positions(sn) if matcher.renamed else {}
    renamed = sorted(matcher.renamed, key=lambda r: first_at.get(r["new"], 0))
    summary["renamed_modules"] = sum(r["why"] == "renamed" for r in renamed)
    result.update(comparable=True, summary=summary, changes=changes, blocks=blocks, renamed_modules=renamed,
                  by_module=_by_module(changes),
                  node_status={"base": node_status_b, "new": node_status_n}, node_map=node_map)
    return result


def _change(kind, module_path, op_type, base_op, base_node, new_node, detail, block) -> dict:
    return {"kind": kind, "module_path": module_path or "", "op_type": op_type, "base_op": base_op,
            "base_node": base_node, "new_node": new_node, "detail": detail, "block": block, "text": ""}


def _unread_weights(sb: _Side, sn: _Side, matcher: _Matcher, pending: list) -> list[dict]:
    """Changes of the weights no node reads: matched by name through the module renames, else by content (a renamed
    tensor with the same sha256 and shape is not a change); see the module docstring."""
    def unread(side: _Side) -> list[WeightRecord]:
        read = {w.name for ws in side.node_weights for w in ws.values()}
        return [w for w in side.side.weights if w.name not in read]

    orphans_n = {w.name: w for w in unread(sn)}
    out, left_b = [], []
    for wb in unread(sb):
        name = wb.name
        for prefix in _prefixes(_owner(wb)):           # the deepest matched module renames the name
            if prefix in matcher.module_pairs and (name.startswith(prefix + ".") or not prefix):
                target = matcher.module_pairs[prefix]
                rest = name[len(prefix) + 1:] if prefix else name
                name = f"{target}.{rest}" if target else rest
                break
        wn = orphans_n.pop(name, None)
        if wn is None:
            left_b.append(wb)
        elif wb.sha256 != wn.sha256:
            entry = _tensor_entry(wb, wn)
            pending.append((wb, wn, entry))
            out.append(_change("weights", _owner(wn), "", None, None, None, {"tensors": [entry]}, None))
    by_content = defaultdict(list)
    for wn in orphans_n.values():
        by_content[(wn.sha256, tuple(wn.shape))].append(wn)
    blocks_b = {m.path for m in matcher.unmatched_base}
    for wb in left_b:
        same = by_content.get((wb.sha256, tuple(wb.shape)))
        if same:
            del orphans_n[same.pop(0).name]
        elif not _within(_owner(wb), blocks_b):
            out.append(_change("weights", _owner(wb), "", None, None, None,
                               {"tensors": [_tensor_entry(wb, None)]}, None))
    blocks_n = {m.path for m in matcher.unmatched_new}
    for wn in orphans_n.values():
        if not _within(_owner(wn), blocks_n):
            out.append(_change("weights", _owner(wn), "", None, None, None,
                               {"tensors": [_tensor_entry(None, wn)]}, None))
    return out


def _owner(w: WeightRecord) -> str:
    if w.module_path is not None:
        return w.module_path
    return w.name.rsplit(".", 1)[0] if "." in w.name else ""


def _prefixes(path: str) -> list[str]:
    """path, its parent, …, "" (deepest first)."""
    parts = path.split(".") if path else []
    return [".".join(parts[:k]) for k in range(len(parts), -1, -1)]


def _within(path: str, modules: set[str]) -> bool:
    return any(p in modules for p in _prefixes(path) if p)


def _first_positions(side: _Side) -> dict[str, int]:
    """{module path: the position of its subtree's first node}."""
    out: dict[str, int] = {}
    for i, n in enumerate(side.nodes):
        for prefix in _prefixes(n.module_path or ""):
            if prefix in out:
                break           # its ancestors were seen before it
            out[prefix] = i
    return out


def _graph_order(sb: _Side, sn: _Side, pairs: list[tuple[int, int, bool]]):
    """Sort key: position in the new graph; a removed node sits just after the new partner of the last matched
    base node before it; changes without a node go last."""
    partner = {i: j for i, j, _ in pairs}
    anchor, last = [], -1
    for i in range(len(sb.nodes)):
        last = partner.get(i, last)
        anchor.append(last)

    def key(c: dict):
        if c["new_node"] is not None:
            return (sn.position[c["new_node"]], 1, 0)
        if c["base_node"] is not None:
            i = sb.position[c["base_node"]]
            return (anchor[i], 2, i)
        return (len(sn.nodes), 3, 0)
    return key


def _by_module(changes: list[dict]) -> list[dict]:
    """Counts per top-level module; a module holding more than DOMINANT_SHARE of the changes is split into its
    children (again while one of them dominates)."""
    total = len(changes)
    if not total:
        return []

    def group(items: list[dict], depth: int) -> dict[str, list[dict]]:
        out = defaultdict(list)
        for c in items:
            parts = c["module_path"].split(".") if c["module_path"] else []
            out[".".join(parts[:depth])].append(c)
        return out

    rows, work, depth = [], changes, 1
    while True:
        groups = group(work, depth)
        top_path, top = max(groups.items(), key=lambda kv: len(kv[1]))
        deeper = any(len(c["module_path"].split(".")) > depth for c in top if c["module_path"])
        if len(top) > DOMINANT_SHARE * total and deeper and top_path:
            rows += [(p, cs) for p, cs in groups.items() if p != top_path]
            work, depth = top, depth + 1
            continue
        rows += list(groups.items())
        break
    out = []
    for path, cs in rows:
        kinds = Counter(c["kind"] for c in cs)
        out.append({"module_path": path, "added": kinds["added"], "removed": kinds["removed"],
                    "replaced": kinds["replaced"],
                    "changed": sum(kinds[k] for k in ("attributes", "shapes", "dtypes", "weights"))})
    out.sort(key=lambda r: (-(r["added"] + r["removed"] + r["replaced"] + r["changed"]), r["module_path"]))
    return out


def _family(family: str) -> str:
    return {"aten": "an aten graph (PyTorch)", "onnx": "an ONNX graph", "tflite": "a TFLite graph"}.get(
        family, f"a {printable_line(family)} graph")


def _unrelated_line(base: ModelSide, new: ModelSide, common: Counter) -> str:
    head = (f"{printable_line(base.label)} ({len(base.nodes)} nodes) and {printable_line(new.label)} "
            f"({len(new.nodes)} nodes) have nothing in common")
    n = sum(common.values())
    if not n:
        return head
    names = [printable_line(op) for op, _ in common.most_common(5)]
    more = ", …" if len(common) > 5 else ""
    return f"{head} beyond {n} op{'s' if n != 1 else ''} ({', '.join(names)}{more})"


def _side_summary(side: ModelSide) -> dict:
    return {"label": side.label, "family": side.family, "graph": side.graph, "nodes": len(side.nodes),
            "weights": len(side.weights), "values": side.values is not None}


def _empty(base: ModelSide | None, new: ModelSide | None, options: ModelDiffOptions, notes: list[str]) -> dict:
    return {"comparable": False, "line": None,
            "base": _side_summary(base) if base else None, "new": _side_summary(new) if new else None,
            "options": {"fields": list(options.fields), "weight_rtol": options.weight_rtol,
                        "attribute_rtol": options.attribute_rtol},
            "matched": 0, "summary": dict.fromkeys(CHANGE_KINDS + ("renamed_modules",), 0),
            "changes": [], "blocks": [], "renamed_modules": [], "by_module": [],
            "node_status": {"base": {}, "new": {}}, "node_map": {}, "notes": notes, "evidence": "measured"}


def model_diff_of_runs(base_run, new_run, options: ModelDiffOptions | None = None) -> dict:
    """The model diff of two runs (review.runs.Run): their model sides, diffed; runs whose models cannot be lined
    up (a .tflite against an ONNX) give comparable False with the reason."""
    from .model_sides import mixed_families, model_sides
    options = options or ModelDiffOptions()
    sides = model_sides(base_run, new_run)
    if isinstance(sides, str):
        result = _empty(None, None, options, [])
        result["line"] = printable_line(sides)
        for key, run in (("base", base_run), ("new", new_run)):
            result[key] = {"label": run.label, "family": None, "graph": None, "nodes": 0, "weights": 0,
                           "values": False}
        return result
    result = diff_models(sides[0], sides[1], options)
    if mixed_families(base_run, new_run):
        # A PyTorch run against an ONNX one compares through its ONNX export, which xc writes without the exporter's
        # default rewrites; an ONNX file someone exported with torch.onnx usually has them. Both readings are
        # tried and the one that lines up better is kept, said in the notes.
        optimized = model_sides(base_run, new_run, optimize_export=True)
        if not isinstance(optimized, str):
            other = diff_models(optimized[0], optimized[1], options)
            plain_n, optimized_n = _change_count(result), _change_count(other)
            if optimized_n < plain_n:
                result = other
            kept = ("optimized as torch.onnx.export does by default" if result is other else "as xc exported it")
            result["notes"].append(f"the PyTorch run is compared through its ONNX export, {kept}: the reading with "
                                   f"fewer changes ({min(plain_n, optimized_n)} against {max(plain_n, optimized_n)})")
    return result


def _change_count(result: dict) -> int:
    return len(result["changes"]) + (0 if result["comparable"] else 10**9)
