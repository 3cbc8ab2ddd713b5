"""The sizes ``main`` passes to the ported function, when they are compile-time constants.

Internal helper of :mod:`cudaperf_cli.problems.c`.  ``main``'s statements are walked in
order up to the first call of the function, tracking integer variables whose value is a
constant (``int n = N;``, ``m = n * 2;``, ``steps += 10;``); anything else that changes a
variable (a call taking its address, a loop assigning it, ``atoi(argv[1])``) forgets it.
"""

from __future__ import annotations

from ..core import Param, ScalarKind, ScalarParam, eval_int_expr
from . import _csyntax as syn


def sizes_from_main(
    params: list[Param],
    main: syn.FunctionInfo | None,
    fn: syn.FunctionInfo,
    root: syn.Node,
    funcs: list[syn.FunctionInfo],
) -> dict[str, int]:
    """Sizes that ``main`` passes to the function as compile-time constants."""
    if main is None:
        return {}
    calls = syn.calls_to(main.body, fn.name)
    if not calls:
        return {}
    call = calls[0]
    env = _env_before(main.body, call, _global_constants(root, funcs))
    args_node = call.child_by_field_name("arguments")
    args = [a for a in args_node.named_children if a.type != "comment"] if args_node else []
    out: dict[str, int] = {}
    for i, p in enumerate(params):
        if isinstance(p, ScalarParam) and p.kind is ScalarKind.SIZE and i < len(args):
            value = syn.const_int(args[i], env)
            if value is not None:
                out[p.name] = value
    return out


def _global_constants(root: syn.Node, funcs: list[syn.FunctionInfo]) -> dict[str, int]:
    """File-scope integer variables with a constant initialiser that no function changes."""
    changed: set[str] = set()
    for f in funcs:
        changed |= syn.modified_names(f.body)
    env: dict[str, int] = {}
    for node in root.named_children:
        if node.type == "declaration":
            _apply_declaration(node, env)
    return {k: v for k, v in env.items() if k not in changed}


def _apply_declaration(decl: syn.Node, env: dict[str, int]) -> None:
    for name in syn.modified_names(decl):
        env.pop(name, None)
    for d in decl.children_by_field_name("declarator"):
        if d.type == "init_declarator":
            target = d.child_by_field_name("declarator")
            name = syn.text_of(target)
            value = syn.const_int(d.child_by_field_name("value"), env)
            if target is not None and target.type == "identifier" and value is not None:
                env[name] = value
                continue
            env.pop(name, None)
        elif d.type == "identifier":
            env.pop(syn.text_of(d), None)


_COMPOUND_OPS = {"+=": "+", "-=": "-", "*=": "*", "/=": "/", "%=": "%", "<<=": "<<", ">>=": ">>"}


def _apply_statement(stmt: syn.Node, env: dict[str, int]) -> None:
    """Update the constant environment for one statement of main."""
    if stmt.type == "declaration":
        _apply_declaration(stmt, env)
        return
    if stmt.type == "expression_statement" and stmt.named_children:
        expr = stmt.named_children[0]
        if expr.type == "assignment_expression":
            left = expr.child_by_field_name("left")
            op = syn.text_of(expr.child_by_field_name("operator"))
            right = expr.child_by_field_name("right")
            if left is not None and left.type == "identifier" and right is not None:
                name = syn.text_of(left)
                value = syn.const_int(right, env)
                if value is not None and op in _COMPOUND_OPS:
                    value = _compound(env.get(name), _COMPOUND_OPS[op], value)
                for other in syn.modified_names(right):
                    env.pop(other, None)
                if value is not None and op in ("=", *_COMPOUND_OPS):
                    env[name] = value
                else:
                    env.pop(name, None)
                return
    for name in syn.modified_names(stmt):
        env.pop(name, None)


def _compound(old: int | None, op: str, value: int) -> int | None:
    if old is None:
        return None
    try:
        return eval_int_expr(f"a {op} b", {"a": old, "b": value})
    except ValueError:
        return None


def _env_before(block: syn.Node, call: syn.Node, env: dict[str, int]) -> dict[str, int]:
    """Constants known right before ``call``, walking ``block``'s statements in order."""
    env = dict(env)
    for stmt in block.named_children:
        if stmt.start_byte <= call.start_byte and call.end_byte <= stmt.end_byte:
            if stmt.type == "compound_statement":
                return _env_before(stmt, call, env)
            if stmt.type not in ("expression_statement", "declaration", "return_statement"):
                for name in syn.modified_names(stmt):  # the call sits in a loop or branch
                    env.pop(name, None)
            return env
        _apply_statement(stmt, env)
    return env
