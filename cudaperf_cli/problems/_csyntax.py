"""tree-sitter-c helpers for :mod:`cudaperf_cli.problems.c`.

Everything here works on the *preprocessed* text of a problem file (see
:mod:`cudaperf_cli.problems._cpp`): function definitions, their parameters' declarators,
loops, ``#pragma scop``, the comments just above a function, constant folding of integer
expressions, and the names a statement may modify.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Iterator, Mapping

import tree_sitter
import tree_sitter_c

from ..core import C_TYPE_TO_DTYPE, _c_div, _c_rem, normalize_ctype

Node = tree_sitter.Node

LOOP_TYPES = frozenset({"for_statement", "while_statement", "do_statement"})


@lru_cache(maxsize=1)
def _parser() -> tree_sitter.Parser:
    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_c.language()))


def parse(text: str) -> tree_sitter.Tree:
    """Parse C text with tree-sitter-c."""
    return _parser().parse(text.encode("utf-8"))


def text_of(node: Node | None) -> str:
    """Source text of a node ('' for None)."""
    if node is None or node.text is None:
        return ""
    return node.text.decode("utf-8", errors="replace")


def walk(node: Node) -> Iterator[Node]:
    """All nodes of a subtree, in document order (the node itself first)."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(n.children))


def first_syntax_error(root: Node) -> Node | None:
    """The first ``ERROR`` or missing node of a tree, or None if it parsed cleanly."""
    if not root.has_error:
        return None
    for n in walk(root):
        if n.is_error or n.is_missing:
            return n
    return None


# ---------------------------------------------------------------------------------------
# Declarations
# ---------------------------------------------------------------------------------------


@dataclass
class ParamDecl:
    """One parameter as declared.

    Attributes:
        name: its name ('' if unnamed).
        type_text: the declared base type, qualifiers dropped (``double``, ``unsigned int``).
        const: the pointed-to / element data is ``const``.
        dims: one entry per array dimension, outermost first; the extent expression
            text, or ``None`` where unknown (a pointer, or ``[]``).  Empty for a scalar.
        problem: why the declarator is not supported (pointer to pointer...), or None.
        node: the ``parameter_declaration`` node.
        written_type: the type name as written when it is a typedef name (``base``), whose
            resolution ``type_text`` holds (``char``); ``""`` when written as ``type_text``.
    """

    name: str
    type_text: str
    const: bool
    dims: tuple[str | None, ...]
    problem: str | None
    node: Node
    written_type: str = ""

    @property
    def is_scalar(self) -> bool:
        return not self.dims and self.problem is None


@dataclass
class FunctionInfo:
    """A function definition of the user's file."""

    name: str
    node: Node
    is_static: bool
    return_type: str  #: e.g. ``void``, ``double``, ``double *``
    params: list[ParamDecl]
    variadic: bool
    body: Node
    comments: list[Node] = field(default_factory=list)  #: comments right above it

    @property
    def returns_void(self) -> bool:
        return self.return_type == "void"

    @property
    def has_loop(self) -> bool:
        return any(n.type in LOOP_TYPES for n in walk(self.body))

    @property
    def has_scop(self) -> bool:
        for n in walk(self.body):
            if n.type == "preproc_call":
                directive = text_of(n.child_by_field_name("directive")).strip()
                arg = text_of(n.child_by_field_name("argument")).split()
                if directive == "#pragma" and arg[:1] == ["scop"]:
                    return True
        return False


def _function_declarator(decl: Node | None) -> tuple[Node | None, int]:
    """The ``function_declarator`` inside a declarator and the number of ``*`` around it."""
    stars = 0
    while decl is not None and decl.type != "function_declarator":
        if decl.type == "pointer_declarator":
            stars += 1
        if decl.type in ("pointer_declarator", "parenthesized_declarator", "attributed_declarator"):
            decl = decl.child_by_field_name("declarator") or (
                decl.named_children[0] if decl.named_children else None
            )
        else:
            return None, stars
    return decl, stars


def _has_qualifier(node: Node, word: str) -> bool:
    return any(c.type == "type_qualifier" and text_of(c) == word for c in node.children)


# ---------------------------------------------------------------------------------------
# Typedefs
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Typedef:
    """One file-scope ``typedef`` name (from the file or a header it includes).

    Attributes:
        name: the new type name (``base`` for ``typedef char base;``).
        type_text: the type it names, normalised (``char``, ``unsigned long``, another
            typedef name, ``struct pt``).
        const: ``const`` is among its specifiers (``typedef const double cd;``).
        dims: its declarator's pointer/array operators, outermost first, as
            ``("pointer", None)`` / ``("array", "10")``; empty for a plain alias.
        problem: why it cannot be a parameter's type (a function type), or None.
    """

    name: str
    type_text: str
    const: bool = False
    dims: tuple[tuple[str, str | None], ...] = ()
    problem: str | None = None


_TYPE_NAME_LEAVES = ("type_identifier", "primitive_type", "identifier")


def _type_spelling(type_node: Node | None) -> str:
    """A type specifier's normalised spelling; a struct/union/enum by its tag only."""
    if type_node is None:
        return ""
    if type_node.type in ("struct_specifier", "union_specifier", "enum_specifier"):
        tag = type_node.child_by_field_name("name")
        kind = type_node.type.split("_")[0]
        return f"{kind} {text_of(tag)}" if tag is not None else f"anonymous {kind}"
    return normalize_ctype(text_of(type_node))


def collect_typedefs(root: Node) -> dict[str, Typedef]:
    """The file-scope typedefs of a translation unit, by name (``typedef char base;``)."""
    out: dict[str, Typedef] = {}
    for node in root.named_children:  # file scope only: a typedef in a body is local
        if node.type != "type_definition":
            continue
        type_text = _type_spelling(node.child_by_field_name("type"))
        const = _has_qualifier(node, "const")
        for decl in node.children_by_field_name("declarator"):
            inside_out: list[tuple[str, str | None]] = []
            problem: str | None = None
            name = ""
            while decl is not None:
                if decl.type in _TYPE_NAME_LEAVES:
                    name = text_of(decl)
                    break
                if decl.type == "array_declarator":
                    size = decl.child_by_field_name("size")
                    inside_out.append(("array", " ".join(text_of(size).split()) or None))
                elif decl.type == "pointer_declarator":
                    inside_out.append(("pointer", None))
                elif decl.type == "function_declarator":
                    problem = "a function type"
                elif decl.type != "parenthesized_declarator":
                    problem = f"an unsupported declarator '{text_of(decl)}'"
                nxt = decl.child_by_field_name("declarator")
                if nxt is None:
                    nxt = next((c for c in decl.named_children if c.type.endswith("declarator")
                                or c.type in _TYPE_NAME_LEAVES), None)
                decl = nxt
            if name:
                out[name] = Typedef(name, type_text, const, tuple(reversed(inside_out)), problem)
    return out


def resolve_typedef(
    type_text: str, typedefs: Mapping[str, Typedef], const: bool = False
) -> tuple[str, bool, tuple[tuple[str, str | None], ...], str | None]:
    """Follow a chain of typedef names to the type they stand for.

    A name cudaperf knows as an element type (``int32_t``, ``size_t``) is not followed.
    ``const`` says the declaration's own specifiers are ``const`` (``const T x``); a
    ``const`` reaches the element type unless it qualifies a pointer typedef
    (``typedef double *dp; const dp x;`` is a const pointer to non-const data), as in C.

    Returns:
        ``(type_text, const, dims, problem)``: the base type's normalised spelling, whether
        the elements are ``const``, the pointer/array operators the chain adds (outermost
        first, to be placed after the declarator's own), and why the chain cannot be a
        parameter's type (a function type, a cycle) or None.
    """
    dims: tuple[tuple[str, str | None], ...] = ()
    seen: set[str] = set()
    while type_text in typedefs and type_text not in C_TYPE_TO_DTYPE:
        if type_text in seen:
            return type_text, const, dims, f"the typedef '{type_text}' refers to itself"
        seen.add(type_text)
        td = typedefs[type_text]
        if td.problem is not None:
            return type_text, const, dims, f"'{td.name}' is a typedef of {td.problem}"
        if td.dims and td.dims[0][0] == "pointer":
            const = False  # a const on this name qualifies the pointer, not the data
        const = const or td.const  # the typedef's own const qualifies what it names
        dims = dims + td.dims
        type_text = td.type_text
    return type_text, const, dims, None


def param_decl(node: Node, typedefs: Mapping[str, Typedef] | None = None) -> ParamDecl:
    """Describe one ``parameter_declaration`` node; a typedef name in ``typedefs`` is
    resolved to its base type (``base`` -> ``char``), its pointer/array operators added."""
    type_text = normalize_ctype(text_of(node.child_by_field_name("type")))
    const = _has_qualifier(node, "const")
    written = ""
    td_dims: tuple[tuple[str, str | None], ...] = ()
    td_problem: str | None = None
    if typedefs and type_text in typedefs and type_text not in C_TYPE_TO_DTYPE:
        written = type_text
        type_text, const, td_dims, td_problem = resolve_typedef(type_text, typedefs, const)
    # Walk the declarator from the outside in; C reads it inside out, so the operator
    # nearest the name is the outermost dimension: reverse at the end.
    dims_inside_out: list[tuple[str, str | None]] = []  # (kind, extent)
    problem: str | None = None
    name = ""
    decl = node.child_by_field_name("declarator")
    while decl is not None:
        kind = decl.type
        if kind == "identifier":
            name = text_of(decl)
            break
        if kind == "array_declarator":
            size = decl.child_by_field_name("size")
            dims_inside_out.append(("array", " ".join(text_of(size).split()) or None))
        elif kind == "pointer_declarator":
            dims_inside_out.append(("pointer", None))
        elif kind == "function_declarator":
            problem = "function pointer parameters are not supported"
        elif kind != "parenthesized_declarator":
            problem = f"unsupported declarator '{text_of(decl)}'"
        nxt = decl.child_by_field_name("declarator")
        if nxt is None:
            nxt = next((c for c in decl.named_children if c.type.endswith("declarator")
                        or c.type == "identifier"), None)
        decl = nxt
    operators = list(reversed(dims_inside_out)) + list(td_dims)  # outermost first
    kinds = [k for k, _ in operators]
    if problem is None and td_problem is not None:
        problem = td_problem
    if problem is None and "pointer" in kinds[1:]:
        problem = (
            "pointers to pointers and arrays of pointers are not supported: "
            "pass one contiguous array (a flat pointer or a C99 array)"
        )
    dims = tuple(e for _, e in operators)
    return ParamDecl(name, type_text, const, dims, problem, node, written)


def function_info(
    node: Node, typedefs: Mapping[str, Typedef] | None = None
) -> FunctionInfo | None:
    """Describe a ``function_definition`` node (None if it has no recognisable name);
    typedef names of its parameters (and a plain alias as return type) are resolved
    through ``typedefs`` (see :func:`collect_typedefs`)."""
    fdecl, stars = _function_declarator(node.child_by_field_name("declarator"))
    if fdecl is None:
        return None
    name_node = fdecl.child_by_field_name("declarator")
    if name_node is None or name_node.type != "identifier":
        return None
    params: list[ParamDecl] = []
    variadic = False
    plist = fdecl.child_by_field_name("parameters")
    for child in plist.named_children if plist is not None else []:
        if child.type == "variadic_parameter":
            variadic = True
        elif child.type == "parameter_declaration":
            p = param_decl(child, typedefs)
            if not (p.name == "" and p.type_text == "void" and not p.dims):
                params.append(p)
    is_static = any(
        c.type == "storage_class_specifier" and text_of(c) == "static" for c in node.children
    )
    ret = normalize_ctype(text_of(node.child_by_field_name("type")))
    if typedefs and ret in typedefs and ret not in C_TYPE_TO_DTYPE:
        base, _, td_dims, td_problem = resolve_typedef(ret, typedefs)
        if td_problem is None:
            ret, stars = base, stars + len(td_dims)  # a void alias stays void
    ret += " " + "*" * stars if stars else ""
    comments: list[Node] = []
    prev = node.prev_sibling
    while prev is not None and prev.type == "comment":
        comments.insert(0, prev)
        prev = prev.prev_sibling
    return FunctionInfo(
        name=text_of(name_node),
        node=node,
        is_static=is_static,
        return_type=ret,
        params=params,
        variadic=variadic,
        body=node.child_by_field_name("body"),
        comments=comments,
    )


def prototype_comments(root: Node, name: str) -> list[Node]:
    """Comments right above top-level prototypes (declarations) of function ``name``."""
    found: list[Node] = []
    for node in root.named_children:
        if node.type != "declaration":
            continue
        for d in node.children_by_field_name("declarator"):
            fdecl, _ = _function_declarator(d)
            if fdecl is not None and text_of(fdecl.child_by_field_name("declarator")) == name:
                prev = node.prev_sibling
                block: list[Node] = []
                while prev is not None and prev.type == "comment":
                    block.insert(0, prev)
                    prev = prev.prev_sibling
                found.extend(block)
    return found


# ---------------------------------------------------------------------------------------
# Expressions
# ---------------------------------------------------------------------------------------


def _int_literal(text: str) -> int | None:
    t = text.rstrip("uUlL")
    try:
        if t.lower().startswith("0x"):
            return int(t, 16)
        if t.lower().startswith("0b"):
            return int(t, 2)
        if len(t) > 1 and t.startswith("0") and t.isdigit():
            return int(t, 8)
        return int(t, 10)
    except ValueError:
        return None


def const_int(node: Node | None, env: Mapping[str, int]) -> int | None:
    """Fold an integer expression node to its value, or None if it is not constant.

    Handles integer literals, names in ``env``, parentheses, casts to integer types, unary
    ``+ -`` and binary ``+ - * / % << >>`` with C truncating division.
    """
    if node is None:
        return None
    kind = node.type
    if kind == "number_literal":
        return _int_literal(text_of(node))
    if kind == "identifier":
        return env.get(text_of(node))
    if kind == "parenthesized_expression":
        inner = [c for c in node.named_children if c.type != "comment"]
        return const_int(inner[0], env) if len(inner) == 1 else None
    if kind == "cast_expression":
        target = normalize_ctype(text_of(node.child_by_field_name("type")))
        if target in ("float", "double", "long double"):
            return None
        return const_int(node.child_by_field_name("value"), env)
    if kind == "unary_expression":
        op = text_of(node.child_by_field_name("operator"))
        v = const_int(node.child_by_field_name("argument"), env)
        if v is None or op not in ("-", "+"):
            return None
        return -v if op == "-" else v
    if kind == "binary_expression":
        op = text_of(node.child_by_field_name("operator"))
        a = const_int(node.child_by_field_name("left"), env)
        b = const_int(node.child_by_field_name("right"), env)
        if a is None or b is None:
            return None
        try:
            if op == "+":
                return a + b
            if op == "-":
                return a - b
            if op == "*":
                return a * b
            if op == "/":
                return _c_div(a, b)
            if op == "%":
                return _c_rem(a, b)
            if op == "<<":
                return a << b
            if op == ">>":
                return a >> b
        except (ZeroDivisionError, ValueError):
            return None
    return None


def identifiers_in(node: Node) -> list[str]:
    """Names used as plain identifiers in a subtree (document order, repeated)."""
    return [text_of(n) for n in walk(node) if n.type == "identifier"]


def modified_names(node: Node) -> set[str]:
    """Names a subtree may change: assigned, incremented, or whose address is taken."""
    out: set[str] = set()
    for n in walk(node):
        target: Node | None = None
        if n.type == "assignment_expression":
            target = n.child_by_field_name("left")
        elif n.type == "update_expression":
            target = n.child_by_field_name("argument")
        elif n.type == "pointer_expression" and text_of(n.child_by_field_name("operator")) == "&":
            target = n.child_by_field_name("argument")
        while target is not None and target.type == "parenthesized_expression":
            target = target.named_children[0] if target.named_children else None
        if target is not None and target.type == "identifier":
            out.add(text_of(target))
    return out


def root_name(expr: Node | None) -> str | None:
    """The variable an lvalue is rooted at: ``A`` for ``A[i][j]``, ``*p``, ``(x)[0]``..."""
    while expr is not None:
        if expr.type == "identifier":
            return text_of(expr)
        if expr.type == "subscript_expression":
            expr = expr.child_by_field_name("argument")
        elif expr.type == "pointer_expression":
            if text_of(expr.child_by_field_name("operator")) != "*":
                return None
            expr = expr.child_by_field_name("argument")
        elif expr.type in ("parenthesized_expression", "cast_expression"):
            expr = expr.child_by_field_name("value") or (
                expr.named_children[-1] if expr.named_children else None
            )
        elif expr.type == "binary_expression":  # *(p + i)
            left = expr.child_by_field_name("left")
            expr = left
        else:
            return None
    return None


def written_names(body: Node) -> set[str]:
    """Variables a function body may write through: ``A[i] = ..``, ``*p += ..``, ``f(A)``.

    A name passed bare (or cast) as a call argument counts as written, since the callee
    may write through it.
    """
    out: set[str] = set()
    for n in walk(body):
        if n.type == "assignment_expression":
            left = n.child_by_field_name("left")
            if left is not None and left.type != "identifier":
                name = root_name(left)
                if name:
                    out.add(name)
        elif n.type == "update_expression":
            arg = n.child_by_field_name("argument")
            if arg is not None and arg.type != "identifier":
                name = root_name(arg)
                if name:
                    out.add(name)
        elif n.type == "call_expression":
            args = n.child_by_field_name("arguments")
            for a in args.named_children if args is not None else []:
                while a.type in ("parenthesized_expression", "cast_expression"):
                    a = a.child_by_field_name("value") or a.named_children[-1]
                if a.type == "identifier":
                    out.add(text_of(a))
    return out


def calls_to(node: Node, name: str) -> list[Node]:
    """``call_expression`` nodes calling ``name`` directly, in document order."""
    return [
        n
        for n in walk(node)
        if n.type == "call_expression" and text_of(n.child_by_field_name("function")) == name
    ]


def loop_bounds(body: Node) -> dict[str, Node]:
    """Loop variable -> upper-bound expression, from ``for (i = ..; i < B; ..)`` loops."""
    out: dict[str, Node] = {}
    for n in walk(body):
        if n.type != "for_statement":
            continue
        cond = n.child_by_field_name("condition")
        if cond is None or cond.type != "binary_expression":
            continue
        op = text_of(cond.child_by_field_name("operator"))
        left, right = cond.child_by_field_name("left"), cond.child_by_field_name("right")
        if op in ("<", "<=") and left is not None and left.type == "identifier":
            out.setdefault(text_of(left), right)
        elif op in (">", ">=") and right is not None and right.type == "identifier":
            out.setdefault(text_of(right), left)
    return out


def subscript_chains(body: Node, name: str) -> list[list[Node]]:
    """For every outermost ``name[a][b]...`` in a body, its index nodes (outermost first)."""
    chains: list[list[Node]] = []
    for n in walk(body):
        if n.type != "subscript_expression":
            continue
        parent = n.parent
        if parent is not None and parent.type == "subscript_expression" and (
            parent.child_by_field_name("argument") == n
        ):
            continue  # not the outermost subscript of its chain
        idx: list[Node] = []
        cur: Node | None = n
        while cur is not None and cur.type == "subscript_expression":
            index = cur.child_by_field_name("index")
            if index is None:  # tree-sitter-c >= 0.23 wraps it
                index = next((c for c in cur.named_children if c.type == "subscript_argument_list"), None)
            if index is not None:
                idx.insert(0, index)
            cur = cur.child_by_field_name("argument")
        if cur is not None and cur.type == "identifier" and text_of(cur) == name:
            chains.append(idx)
    return chains
