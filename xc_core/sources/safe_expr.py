"""Allow-lists for the two kinds of code a .pt2 archive carries as text, checked before torch sees them.

- Symbolic sizes (`expr_str`): torch's deserializer passes them to `sympy.sympify`, which *evaluates* the string
  as Python. We accept only plain arithmetic over symbol names and numbers, written the way torch writes them
  (sympy's `srepr`, e.g. `Mul(Integer(2), Symbol('s53', positive=True, integer=True))`, or the older `str` form,
  e.g. `2*s0 + 1`), and the sympy / torch shape functions that appear in real exports.
- Input guards (`guards_code`): `ExportedProgram.module()` compiles them with `exec`. We accept comparisons and
  arithmetic over input sizes (`L['x'].size()[2] >= 3`) and the math helpers torch's guard printer uses.

Both are checked on Python's AST (`ast.parse` only parses; nothing is evaluated), so a string either is plain
arithmetic or is refused; there is no escaping to get wrong.
"""
from __future__ import annotations

import ast
import builtins
import re

MAX_EXPR_CHARS = 20_000
MAX_DEPTH = 200
MAX_INT = 1 << 64
MAX_LITERAL_EXPONENT = 64

# Names sympy itself knows (what torch's serializer emits via srepr) plus torch.utils._sympy.functions, which the
# deserializer passes to sympify as locals.
SYMPY_CALLS = {
    "Symbol", "Integer", "Float", "Rational", "Add", "Mul", "Pow", "Max", "Min", "Mod", "Abs", "floor", "ceiling",
    "Eq", "Ne", "Lt", "Le", "Gt", "Ge", "Equality", "Unequality", "StrictLessThan", "StrictGreaterThan",
    "LessThan", "GreaterThan", "And", "Or", "Not", "Piecewise", "ITE",
    "FloorDiv", "ModularIndexing", "Where", "PythonMod", "CleanDiv", "CeilToInt", "FloorToInt", "CeilDiv", "LShift",
    "RShift", "PowByNatural", "FloatPow", "FloatTrueDiv", "IntTrueDiv", "IsNonOverlappingAndDenseIndicator",
    "TruncToFloat", "TruncToInt", "RoundToInt", "RoundDecimal", "ToFloat", "Identity",
}
SYMPY_CONSTANTS = {"oo", "zoo", "nan", "true", "false", "int_oo"}
POWER_CALLS = {"Pow", "PowByNatural", "FloatPow", "LShift", "RShift"}
SYMBOL_ASSUMPTIONS = {"positive", "negative", "integer", "real", "nonnegative", "nonpositive", "finite", "zero",
                      "nonzero", "rational", "even", "odd", "prime", "commutative", "complex", "extended_real"}
# torch names its size symbols s0, s77, u3, zuf0, ...: letters then digits.
SYMBOL_NAME = re.compile(r"[a-z]{1,8}[0-9]{1,9}")
NUMBER_TEXT = re.compile(r"-?[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?")
_BINOPS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.BitAnd, ast.BitOr)
_UNARY = (ast.USub, ast.UAdd, ast.Not, ast.Invert)
_COMPARE = (ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE)


class UnsafeExpression(ValueError):
    """The text is not plain arithmetic; the message says which part."""


def check_sympy_expr(text: str) -> None:
    """Raise UnsafeExpression unless `text` is plain arithmetic that sympify may evaluate."""
    tree = _parse(text)
    _SympyChecker().visit_root(tree.body)


def check_guard(text: str) -> None:
    """Raise UnsafeExpression unless `text` is a shape guard that torch may compile."""
    tree = _parse(text)
    _GuardChecker().visit_root(tree.body)


def _parse(text: str) -> ast.Expression:
    if not isinstance(text, str):
        raise UnsafeExpression("not a string")
    if len(text) > MAX_EXPR_CHARS:
        raise UnsafeExpression(f"{len(text):,} characters long")
    try:
        return ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        raise UnsafeExpression(f"not an expression ({type(e).__name__})") from None


class _Checker:
    def visit_root(self, node: ast.AST) -> None:
        self.visit(node, 0)

    def visit(self, node: ast.AST, depth: int) -> None:
        if depth > MAX_DEPTH:
            raise UnsafeExpression(f"nested more than {MAX_DEPTH} levels deep")
        method = getattr(self, "visit_" + type(node).__name__, None)
        if method is None:
            raise UnsafeExpression(f"{type(node).__name__} is not allowed")
        method(node, depth + 1)

    def visit_Constant(self, node: ast.Constant, depth: int) -> None:
        v = node.value
        if isinstance(v, bool) or (isinstance(v, int) and abs(v) < MAX_INT) or isinstance(v, float):
            return
        raise UnsafeExpression(f"the constant {_show(v)} is not allowed")

    def visit_BinOp(self, node: ast.BinOp, depth: int) -> None:
        if not isinstance(node.op, _BINOPS):
            raise UnsafeExpression(f"the operator {type(node.op).__name__} is not allowed")
        if isinstance(node.op, ast.Pow):
            _check_power(node.left, node.right)
        self.visit(node.left, depth)
        self.visit(node.right, depth)

    def visit_UnaryOp(self, node: ast.UnaryOp, depth: int) -> None:
        if not isinstance(node.op, _UNARY):
            raise UnsafeExpression(f"the operator {type(node.op).__name__} is not allowed")
        self.visit(node.operand, depth)

    def visit_Compare(self, node: ast.Compare, depth: int) -> None:
        if not all(isinstance(op, _COMPARE) for op in node.ops):
            raise UnsafeExpression("only ==, !=, <, <=, >, >= comparisons are allowed")
        self.visit(node.left, depth)
        for c in node.comparators:
            self.visit(c, depth)

    def visit_BoolOp(self, node: ast.BoolOp, depth: int) -> None:
        for v in node.values:
            self.visit(v, depth)


class _SympyChecker(_Checker):
    def visit_Name(self, node: ast.Name, depth: int) -> None:
        if node.id in SYMPY_CONSTANTS or _is_symbol_name(node.id):
            return
        raise UnsafeExpression(f"the name {node.id!r} is neither a size symbol nor a sympy constant")

    def visit_Call(self, node: ast.Call, depth: int) -> None:
        if not isinstance(node.func, ast.Name) or node.func.id not in SYMPY_CALLS:
            raise UnsafeExpression(f"the call {_call_name(node)} is not an allowed sympy function")
        name = node.func.id
        if name == "Symbol":
            if len(node.args) != 1 or not _is_str(node.args[0]) or not _is_symbol_name(node.args[0].value):
                raise UnsafeExpression("Symbol takes one symbol name like 's0'")
            for kw in node.keywords:
                if kw.arg not in SYMBOL_ASSUMPTIONS or not _is_bool(kw.value):
                    raise UnsafeExpression(f"Symbol assumption {kw.arg!r} is not allowed")
            return
        if name == "Float":
            if (len(node.args) != 1 or not _is_str(node.args[0]) or not NUMBER_TEXT.fullmatch(node.args[0].value)
                    or any(kw.arg != "precision" or not _is_int(kw.value) for kw in node.keywords)):
                raise UnsafeExpression("Float takes one number and a precision")
            return
        if node.keywords:
            raise UnsafeExpression(f"{name} takes no keyword arguments here")
        if name in POWER_CALLS and len(node.args) == 2:
            _check_power(node.args[0], node.args[1])
        for a in node.args:
            self.visit(a, depth)


class _GuardChecker(_Checker):
    """`L['x'].size()[2] >= 3`, `((-2) + L['x'].size()[2]) != 1`, `Eq(Mod(L['x'].size()[0], 32), 0)` …"""
    CALLS = SYMPY_CALLS | {"max", "min", "abs", "int", "float", "round", "bool",
                           "cast_symbool_to_symint_guardless"}
    MODULE_CALLS = {"math": {"floor", "ceil", "trunc", "sqrt", "isnan", "isinf"},
                    "torch": {"sym_float", "sym_int", "sym_max", "sym_min", "sym_not", "sym_ite", "sym_sqrt"}}
    TENSOR_METHODS = {"size", "stride", "storage_offset", "dim", "numel"}
    NAMES = {"inf", "True", "False"}

    def visit_Name(self, node: ast.Name, depth: int) -> None:
        if node.id not in self.NAMES:
            raise UnsafeExpression(f"the name {node.id!r} is not allowed in a guard")

    def visit_Subscript(self, node: ast.Subscript, depth: int) -> None:
        key = node.slice
        if _is_str(key):
            if not _is_input_key(key):
                raise UnsafeExpression(f"the input key {_show(key.value)} is not a plain name")
        elif not _is_int(key):
            raise UnsafeExpression("subscripts must be an input name or an index")
        if isinstance(node.value, ast.Name) and node.value.id == "L":
            return
        self.visit(node.value, depth)

    def visit_Call(self, node: ast.Call, depth: int) -> None:
        f = node.func
        if node.keywords:
            raise UnsafeExpression("keyword arguments are not allowed in a guard")
        if isinstance(f, ast.Name) and f.id in self.CALLS:
            pass
        elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) \
                and f.attr in self.MODULE_CALLS.get(f.value.id, ()):
            pass
        elif isinstance(f, ast.Attribute) and f.attr in self.TENSOR_METHODS and not node.args \
                and _is_input_ref(f.value):
            return
        else:
            raise UnsafeExpression(f"the call {_call_name(node)} is not allowed in a guard")
        for a in node.args:
            self.visit(a, depth)


def _check_power(base: ast.AST, exponent: ast.AST) -> None:
    # 2**10**9 would make sympy (or a guard) build a billion-digit integer, and so would 2**s0 once s0 gets a
    # large hint. Shapes are polynomials: an exponent (or shift) must be a small integer literal.
    lit = _literal_int(exponent)
    if lit is None:
        raise UnsafeExpression("an exponent or shift must be an integer literal")
    if abs(lit) > MAX_LITERAL_EXPONENT:
        raise UnsafeExpression(f"the exponent {lit} is above {MAX_LITERAL_EXPONENT}")


def _literal_int(node: ast.AST) -> int | None:
    if _is_int(node):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and _is_int(node.operand):
        return -node.operand.value
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Integer" \
            and len(node.args) == 1:
        return _literal_int(node.args[0])
    return None


def _is_input_ref(node: ast.AST) -> bool:
    """L['x'] or L['x']['k'] or L['x'][0]: a reference to an input, the only thing .size() may be called on."""
    while isinstance(node, ast.Subscript):
        if not (_is_input_key(node.slice) or _is_int(node.slice)):
            return False
        node = node.value
    return isinstance(node, ast.Name) and node.id == "L"


def _is_input_key(node) -> bool:
    return _is_str(node) and bool(re.fullmatch(r"[A-Za-z0-9_]{1,200}", node.value))


def _is_symbol_name(name: str) -> bool:
    return bool(SYMBOL_NAME.fullmatch(name)) and not hasattr(builtins, name)


def _is_str(node) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def _is_int(node) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool) \
        and abs(node.value) < MAX_INT


def _is_bool(node) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, bool)


def _call_name(node: ast.Call) -> str:
    try:
        return repr(ast.unparse(node.func))[:60]
    except Exception:  # noqa: BLE001 — only for the message
        return "?"


def _show(v) -> str:
    return repr(v)[:40]
