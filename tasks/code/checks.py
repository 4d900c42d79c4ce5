"""A problem's tests as checks the sandbox can run without trusting the completion's process.

A test is an assert statement. `assert CALL == LITERAL` (either side literal) becomes the probe CALL,
evaluated in the sandbox, and the expected LITERAL, kept here: the completion's process never sees the
expected value, so it cannot forge a pass; the reply, repr(value), is read back with
ast.literal_eval and compared here. Any other assert becomes a truth check: the probe is the whole
condition (`not X` probes X and expects a false value). A truth check's probe holds everything it
compares, so a hostile completion could forge it: docs/tasks.md says so; the shipped set uses `==` only.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

TRUE, FALSE = "truthy", "falsy"  # the `expect` of a truth check
_NO_LITERAL = object()


@dataclass(frozen=True)
class Check:
    probe: str  # expression evaluated after the completion's code
    expected: Any  # a literal value, or with `expect` set, unused
    expect: str = "equal"  # "equal", TRUE or FALSE


def _literal(node: ast.expr) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _NO_LITERAL


def parse_check(test: str) -> Check:
    """The Check of one `assert ...` statement (ValueError naming the test when it is not one)."""
    try:
        tree = ast.parse(test.strip())
    except SyntaxError as exc:
        raise ValueError(f"test {test!r} is not valid Python ({exc.msg})") from None
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Assert):
        raise ValueError(f"test {test!r} is not one assert statement; write it as 'assert f(x) == expected'")
    condition = tree.body[0].test
    if (
        isinstance(condition, ast.Compare)
        and len(condition.ops) == 1
        and isinstance(condition.ops[0], ast.Eq)
    ):
        left, right = condition.left, condition.comparators[0]
        for probe, literal in ((left, right), (right, left)):
            value = _literal(literal)
            if value is not _NO_LITERAL and _literal(probe) is _NO_LITERAL:
                return Check(ast.unparse(probe), value)
    if isinstance(condition, ast.UnaryOp) and isinstance(condition.op, ast.Not):
        return Check(ast.unparse(condition.operand), None, FALSE)
    return Check(ast.unparse(condition), None, TRUE)


def passed(check: Check, outcome: dict) -> bool:
    """Whether the harness's outcome for this check's probe satisfies it."""
    if outcome.get("status") != "value":
        return False
    try:
        value = ast.literal_eval(str(outcome.get("value", "")))
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    if check.expect == TRUE:
        return bool(value)
    if check.expect == FALSE:
        return not value
    try:
        return bool(value == check.expected)  # literals on both sides: Python's own ==, as the assert
    except RecursionError:
        return False


def checks_from_humaneval(test: str, entry_point: str) -> list[str]:
    """The asserts of a HumanEval-style `def check(candidate): ...` as stand-alone tests calling `entry_point`."""
    tree = ast.parse(test)
    check = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"), None)
    if check is None:
        raise ValueError("test has no 'def check(candidate):'")
    argument = check.args.args[0].arg if check.args.args else "candidate"

    class Rename(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.Name:
            return ast.copy_location(ast.Name(entry_point, node.ctx), node) if node.id == argument else node

    return [ast.unparse(Rename().visit(node)) for node in check.body if isinstance(node, ast.Assert)]
