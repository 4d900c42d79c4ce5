"""Bounded evaluation of model-written expressions: a whitelisted `ast` walk, never eval/exec.

A completion is untrusted text: `9**9**9**9` or `'a'*10**10` passed to eval() hangs or exhausts memory,
and `__import__('os')...` runs code. Here the input length is capped before parsing, the tree may hold
only the node types a caller allows, its size and depth are capped, literals are capped in digits,
and every intermediate value is capped in magnitude, so the work is bounded for any input.
"""

from __future__ import annotations

import ast
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
