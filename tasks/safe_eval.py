"""Bounded evaluation of model-written expressions: a whitelisted `ast` walk, never eval/exec.

A completion is untrusted text: `9**9**9**9` or `'a'*10**10` passed to eval() hangs or exhausts memory,
and `__import__('os')...` runs code. Here the input length is capped before parsing, the tree may hold
only the node types a caller allows, its size and depth are capped, literals are capped in digits,
and every intermediate value is capped in magnitude, so the work is bounded for any input.
"""

from __future__ import annotations

import ast
import builtins
import operator
from dataclasses import dataclass
from fractions import Fraction

_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,  # on Fractions: exact
    ast.LShift: operator.lshift,
    ast.RShift: operator.rshift,
    ast.BitAnd: operator.and_,
    ast.BitOr: operator.or_,
    ast.BitXor: operator.xor,
}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Invert: operator.invert}
_MAX_SHIFT = 64


class UnsafeExpression(ValueError):
    """The text is not an expression this evaluator accepts (a reward scores it 0)."""


@dataclass(frozen=True)
class Limits:
    max_chars: int = 256
    max_nodes: int = 64
    max_depth: int = 24
    max_literal_digits: int = 12
    max_abs: int = 10**30
    binary_ops: frozenset = frozenset({ast.Add, ast.Sub, ast.Mult})
    unary_ops: frozenset = frozenset()


def parse_expression(text: str, limits: Limits) -> ast.expr:
    """The checked syntax tree of `text`, or UnsafeExpression naming what was refused."""
    if not isinstance(text, str):
        raise UnsafeExpression(f"not text: {type(text).__name__}")
    if len(text) > limits.max_chars:
        raise UnsafeExpression(f"longer than {limits.max_chars} characters")
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise UnsafeExpression(f"not an expression: {exc}") from None
    _check(tree, limits)
    return tree


def _check(root: ast.expr, limits: Limits) -> None:
    stack = [(root, 1)]
    seen = 0
    while stack:
        node, depth = stack.pop()
        seen += 1
        if seen > limits.max_nodes or depth > limits.max_depth:
            raise UnsafeExpression(f"more than {limits.max_nodes} nodes or deeper than {limits.max_depth}")
        if isinstance(node, ast.BinOp) and type(node.op) in limits.binary_ops:
            stack += [(node.left, depth + 1), (node.right, depth + 1)]
        elif isinstance(node, ast.UnaryOp) and type(node.op) in limits.unary_ops:
            stack.append((node.operand, depth + 1))
        elif isinstance(node, ast.Constant) and type(node.value) is int:
            if len(str(node.value)) > limits.max_literal_digits:
                raise UnsafeExpression(f"a literal longer than {limits.max_literal_digits} digits")
        else:
            raise UnsafeExpression(f"{type(node).__name__} is not allowed")


def evaluate(tree: ast.expr, limits: Limits) -> int | Fraction:
    """Value of a tree that parse_expression accepted; UnsafeExpression if a value leaves the bounds."""
    if isinstance(tree, ast.Constant):
        return tree.value
    if isinstance(tree, ast.UnaryOp):
        return _bounded(_UNARY[type(tree.op)](evaluate(tree.operand, limits)), limits)
    left, right = evaluate(tree.left, limits), evaluate(tree.right, limits)
    if isinstance(tree.op, ast.Div):
        if right == 0:
            raise UnsafeExpression("division by zero")
        left = Fraction(left)
    if isinstance(tree.op, (ast.LShift, ast.RShift)) and not (
        isinstance(right, int) and 0 <= right <= _MAX_SHIFT and isinstance(left, int)
    ):
        raise UnsafeExpression(f"shift by {right}: only ints by 0..{_MAX_SHIFT}")
    if isinstance(tree.op, (ast.BitAnd, ast.BitOr, ast.BitXor)) and not (
        isinstance(left, int) and isinstance(right, int)
    ):
        raise UnsafeExpression("bitwise operators need ints")
    return _bounded(_BINARY[type(tree.op)](left, right), limits)


def _bounded(value, limits: Limits):
    if abs(value) > limits.max_abs:
        raise UnsafeExpression(f"an intermediate value exceeds {limits.max_abs:.0e}")
    if isinstance(value, Fraction) and value.denominator == 1:
        return value.numerator
    return value


# Arithmetic with bit operations and hex literals: what reasoning-gym's own eval() calls need.
_GUARD_LIMITS = Limits(
    max_chars=10_000,
    max_nodes=512,
    max_depth=64,
    max_literal_digits=40,
    max_abs=2**256,
    binary_ops=frozenset(_BINARY) - {ast.Div},
    unary_ops=frozenset(_UNARY),
)


def guarded_eval(source, *_ignored_namespaces):
    """A stand-in for eval() inside third-party scorers that eval() a model's answer.

    Accepts Python literals (lists of characters, matrices, numbers) through ast.literal_eval and
    integer arithmetic through the bounded evaluator above; refuses everything else with ValueError,
    which such scorers already catch and score as wrong.
    """
    if not isinstance(source, str) or len(source) > _GUARD_LIMITS.max_chars:
        raise UnsafeExpression("guarded eval: only text up to 10000 characters")
    try:
        return ast.literal_eval(source.strip())
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        pass
    return evaluate(parse_expression(source, _GUARD_LIMITS), _GUARD_LIMITS)


# Symbolic answers (polynomials, antiderivatives, 24-game expressions) that sympy.parse_expr may see.
# parse_expr runs eval() on its input and sympy computes huge powers exactly, so only a small grammar
# passes: numbers, plain symbol names, calls of common math functions, + - * / and small powers.
SYMBOLIC_FUNCTIONS = frozenset(
    [
        "sin",
        "cos",
        "tan",
        "cot",
        "sec",
        "csc",
        "asin",
        "acos",
        "atan",
        "sinh",
        "cosh",
        "tanh",
        "exp",
        "log",
        "ln",
        "sqrt",
        "Abs",
        "abs",
    ]
)
_SYMBOLIC_OPS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow)
_MAX_EXPONENT = 64


def symbolic_expression_problem(text: str, max_chars: int = 512, max_nodes: int = 256) -> str | None:
    """Why `text` is not a small symbolic expression, or None when it is."""
    if not isinstance(text, str) or len(text) > max_chars:
        return f"not text of at most {max_chars} characters"
    try:
        root = ast.parse(text.strip(), mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        return f"not an expression: {exc}"
    nodes = list(ast.walk(root))
    if len(nodes) > max_nodes:
        return f"more than {max_nodes} nodes"
    for node in nodes:
        problem = _symbolic_node_problem(node)
        if problem:
            return problem
    return None


def _symbolic_node_problem(node: ast.AST) -> str | None:
    if isinstance(node, ast.BinOp):
        if not isinstance(node.op, _SYMBOLIC_OPS):
            return f"operator {type(node.op).__name__} is not allowed"
        if isinstance(node.op, ast.Pow):
            return _power_problem(node)
        return None
    if isinstance(node, ast.Call):
        ok = isinstance(node.func, ast.Name) and node.func.id in SYMBOLIC_FUNCTIONS
        return None if ok and not node.keywords else "only calls of common math functions are allowed"
    if isinstance(node, ast.Name):
        plain = node.id.isascii() and node.id.isalnum() and len(node.id) <= 16
        return (
            None
            if plain and (node.id in SYMBOLIC_FUNCTIONS or not hasattr(builtins, node.id))
            else f"name {node.id!r}"
        )
    if isinstance(node, ast.Constant):
        ok = type(node.value) in (int, float) and len(str(node.value)) <= 15
        return None if ok else "only numbers of at most 15 characters"
    if isinstance(node, ast.UnaryOp):
        return (
            None if isinstance(node.op, (ast.USub, ast.UAdd)) else f"{type(node.op).__name__} is not allowed"
        )
    if isinstance(node, (ast.expr_context, ast.operator, ast.unaryop)):
        return None  # operator tokens are checked with their BinOp / UnaryOp
    return f"{type(node).__name__} is not allowed"


def _power_problem(node: ast.BinOp) -> str | None:
    if any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.Pow) for n in ast.walk(node.left)):
        return "a power of a power is not allowed"
    limits = Limits(
        binary_ops=frozenset({ast.Div}), unary_ops=frozenset({ast.USub, ast.UAdd}), max_literal_digits=6
    )
    try:
        exponent = evaluate(parse_expression(ast.unparse(node.right), limits), limits)
    except UnsafeExpression:
        return "an exponent must be a number (or a fraction of numbers)"
    return None if abs(exponent) <= _MAX_EXPONENT else f"an exponent above {_MAX_EXPONENT}"
