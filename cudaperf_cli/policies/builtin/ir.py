"""A small loop-nest IR of one C function body, built from tree-sitter-c.

The IR keeps exactly what the built-in policy reasons about and regenerates:

* expressions (:class:`Expr` subclasses) are a faithful tree of the C expression; the only
  node with meaning beyond syntax is :class:`Index` (an access ``A[e1][e2]`` or ``*p`` to an
  array parameter, with one subscript per declared dimension);
* statements (:class:`Stmt` subclasses): declarations of local scalars, assignments
  (``=``, compound ``+=`` ..., ``++``/``--``), ``if``/``else``, ``for`` loops, jumps, and
  bare expression statements (calls).

``for`` loops are recognised as *canonical* when the header is ``v = first; v <op> bound;``
with a unit step (``++``, ``--``, ``+= 1``, ``-= 1``, ``v = v + 1``...) in the direction of
the comparison; other ``for`` headers are kept (they can still run sequentially inside a
thread) with the reason they are not canonical.  ``while``, ``do``, ``switch``, labels,
local arrays and pointers, struct members, assignments inside expressions and the like make
the whole function unsupported (:class:`~cudaperf_cli.policies.base.PolicyRefusal`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import tree_sitter
import tree_sitter_c

from cudaperf_cli.core import ArrayParam, CProblem, ScalarParam, normalize_ctype
from cudaperf_cli.policies.base import PolicyRefusal

# ---------------------------------------------------------------------------------------
# Expressions
# ---------------------------------------------------------------------------------------


class Expr:
    """Base class of expression nodes (immutable)."""


@dataclass(frozen=True)
class Name(Expr):
    """A scalar identifier (parameter, local, loop index)."""

    name: str


@dataclass(frozen=True)
class Const(Expr):
    """A literal, kept exactly as written (``1.0f``, ``2``, ``'a'``, ``0x10u``)."""

    text: str


@dataclass(frozen=True)
class Index(Expr):
    """An element of an array parameter: ``A[i][j]`` (``subs=(i, j)``) or ``*p`` (``(0,)``).

    ``text`` is the access as written in the C source (for messages).
    """

    array: str
    subs: tuple[Expr, ...]
    text: str = field(default="", compare=False)


@dataclass(frozen=True)
class Unary(Expr):
    """A prefix operator: ``-x``, ``+x``, ``!x``, ``~x``."""

    op: str
    operand: Expr


@dataclass(frozen=True)
class Binary(Expr):
    """An infix operator (arithmetic, comparison, logical, bitwise)."""

    op: str
    left: Expr
    right: Expr


@dataclass(frozen=True)
class Ternary(Expr):
    """``cond ? then : other``."""

    cond: Expr
    then: Expr
    other: Expr


@dataclass(frozen=True)
class Call(Expr):
    """A call ``func(args...)`` of a named function."""

    func: str
    args: tuple[Expr, ...]


@dataclass(frozen=True)
class Cast(Expr):
    """``(ctype)operand``."""

    ctype: str
    operand: Expr


@dataclass(frozen=True)
class Paren(Expr):
    """Parentheses as written (kept so that regenerated code parses the same way)."""

    inner: Expr


@dataclass(frozen=True)
class Raw(Expr):
    """Opaque text that evaluates nothing at run time (``sizeof(double)``)."""

    text: str


def children(e: Expr) -> tuple[Expr, ...]:
    """Direct sub-expressions of ``e``."""
    if isinstance(e, Index):
        return e.subs
    if isinstance(e, Unary):
        return (e.operand,)
    if isinstance(e, Binary):
        return (e.left, e.right)
    if isinstance(e, Ternary):
        return (e.cond, e.then, e.other)
    if isinstance(e, Call):
        return e.args
    if isinstance(e, Cast):
        return (e.operand,)
    if isinstance(e, Paren):
        return (e.inner,)
    return ()


def iter_expr(e: Expr) -> Iterator[Expr]:
    """``e`` and all its sub-expressions, pre-order."""
    yield e
    for c in children(e):
        yield from iter_expr(c)


def names_in(e: Expr | None) -> set[str]:
    """Scalar identifiers read by ``e`` (array names and called function names excluded)."""
    if e is None:
        return set()
    return {x.name for x in iter_expr(e) if isinstance(x, Name)}


def strip_parens(e: Expr) -> Expr:
    """``e`` without enclosing parentheses."""
    while isinstance(e, Paren):
        e = e.inner
    return e


class Printer:
    """Prints expressions back as C.  Subclasses override :meth:`index`, :meth:`call`,
    :meth:`name` to rewrite array accesses, calls or identifiers."""

    def expr(self, e: Expr) -> str:
        """C text of ``e``."""
        if isinstance(e, Name):
            return self.name(e)
        if isinstance(e, Const):
            return e.text
        if isinstance(e, Raw):
            return e.text
        if isinstance(e, Index):
            return self.index(e)
        if isinstance(e, Unary):
            inner = self.expr(e.operand)
            sep = " " if inner[:1] in ("-", "+") and e.op in ("-", "+") else ""
            return f"{e.op}{sep}{inner}"
        if isinstance(e, Binary):
            return f"{self.expr(e.left)} {e.op} {self.expr(e.right)}"
        if isinstance(e, Ternary):
            return f"{self.expr(e.cond)} ? {self.expr(e.then)} : {self.expr(e.other)}"
        if isinstance(e, Call):
            return self.call(e)
        if isinstance(e, Cast):
            return f"({e.ctype}){self.expr(e.operand)}"
        if isinstance(e, Paren):
            return f"({self.expr(e.inner)})"
        raise TypeError(f"not an expression: {e!r}")

    def name(self, e: Name) -> str:
        """C text of an identifier."""
        return e.name

    def index(self, e: Index) -> str:
        """C text of an array access (default: as written, ``A[i][j]``)."""
        return e.array + "".join(f"[{self.expr(s)}]" for s in e.subs)

    def call(self, e: Call) -> str:
        """C text of a call."""
        return f"{e.func}(" + ", ".join(self.expr(a) for a in e.args) + ")"


def c_text(e: Expr | None) -> str:
    """C text of an expression as written (no rewriting)."""
    return "" if e is None else Printer().expr(e)


# ---------------------------------------------------------------------------------------
# Affine forms (for subscripts and loop bounds)
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Affine:
    """``const + sum(coeff * term)`` with integer coefficients.

    A term is a symbol (``"i"``) or a product of symbols (``"i*m"``, factors sorted), so
    that flat subscripts such as ``i * m + j`` have a form too; "affine" is a slight
    misnomer for those.
    """

    coeffs: tuple[tuple[str, int], ...]  # sorted, no zero coefficients
    const: int

    @staticmethod
    def make(coeffs: dict[str, int], const: int) -> Affine:
        """Normalised form (sorted symbols, zero coefficients dropped)."""
        return Affine(tuple(sorted((k, v) for k, v in coeffs.items() if v != 0)), const)

    @property
    def symbols(self) -> set[str]:
        """Terms with a non-zero coefficient (``"i"``, ``"i*m"``)."""
        return {k for k, _ in self.coeffs}

    @property
    def variables(self) -> set[str]:
        """Every symbol that occurs, alone or in a product."""
        return {v for k, _ in self.coeffs for v in k.split("*")}

    def is_linear(self) -> bool:
        """No product terms."""
        return all("*" not in k for k, _ in self.coeffs)

    def __mul__(self, other: Affine) -> Affine | None:
        """The product, when it has terms of degree 2 at most; else None."""
        d: dict[str, int] = {}
        const = self.const * other.const
        terms_a = [*self.coeffs, ("", self.const)]
        terms_b = [*other.coeffs, ("", other.const)]
        for ka, ca in terms_a:
            for kb, cb in terms_b:
                if not ka and not kb:
                    continue
                factors = sorted(f for f in (ka.split("*") if ka else []) + (kb.split("*") if kb else []))
                if len(factors) > 2:
                    return None
                key = "*".join(factors)
                d[key] = d.get(key, 0) + ca * cb
        return Affine.make(d, const)

    def coeff(self, sym: str) -> int:
        """Coefficient of ``sym`` (0 if absent)."""
        return dict(self.coeffs).get(sym, 0)

    def __add__(self, other: Affine) -> Affine:
        d = dict(self.coeffs)
        for k, v in other.coeffs:
            d[k] = d.get(k, 0) + v
        return Affine.make(d, self.const + other.const)

    def scale(self, k: int) -> Affine:
        """``k * self``."""
        return Affine.make({s: c * k for s, c in self.coeffs}, self.const * k)

    def __sub__(self, other: Affine) -> Affine:
        return self + other.scale(-1)

    def is_const(self) -> bool:
        """No symbols."""
        return not self.coeffs


def int_literal(text: str) -> int | None:
    """Value of a C integer literal (``10``, ``0x1F``, ``010``, ``5u``, ``-3``), else None."""
    t = text.strip()
    neg = t.startswith("-")
    if neg:
        t = t[1:].strip()
    t = re.sub(r"[uUlL]+$", "", t)
    try:
        if re.fullmatch(r"0[xX][0-9a-fA-F]+", t):
            v = int(t, 16)
        elif re.fullmatch(r"0[0-7]*", t):
            v = int(t, 8)
        elif re.fullmatch(r"[1-9][0-9]*", t):
            v = int(t)
        else:
            return None
    except ValueError:
        return None
    return -v if neg else v


def affine(e: Expr) -> Affine | None:
    """The affine form of an integer expression, or None when it is not affine."""
    e = strip_parens(e)
    if isinstance(e, Name):
        return Affine.make({e.name: 1}, 0)
    if isinstance(e, Const):
        v = int_literal(e.text)
        return None if v is None else Affine.make({}, v)
    if isinstance(e, Unary) and e.op in ("-", "+"):
        a = affine(e.operand)
        if a is None:
            return None
        return a.scale(-1) if e.op == "-" else a
    if isinstance(e, Binary) and e.op in ("+", "-"):
        a, b = affine(e.left), affine(e.right)
        if a is None or b is None:
            return None
        return a + b if e.op == "+" else a - b
    if isinstance(e, Binary) and e.op == "*":
        a, b = affine(e.left), affine(e.right)
        if a is None or b is None:
            return None
        if a.is_const():
            return b.scale(a.const)
        if b.is_const():
            return a.scale(b.const)
        return a * b
    if isinstance(e, Cast) and re.fullmatch(
        r"(unsigned |signed )?(int|long|long long|long int|long long int|size_t|"
        r"u?int(32|64)_t|ptrdiff_t)", e.ctype
    ):
        return affine(e.operand)
    return None


# ---------------------------------------------------------------------------------------
# Statements
# ---------------------------------------------------------------------------------------


@dataclass(eq=False)
class Stmt:
    """Base class of statements (compared by identity)."""

    line: int


@dataclass(eq=False)
class Decl(Stmt):
    """Declaration of one local scalar, ``ctype name [= init];``."""

    ctype: str
    name: str
    init: Expr | None = None


@dataclass(eq=False)
class Assign(Stmt):
    """``target op value;`` with op ``=``, a compound operator, or ``++``/``--`` (value None).

    ``prefix`` records ``++x`` versus ``x++`` (only for printing).
    """

    target: Name | Index
    op: str
    value: Expr | None = None
    prefix: bool = False

    @property
    def is_compound(self) -> bool:
        """The statement reads its target (``+=``, ``++``...)."""
        return self.op != "="


@dataclass(eq=False)
class If(Stmt):
    """``if (cond) then else orelse``."""

    cond: Expr
    then: list[Stmt]
    orelse: list[Stmt]


@dataclass(eq=False)
class Jump(Stmt):
    """``break``, ``continue``, ``return`` or ``goto``."""

    kind: str


@dataclass(eq=False)
class ExprStmt(Stmt):
    """A bare expression statement (in practice a call ``f(x);``)."""

    expr: Expr


@dataclass(eq=False)
class For(Stmt):
    """A ``for`` loop.

    Attributes:
        var: the index variable (None when the header assigns none).
        ctype: its type when declared in the header (``for (int i = ...``), else None.
        init, cond, update: the header as written (``init`` a :class:`Decl` or
            :class:`Assign`, ``update`` an :class:`Assign`), each possibly None.
        body: the statements of the body.
        canonical: the header is ``var = first; var cmp bound; unit step``.
        reason: why it is not canonical ('' when it is).
        first, cmp, bound, step: the canonical header: ``var`` takes ``first``,
            ``first + step``, ... while ``var cmp bound`` (``cmp`` written with ``var`` on
            the left; ``step`` is +1 or -1).
    """

    var: str | None
    ctype: str | None
    init: Stmt | None
    cond: Expr | None
    update: Assign | None
    body: list[Stmt]
    canonical: bool = False
    reason: str = ""
    first: Expr | None = None
    cmp: str = ""
    bound: Expr | None = None
    step: int = 0

    # -- derived forms of a canonical header ------------------------------------------

    def trip_text(self) -> str:
        """C text (``long long``) of the iteration count; may be <= 0 for an empty loop."""
        f, b = c_text(self.first), c_text(self.bound)
        if self.step > 0:
            extra = " + 1" if self.cmp == "<=" else ""
            return f"(long long)({b}) - (long long)({f}){extra}"
        extra = " + 1" if self.cmp == ">=" else ""
        return f"(long long)({f}) - (long long)({b}){extra}"

    def range_affine(self) -> tuple[Affine, Affine] | None:
        """(lowest, highest) value of ``var`` as affine forms, when both are affine."""
        f = affine(self.first) if self.first is not None else None
        b = affine(self.bound) if self.bound is not None else None
        if f is None or b is None:
            return None
        one = Affine.make({}, 1)
        if self.step > 0:
            last = b - one if self.cmp == "<" else b
            return f, last
        last = b + one if self.cmp == ">" else b
        return last, f

    def header_names(self) -> set[str]:
        """Scalars read by the bounds (``first`` and ``bound``), excluding ``var``."""
        return (names_in(self.first) | names_in(self.bound)) - {self.var or ""}


# ---------------------------------------------------------------------------------------
# Walking statements
# ---------------------------------------------------------------------------------------


def walk(stmts: Sequence[Stmt]) -> Iterator[Stmt]:
    """Every statement in ``stmts``, recursively, pre-order (loop headers not included)."""
    for s in stmts:
        yield s
        if isinstance(s, If):
            yield from walk(s.then)
            yield from walk(s.orelse)
        elif isinstance(s, For):
            yield from walk(s.body)


def own_exprs(s: Stmt) -> list[Expr]:
    """Expressions evaluated by ``s`` itself (not by nested statements)."""
    out: list[Expr] = []
    if isinstance(s, Decl):
        if s.init is not None:
            out.append(s.init)
    elif isinstance(s, Assign):
        out.append(s.target)
        if s.value is not None:
            out.append(s.value)
    elif isinstance(s, If):
        out.append(s.cond)
    elif isinstance(s, ExprStmt):
        out.append(s.expr)
    elif isinstance(s, For):
        for h in (s.init, s.update):
            if h is not None:
                out.extend(own_exprs(h))
        if s.cond is not None:
            out.append(s.cond)
    return out


def all_exprs(stmts: Sequence[Stmt]) -> Iterator[Expr]:
    """Every expression (and sub-expression) evaluated anywhere in ``stmts``."""
    for s in walk(stmts):
        for e in own_exprs(s):
            yield from iter_expr(e)


@dataclass(frozen=True)
class Access:
    """One array access in a statement list: ``write`` for assignment targets."""

    index: Index
    write: bool

    @property
    def array(self) -> str:
        """The array's name."""
        return self.index.array


def accesses(stmts: Sequence[Stmt]) -> list[Access]:
    """All array accesses in ``stmts`` (loop headers and conditions included)."""
    out: list[Access] = []
    for s in walk(stmts):
        for e in own_exprs(s):
            target = s.target if isinstance(s, Assign) else None
            if isinstance(s, For) and isinstance(s.init, Assign):
                target = None
            for x in iter_expr(e):
                if isinstance(x, Index):
                    out.append(Access(x, write=x is target))
    return out


def arrays_written(stmts: Sequence[Stmt]) -> set[str]:
    """Names of arrays assigned anywhere in ``stmts``."""
    return {a.array for a in accesses(stmts) if a.write}


def arrays_read(stmts: Sequence[Stmt]) -> set[str]:
    """Names of arrays read anywhere in ``stmts`` (compound targets count as reads)."""
    out: set[str] = set()
    for s in walk(stmts):
        if isinstance(s, Assign) and isinstance(s.target, Index) and s.is_compound:
            out.add(s.target.array)
    for a in accesses(stmts):
        if not a.write:
            out.add(a.array)
    return out


def stmt_writes(s: Stmt) -> set[str]:
    """Scalars written by ``s`` itself (for a loop: its index)."""
    if isinstance(s, Decl):
        return {s.name}
    if isinstance(s, Assign) and isinstance(s.target, Name):
        return {s.target.name}
    if isinstance(s, For):
        out: set[str] = set()
        for h in (s.init, s.update):
            if h is not None:
                out |= stmt_writes(h)
        return out
    return set()


def stmt_reads(s: Stmt) -> set[str]:
    """Scalars read by ``s`` itself (for a loop: its header)."""
    out: set[str] = set()
    if isinstance(s, Assign):
        if isinstance(s.target, Name):
            if s.is_compound:
                out.add(s.target.name)
        else:
            out |= names_in(s.target)
        out |= names_in(s.value)
        return out
    if isinstance(s, For):
        for h in (s.init, s.update):
            if h is not None:
                out |= stmt_reads(h)
        return out | names_in(s.cond)
    for e in own_exprs(s):
        out |= names_in(e)
    return out


def scalars_written(stmts: Sequence[Stmt]) -> set[str]:
    """Scalars written anywhere in ``stmts`` (declarations and loop indices included)."""
    out: set[str] = set()
    for s in walk(stmts):
        out |= stmt_writes(s)
    return out


def scalars_read(stmts: Sequence[Stmt]) -> set[str]:
    """Scalars read anywhere in ``stmts``."""
    out: set[str] = set()
    for s in walk(stmts):
        out |= stmt_reads(s)
    return out


def declared_in(stmts: Sequence[Stmt]) -> set[str]:
    """Scalars declared anywhere in ``stmts`` (header declarations included)."""
    out: set[str] = set()
    for s in walk(stmts):
        if isinstance(s, Decl):
            out.add(s.name)
        elif isinstance(s, For) and isinstance(s.init, Decl):
            out.add(s.init.name)
    return out


def calls_in(stmts: Sequence[Stmt]) -> list[Call]:
    """Every call expression in ``stmts``."""
    return [e for e in all_exprs(stmts) if isinstance(e, Call)]


def loops_in(stmts: Sequence[Stmt]) -> list[For]:
    """Every ``for`` loop in ``stmts`` (nested ones included), pre-order."""
    return [s for s in walk(stmts) if isinstance(s, For)]


def has_loop(stmts: Sequence[Stmt]) -> bool:
    """``stmts`` contain a ``for`` loop."""
    return any(isinstance(s, For) for s in walk(stmts))


def own_jumps(stmts: Sequence[Stmt]) -> list[Jump]:
    """``break``/``continue`` that belong to the loop whose body is ``stmts`` (not to a
    nested loop), plus every ``return``/``goto`` anywhere."""
    out: list[Jump] = []

    def visit(ss: Sequence[Stmt], nested: bool) -> None:
        for s in ss:
            if isinstance(s, Jump):
                if s.kind in ("return", "goto") or not nested:
                    out.append(s)
            elif isinstance(s, If):
                visit(s.then, nested)
                visit(s.orelse, nested)
            elif isinstance(s, For):
                visit(s.body, True)

    visit(stmts, False)
    return out


# ---------------------------------------------------------------------------------------
# Known side-effect-free functions
# ---------------------------------------------------------------------------------------

_DOUBLE_FUNCS = ["sqrt", "cbrt", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "fabs", "floor", "ceil", "round", "trunc", "rint", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "erf", "erfc", "tgamma", "lgamma", "pow", "atan2", "fmod", "fmin", "fmax", "hypot", "copysign", "fdim", "remainder", "fma"]

#: Side-effect-free math functions -> the C type of their parameters.  A call to any other
#: function makes the enclosing loops non-parallel.
MATH_FUNCS: dict[str, str] = {}
for _f in _DOUBLE_FUNCS:
    MATH_FUNCS[_f] = "double"
    MATH_FUNCS[_f + "f"] = "float"
MATH_FUNCS.update({"abs": "int", "labs": "long", "llabs": "long long"})
#: what gcc's <math.h> macros INFINITY, HUGE_VAL... expand to (no arguments)
MATH_FUNCS.update({"__builtin_inff": "", "__builtin_inf": "", "__builtin_huge_valf": "",
                   "__builtin_huge_val": ""})

#: C type of the value each known function returns.
MATH_RETURNS: dict[str, str] = {f: ("float" if t == "float" else "double") for f, t in MATH_FUNCS.items()}
MATH_RETURNS.update({"abs": "int", "labs": "long", "llabs": "long long", "__builtin_inff": "float",
                     "__builtin_huge_valf": "float", "__builtin_nanf": "float",
                     "__builtin_nan": "double"})

#: C++ keywords that are valid identifiers in C (the generated code is C++).
CXX_KEYWORDS = frozenset(
    ["alignas", "alignof", "and", "and_eq", "asm", "bitand", "bitor", "bool", "catch", "char16_t", "char32_t", "class", "compl", "concept", "const_cast", "consteval", "constexpr", "constinit", "decltype", "delete", "dynamic_cast", "explicit", "export", "false", "friend", "mutable", "namespace", "new", "noexcept", "not", "not_eq", "nullptr", "operator", "or", "or_eq", "private", "protected", "public", "reinterpret_cast", "requires", "static_assert", "static_cast", "template", "this", "thread_local", "throw", "true", "try", "typeid", "typename", "using", "virtual", "wchar_t", "xor", "xor_eq", "char8_t", "co_await", "co_return", "co_yield"]
)


# ---------------------------------------------------------------------------------------
# The function
# ---------------------------------------------------------------------------------------


@dataclass
class Function:
    """The IR of the function to port.

    Attributes:
        name: the C function name.
        body: its top-level statements (a trailing ``return;`` dropped).
        arrays: array parameters by name, and the local arrays (:attr:`local_arrays`).
        scalar_params: scalar parameters by name -> C type (normalised).
        locals: every local scalar (declared anywhere, loop headers included) -> C type.
        params: the parameters in order (from the problem).
        local_arrays: names of the arrays declared at the top of the body with constant
            extents (durbin's ``double z[N];``); they live in ``static __device__`` arrays.
    """

    name: str
    body: list[Stmt]
    arrays: dict[str, ArrayParam]
    scalar_params: dict[str, str]
    locals: dict[str, str]
    params: tuple
    local_arrays: tuple[str, ...] = ()

    def ctype_of(self, name: str) -> str | None:
        """C type of a scalar (parameter or local), None when unknown."""
        return self.scalar_params.get(name) or self.locals.get(name)

    def is_float(self) -> bool:
        """Some value of the function has type ``float`` (single precision is in play)."""
        types = [normalize_ctype(a.ctype) for a in self.arrays.values()]
        types += list(self.scalar_params.values()) + list(self.locals.values())
        return "float" in types

    def is_floating(self) -> bool:
        """Some value of the function has a floating-point type."""
        types = [normalize_ctype(a.ctype) for a in self.arrays.values()]
        types += list(self.scalar_params.values()) + list(self.locals.values())
        return any(t in ("float", "double", "long double") for t in types)


_LANGUAGE = tree_sitter.Language(tree_sitter_c.language())

_UNSUPPORTED_STMTS = {
    "while_statement": "'while' loops are not supported (version 1 handles for-loops)",
    "do_statement": "'do' loops are not supported (version 1 handles for-loops)",
    "switch_statement": "'switch' is not supported",
    "labeled_statement": "labels are not supported",
    "case_statement": "'switch' is not supported",
}

_SKIP_NODES = {"comment", "preproc_call", "{", "}", ";"}

#: The largest local array the generated code holds in a ``static __device__`` array.
LOCAL_ARRAY_BYTES = 256 << 20

_SIZES = {"char": 1, "signed char": 1, "unsigned char": 1, "short": 2, "unsigned short": 2,
          "int": 4, "unsigned int": 4, "unsigned": 4, "float": 4, "int32_t": 4, "uint32_t": 4}


class _Builder:
    def __init__(self, problem: CProblem, src: bytes):
        self.src = src
        self.arrays = {a.name: a for a in problem.arrays}
        self.scalar_params = {
            p.name: normalize_ctype(p.ctype) for p in problem.params if isinstance(p, ScalarParam)
        }
        self.locals: dict[str, str] = {}
        self.local_arrays: list[str] = []
        #: names declared in each open block, outermost first: the IR's scalar names are
        #: flat, so a declaration that shadows one still in scope is refused
        self.scopes: list[set[str]] = [set()]

    # -- helpers ------------------------------------------------------------------------

    def text(self, node: tree_sitter.Node) -> str:
        return self.src[node.start_byte : node.end_byte].decode("utf-8", "replace")

    def fail(self, node: tree_sitter.Node, what: str) -> PolicyRefusal:
        line = node.start_point[0] + 1
        snippet = " ".join(self.text(node).split())
        if len(snippet) > 60:
            snippet = snippet[:57] + "..."
        return PolicyRefusal(f"line {line} of the function ('{snippet}'): {what}")

    def declare(self, node: tree_sitter.Node, name: str, ctype: str) -> None:
        if name in CXX_KEYWORDS:
            raise self.fail(node, f"'{name}' is a C++ keyword (the generated code is CUDA C++)")
        if name in self.arrays or name in self.scalar_params:
            raise self.fail(node, f"local '{name}' shadows a parameter")
        old = self.locals.get(name)
        if old is not None and old != ctype:
            raise self.fail(node, f"'{name}' is declared with two types ({old}, {ctype})")
        if any(name in sc for sc in self.scopes):
            raise self.fail(node, f"'{name}' is declared again while an outer '{name}' is in "
                                  "scope (shadowing is not supported: the generated code's "
                                  "scalar names are flat)")
        self.scopes[-1].add(name)
        self.locals[name] = ctype

    # -- expressions --------------------------------------------------------------------

    def expr(self, node: tree_sitter.Node) -> Expr:
        t = node.type
        if t == "identifier":
            name = self.text(node)
            if name in self.arrays:
                raise self.fail(node, f"array '{name}' is used without subscripts")
            return Name(name)
        if t in ("number_literal", "char_literal", "true", "false"):
            return Const(self.text(node))
        if t == "parenthesized_expression":
            inner = [c for c in node.named_children if c.type != "comment"]
            if len(inner) != 1:
                raise self.fail(node, "unsupported parenthesised expression")
            return Paren(self.expr(inner[0]))
        if t == "binary_expression":
            op = self.text(node.child_by_field_name("operator"))
            return Binary(
                op,
                self.expr(node.child_by_field_name("left")),
                self.expr(node.child_by_field_name("right")),
            )
        if t == "unary_expression":
            op = self.text(node.child_by_field_name("operator"))
            return Unary(op, self.expr(node.child_by_field_name("argument")))
        if t == "pointer_expression":
            op = self.text(node.child_by_field_name("operator"))
            arg = node.child_by_field_name("argument")
            if op == "*" and arg.type == "identifier" and self.text(arg) in self.arrays:
                name = self.text(arg)
                if len(self.arrays[name].extents) != 1:
                    raise self.fail(node, f"'*{name}' on a multi-dimensional array")
                return Index(name, (Const("0"),), self.text(node))
            raise self.fail(node, "pointer operations other than '*p' are not supported")
        if t == "subscript_expression":
            subs: list[Expr] = []
            cur = node
            while cur.type == "subscript_expression":
                subs.append(self.expr(cur.child_by_field_name("index")))
                cur = cur.child_by_field_name("argument")
            if cur.type != "identifier" or self.text(cur) not in self.arrays:
                raise self.fail(node, "subscripts of something other than an array parameter")
            name = self.text(cur)
            subs.reverse()
            ndim = len(self.arrays[name].extents)
            if len(subs) != ndim:
                raise self.fail(
                    node, f"'{name}' has {ndim} dimension(s) but is used with {len(subs)} subscript(s)"
                )
            return Index(name, tuple(subs), self.text(node))
        if t == "call_expression":
            fn = node.child_by_field_name("function")
            if fn.type == "identifier" and self.text(fn) in ("__builtin_nan", "__builtin_nanf"):
                return Raw(" ".join(self.text(node).split()))  # NAN / NANF from <math.h>
            if fn.type != "identifier":
                raise self.fail(node, "calls through a function pointer are not supported")
            args = node.child_by_field_name("arguments")
            return Call(
                self.text(fn),
                tuple(self.expr(a) for a in args.named_children if a.type != "comment"),
            )
        if t == "cast_expression":
            ty = " ".join(self.text(node.child_by_field_name("type")).split())
            return Cast(ty, self.expr(node.child_by_field_name("value")))
        if t == "conditional_expression":
            return Ternary(
                self.expr(node.child_by_field_name("condition")),
                self.expr(node.child_by_field_name("consequence")),
                self.expr(node.child_by_field_name("alternative")),
            )
        if t == "sizeof_expression":
            if node.child_by_field_name("type") is None:
                raise self.fail(node, "sizeof of an expression is not supported")
            return Raw(" ".join(self.text(node).split()))
        if t in ("assignment_expression", "update_expression"):
            raise self.fail(node, "assignment inside an expression is not supported")
        if t == "comma_expression":
            raise self.fail(node, "comma expressions are not supported")
        if t == "field_expression":
            raise self.fail(node, "struct members are not supported")
        if t in ("string_literal", "concatenated_string"):
            raise self.fail(node, "string literals are not supported")
        raise self.fail(node, f"unsupported expression ({t})")

    def lvalue(self, node: tree_sitter.Node) -> Name | Index:
        if node.type == "identifier":
            name = self.text(node)
            if name in self.arrays:
                raise self.fail(node, f"array '{name}' is assigned without subscripts")
            return Name(name)
        e = self.expr(node)
        if isinstance(e, Index):
            return e
        raise self.fail(node, "unsupported assignment target")

    # -- statements ---------------------------------------------------------------------

    def block(self, node: tree_sitter.Node | None) -> list[Stmt]:
        if node is None:
            return []
        if node.type == "compound_statement":
            out: list[Stmt] = []
            self.scopes.append(set())
            try:
                for c in node.children:
                    if c.type in _SKIP_NODES:
                        continue
                    out.extend(self.stmt(c))
            finally:
                self.scopes.pop()
            return out
        return self.stmt(node)

    def stmt(self, node: tree_sitter.Node) -> list[Stmt]:
        t = node.type
        line = node.start_point[0] + 1
        if t in _SKIP_NODES:
            return []
        if t == "compound_statement":
            return self.block(node)
        if t == "declaration":
            return self.declaration(node)
        if t == "expression_statement":
            inner = [c for c in node.named_children if c.type != "comment"]
            if not inner:
                return []
            return self.chained_assignment(inner[0], line)
        if t == "if_statement":
            cond = self.expr(node.child_by_field_name("condition"))
            then = self.block(node.child_by_field_name("consequence"))
            alt = node.child_by_field_name("alternative")
            orelse: list[Stmt] = []
            if alt is not None:
                body = [c for c in alt.named_children if c.type != "comment"]
                orelse = self.block(body[0]) if body else []
            return [If(line, strip_parens(cond) if isinstance(cond, Paren) else cond, then, orelse)]
        if t == "for_statement":
            return [self.for_stmt(node)]
        if t == "break_statement":
            return [Jump(line, "break")]
        if t == "continue_statement":
            return [Jump(line, "continue")]
        if t == "return_statement":
            if any(c.type not in ("return", ";", "comment") for c in node.children):
                raise self.fail(node, "the function returns a value (only void functions are ported)")
            return [Jump(line, "return")]
        if t == "goto_statement":
            raise self.fail(node, "'goto' is not supported")
        if t in _UNSUPPORTED_STMTS:
            raise self.fail(node, _UNSUPPORTED_STMTS[t])
        raise self.fail(node, f"unsupported statement ({t})")

    def decl_type(self, node: tree_sitter.Node) -> str:
        words: list[str] = []
        for i, c in enumerate(node.children):
            fname = node.field_name_for_child(i)
            if c.type == "storage_class_specifier":
                word = self.text(c)
                if word in ("static", "extern", "thread_local", "_Thread_local"):
                    raise self.fail(node, f"'{word}' local variables are not supported")
                continue
            if c.type == "type_qualifier":
                word = self.text(c)
                if word == "const":
                    words.append(word)
                continue
            if fname == "type":
                words.append(" ".join(self.text(c).split()))
        return " ".join(words)

    def declaration(self, node: tree_sitter.Node) -> list[Stmt]:
        ctype = self.decl_type(node)
        line = node.start_point[0] + 1
        out: list[Stmt] = []
        for i, c in enumerate(node.children):
            if node.field_name_for_child(i) != "declarator":
                continue
            if c.type == "identifier":
                name, init = self.text(c), None
            elif c.type == "array_declarator":
                self.local_array(node, c, ctype)
                continue
            elif c.type == "init_declarator":
                d = c.child_by_field_name("declarator")
                if d.type == "array_declarator":
                    raise self.fail(c, "initialised local arrays are not supported")
                if d.type != "identifier":
                    raise self.fail(c, "local arrays and pointers are not supported")
                v = c.child_by_field_name("value")
                if v.type == "initializer_list":
                    raise self.fail(c, "initialiser lists are not supported")
                name, init = self.text(d), self.expr(v)
            else:
                raise self.fail(c, "local arrays and pointers are not supported")
            self.declare(c, name, normalize_ctype(ctype))
            out.append(Decl(line, ctype, name, init))
        return out

    def chained_assignment(self, node: tree_sitter.Node, line: int) -> list[Stmt]:
        """An expression statement; a chain ``a = b = e;`` becomes ``b = e; a = b;``.

        C gives ``a`` the value of ``b`` after the assignment (converted to ``b``'s type),
        which is what reading ``b`` again yields.  Only plain ``=`` chains are split, and
        only when no target reads another target's names (``a[i] = i = 0`` is undefined
        in C and stays refused).
        """
        chain = [node]
        while chain[-1].type == "assignment_expression" and self.text(
            chain[-1].child_by_field_name("operator")
        ) == "=":
            right = chain[-1].child_by_field_name("right")
            while right.type == "parenthesized_expression" and right.named_child_count == 1:
                right = right.named_children[0]
            if right.type != "assignment_expression":
                break
            chain.append(right)
        if len(chain) == 1:
            return [self.expr_stmt(node, line)]
        targets = [self.lvalue(n.child_by_field_name("left")) for n in chain]
        written = {t.name for t in targets if isinstance(t, Name)}
        if any(written & names_in(t) for t in targets if not isinstance(t, Name)):
            raise self.fail(node, "assignment inside an expression is not supported")
        last = chain[-1]
        out: list[Stmt] = [self.expr_stmt(last, line)]
        for k in range(len(chain) - 2, -1, -1):
            out.append(Assign(line, targets[k], "=", targets[k + 1]))
        return out

    def local_array(self, decl: tree_sitter.Node, node: tree_sitter.Node, ctype: str) -> None:
        """``T name[E1][E2]...;`` at the top of the function body with integer-constant
        extents: an array of the function (``static __device__`` in the generated code).

        Raises:
            PolicyRefusal: nested in a block or loop (each iteration or thread would need
                its own copy), a size that is not an integer constant, more than
                :data:`LOCAL_ARRAY_BYTES` bytes, or a pointer element type.
        """
        parent = decl.parent
        if parent is None or parent.type != "compound_statement" or \
                parent.parent is None or parent.parent.type != "function_definition":
            raise self.fail(node, "local arrays are supported at the top of the function "
                                  "body only")
        dims: list[str] = []
        d = node
        while d.type == "array_declarator":
            size = d.child_by_field_name("size")
            n = int_literal(self.text(size)) if size is not None else None
            if n is None or n <= 0:
                raise self.fail(node, "a local array's size must be a positive integer "
                                      "constant")
            dims.insert(0, str(n))
            d = d.child_by_field_name("declarator")
        if d.type != "identifier":
            raise self.fail(node, "local arrays of pointers are not supported")
        name = self.text(d)
        T = normalize_ctype(ctype.replace("const", "").strip())
        count = 1
        for x in dims:
            count *= int(x)
        nbytes = count * _SIZES.get(T, 8)
        if nbytes > LOCAL_ARRAY_BYTES:
            raise self.fail(node, f"local array of {nbytes} bytes (at most "
                                  f"{LOCAL_ARRAY_BYTES} are supported)")
        if name in CXX_KEYWORDS:
            raise self.fail(node, f"'{name}' is a C++ keyword (the generated code is CUDA C++)")
        if name in self.arrays or name in self.scalar_params or name in self.locals:
            raise self.fail(node, f"local array '{name}' shadows another name")
        self.arrays[name] = ArrayParam(name, T, tuple(dims))
        self.local_arrays.append(name)

    def expr_stmt(self, node: tree_sitter.Node, line: int) -> Stmt:
        if node.type == "assignment_expression":
            op = self.text(node.child_by_field_name("operator"))
            target = self.lvalue(node.child_by_field_name("left"))
            return Assign(line, target, op, self.expr(node.child_by_field_name("right")))
        if node.type == "update_expression":
            op = self.text(node.child_by_field_name("operator"))
            arg = node.child_by_field_name("argument")
            prefix = node.children[0].type in ("++", "--")
            return Assign(line, self.lvalue(arg), op, None, prefix=prefix)
        if node.type == "comma_expression":
            raise self.fail(node, "comma expressions are not supported")
        return ExprStmt(line, self.expr(node))

    def for_stmt(self, node: tree_sitter.Node) -> For:
        self.scopes.append(set())  # a header's declaration is scoped to the loop
        try:
            return self._for_stmt(node)
        finally:
            self.scopes.pop()

    def _for_stmt(self, node: tree_sitter.Node) -> For:
        line = node.start_point[0] + 1
        init_node = node.child_by_field_name("initializer")
        init: Stmt | None = None
        ctype = None
        if init_node is not None:
            if init_node.type == "declaration":
                decls = self.declaration(init_node)
                if len(decls) != 1:
                    raise self.fail(init_node, "a loop header declaring several variables")
                init = decls[0]
                ctype = normalize_ctype(decls[0].ctype)
            else:
                init = self.expr_stmt(init_node, line)
        cond_node = node.child_by_field_name("condition")
        cond = self.expr(cond_node) if cond_node is not None else None
        upd_node = node.child_by_field_name("update")
        update: Assign | None = None
        if upd_node is not None:
            u = self.expr_stmt(upd_node, line)
            if not isinstance(u, Assign):
                raise self.fail(upd_node, "unsupported loop update")
            update = u
        for part in (init, update):
            if isinstance(part, Assign) and isinstance(part.target, Index):
                raise self.fail(node, "a loop header that writes an array is not supported")
        body = self.block(node.child_by_field_name("body"))
        loop = For(line, None, ctype, init, cond, update, body)
        _canonicalise(loop)
        return loop


def _canonicalise(loop: For) -> None:
    """Fill the canonical fields of ``loop`` (or its ``reason``)."""
    init, cond, upd = loop.init, loop.cond, loop.update
    var = None
    first = None
    if isinstance(init, Decl) and init.init is not None:
        var, first = init.name, init.init
    elif isinstance(init, Assign) and init.op == "=" and isinstance(init.target, Name):
        var, first = init.target.name, init.value
    elif isinstance(upd, Assign) and isinstance(upd.target, Name):
        var = upd.target.name
    loop.var = var
    if first is None or var is None:
        loop.reason = "the loop header does not initialise its index"
        return
    if cond is None:
        loop.reason = f"loop {var} has no condition"
        return
    c = strip_parens(cond)
    flip = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}
    if not (isinstance(c, Binary) and c.op in flip):
        loop.reason = f"loop {var}: condition '{c_text(cond)}' is not a comparison <, <=, >, >="
        return
    left, right = strip_parens(c.left), strip_parens(c.right)
    if isinstance(left, Name) and left.name == var and var not in names_in(c.right):
        cmp, bound = c.op, c.right
    elif isinstance(right, Name) and right.name == var and var not in names_in(c.left):
        cmp, bound = flip[c.op], c.left
    else:
        loop.reason = f"loop {var}: condition '{c_text(cond)}' does not compare {var} with a bound"
        return
    step = 0
    if isinstance(upd, Assign) and isinstance(upd.target, Name) and upd.target.name == var:
        if upd.op in ("++", "--"):
            step = 1 if upd.op == "++" else -1
        elif upd.op in ("+=", "-=") and int_literal(c_text(upd.value)) == 1:
            step = 1 if upd.op == "+=" else -1
        elif upd.op == "=":
            v = strip_parens(upd.value) if upd.value is not None else None
            if (
                isinstance(v, Binary)
                and v.op in ("+", "-")
                and isinstance(strip_parens(v.left), Name)
                and strip_parens(v.left).name == var
                and int_literal(c_text(v.right)) == 1
            ):
                step = 1 if v.op == "+" else -1
    if step == 0:
        upd_text = "nothing" if upd is None else _assign_text(upd)
        loop.reason = f"loop {var}: step '{upd_text}' is not a unit step (++, --, += 1, -= 1)"
        return
    if (step > 0) != (cmp in ("<", "<=")):
        loop.reason = f"loop {var}: the step goes away from the bound ('{c_text(cond)}')"
        return
    loop.canonical = True
    loop.first, loop.cmp, loop.bound, loop.step = first, cmp, bound, step


def _assign_text(a: Assign) -> str:
    t = c_text(a.target)
    if a.op in ("++", "--"):
        return f"{a.op}{t}" if a.prefix else f"{t}{a.op}"
    return f"{t} {a.op} {c_text(a.value)}"


def assign_text(a: Assign) -> str:
    """C text of an assignment without the semicolon (as written)."""
    return _assign_text(a)


def parse_function(problem: CProblem) -> Function:
    """Build the IR of ``problem.function`` from ``problem.function_source``.

    Raises:
        PolicyRefusal: the source does not parse, the function is not found, it returns a
            value, or it uses a construct outside the supported subset.
    """
    src = problem.function_source.encode("utf-8")
    if not src.strip():
        raise PolicyRefusal(f"no source text for function '{problem.function}'")
    tree = tree_sitter.Parser(_LANGUAGE).parse(src)
    fn_node = None
    for node in tree.root_node.named_children:
        if node.type != "function_definition":
            continue
        decl = node.child_by_field_name("declarator")
        while decl is not None and decl.type != "function_declarator":
            decl = decl.child_by_field_name("declarator")
        if decl is None:
            continue
        ident = decl.child_by_field_name("declarator")
        if ident is not None and src[ident.start_byte : ident.end_byte].decode() == problem.function:
            fn_node = node
            break
    if fn_node is None:
        raise PolicyRefusal(f"cannot find the definition of '{problem.function}' in its source")
    if fn_node.has_error:
        raise PolicyRefusal(f"the source of '{problem.function}' does not parse as C")
    b = _Builder(problem, src)
    for prm in problem.params:
        if prm.name in CXX_KEYWORDS:
            raise PolicyRefusal(f"parameter '{prm.name}' is a C++ keyword (the generated code is CUDA C++)")
    rtype = fn_node.child_by_field_name("type")
    decl = fn_node.child_by_field_name("declarator")
    if b.text(rtype).strip() != "void" or decl.type != "function_declarator":
        raise PolicyRefusal(
            f"'{problem.function}' returns a value; the built-in policy ports void functions"
        )
    body = b.block(fn_node.child_by_field_name("body"))
    while body and isinstance(body[-1], Jump) and body[-1].kind == "return":
        body.pop()
    return Function(
        name=problem.function,
        body=body,
        arrays=b.arrays,
        scalar_params=b.scalar_params,
        locals=b.locals,
        params=problem.params,
        local_arrays=tuple(b.local_arrays),
    )


__all__ = [
    "CXX_KEYWORDS",
    "MATH_FUNCS",
    "MATH_RETURNS",
    "Access",
    "Affine",
    "Assign",
    "Binary",
    "Call",
    "Cast",
    "Const",
    "Decl",
    "Expr",
    "ExprStmt",
    "For",
    "Function",
    "If",
    "Index",
    "Jump",
    "Name",
    "Paren",
    "Printer",
    "Raw",
    "Stmt",
    "Ternary",
    "Unary",
    "accesses",
    "affine",
    "all_exprs",
    "arrays_read",
    "arrays_written",
    "assign_text",
    "c_text",
    "calls_in",
    "declared_in",
    "has_loop",
    "int_literal",
    "iter_expr",
    "loops_in",
    "names_in",
    "own_exprs",
    "own_jumps",
    "parse_function",
    "scalars_read",
    "scalars_written",
    "stmt_reads",
    "stmt_writes",
    "strip_parens",
    "walk",
]
