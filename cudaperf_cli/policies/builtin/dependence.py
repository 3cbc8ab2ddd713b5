"""Conservative dependence tests on the loop-nest IR.

Three questions, each answered with human-readable reasons:

* :meth:`Dependence.parallel` -- may the iterations of a loop run in any order, at once?
  (a) every array written in the body is, in every access inside the body, subscripted in
  one dimension by exactly ``v + c`` (same dimension, same ``c``), except reads whose
  subscript in that dimension is invariant in the loop and provably outside the written
  range (``A[k][k]`` read in ``for (i = k + 1; ...)`` which writes rows ``A[i]``);
  (b) every scalar written in the body is private: declared in the body, an inner loop's
  index, or assigned before any read on every path through the body and not used after the
  loop; (c) no calls except known math functions, no ``break``/``return``/``goto``.
  Array parameters are assumed not to alias each other.  A loop that (a) refuses on an array
  is asked again of isl (:mod:`polyhedral`), which can prove disjoint accesses exactly.
* :meth:`Dependence.reduction` -- is a loop a sum reduction ``acc += expr`` into one scalar
  or one array element whose subscripts do not change in the loop?
  :meth:`Dependence.reductions` -- is it several such sums at once, none reading another
  (gesummv's ``tmp[i]`` and ``y[i]``)?
* :meth:`Dependence.interchange` -- may a perfect 2-deep nest ``for i: for j:`` be swapped
  so that ``j`` becomes the parallel outer loop?
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from cudaperf_cli.core import normalize_ctype
from cudaperf_cli.policies.builtin import polyhedral
from cudaperf_cli.policies.builtin.ir import (
    MATH_FUNCS,
    MATH_RETURNS,
    Access,
    Affine,
    Assign,
    Binary,
    Call,
    Cast,
    Const,
    Decl,
    Expr,
    ExprStmt,
    For,
    Function,
    If,
    Index,
    Jump,
    Name,
    Paren,
    Stmt,
    accesses,
    affine,
    arrays_written,
    c_text,
    calls_in,
    declared_in,
    int_literal,
    iter_expr,
    loops_in,
    names_in,
    own_exprs,
    own_jumps,
    scalars_written,
    stmt_reads,
    stmt_writes,
    strip_parens,
    walk,
)

# ---------------------------------------------------------------------------------------
# Liveness of scalars (backward data flow on the structured IR)
# ---------------------------------------------------------------------------------------


class Liveness:
    """Scalars live after each statement of a function (conservative: jumps make every
    scalar live)."""

    def __init__(self, fn: Function):
        self.all = set(fn.scalar_params) | set(fn.locals)
        self.out: dict[int, set[str]] = {}
        self._list(fn.body, set())

    def after(self, s: Stmt) -> set[str]:
        """Scalars possibly read after ``s`` before being reassigned."""
        return self.out.get(id(s), self.all)

    def alias(self, new: Stmt, *olds: Stmt) -> None:
        """Give a synthesised statement the union of the live-out sets of ``olds``."""
        acc: set[str] = set()
        for o in olds:
            acc |= self.after(o)
        self.out[id(new)] = acc

    def _list(self, stmts: Sequence[Stmt], out: set[str]) -> set[str]:
        live = set(out)
        for s in reversed(stmts):
            self.out.setdefault(id(s), set()).update(live)
            live = self._stmt(s, live)
        return live

    def _stmt(self, s: Stmt, out: set[str]) -> set[str]:
        if isinstance(s, Decl):
            return (out - {s.name}) | names_in(s.init)
        if isinstance(s, Assign):
            if isinstance(s.target, Name) and s.op == "=":
                return (out - {s.target.name}) | names_in(s.value)
            return out | stmt_reads(s)
        if isinstance(s, ExprStmt):
            return out | names_in(s.expr)
        if isinstance(s, If):
            return names_in(s.cond) | self._list(s.then, out) | self._list(s.orelse, out)
        if isinstance(s, Jump):
            return set(self.all)
        if isinstance(s, For):
            cond = names_in(s.cond)
            upd_w = stmt_writes(s.update) if s.update is not None else set()
            upd_r = stmt_reads(s.update) if s.update is not None else set()
            head = cond | out
            while True:
                after_body = (head - upd_w) | upd_r
                body_in = self._list(s.body, after_body)
                new = cond | out | body_in
                if new == head:
                    break
                head = new
            if s.init is None:
                return head
            return (head - stmt_writes(s.init)) | stmt_reads(s.init)
        return set(out)


def exposed_reads(stmts: Sequence[Stmt], assigned: set[str] | None = None) -> tuple[set[str], set[str]]:
    """(scalars read before being assigned on some path, scalars assigned on every path)."""
    a = set(assigned or ())
    exp: set[str] = set()
    for s in stmts:
        if isinstance(s, Decl):
            exp |= names_in(s.init) - a
            a.add(s.name)
        elif isinstance(s, Assign):
            exp |= stmt_reads(s) - a
            if isinstance(s.target, Name):
                a.add(s.target.name)
        elif isinstance(s, If):
            exp |= names_in(s.cond) - a
            e1, a1 = exposed_reads(s.then, a)
            e2, a2 = exposed_reads(s.orelse, a)
            exp |= e1 | e2
            a = a1 & a2
        elif isinstance(s, For):
            if s.init is not None:
                exp |= stmt_reads(s.init) - a
                a |= stmt_writes(s.init)
            inner = set(a)
            exp |= names_in(s.cond) - inner
            e_b, a_b = exposed_reads(s.body, inner)
            exp |= e_b
            if s.update is not None:
                exp |= stmt_reads(s.update) - a_b
        elif isinstance(s, ExprStmt):
            exp |= names_in(s.expr) - a
    return exp, a


# ---------------------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------------------


@dataclass
class Verdict:
    """Result of the parallelism test of one loop.

    Attributes:
        loop: the loop tested.
        parallel: its iterations are independent.
        reasons: why not (empty when parallel); each starts with ``"loop <v>: "``.
        private: scalars written in the body that each iteration (thread) keeps private.
    """

    loop: For
    parallel: bool
    reasons: list[str] = field(default_factory=list)
    private: set[str] = field(default_factory=set)


@dataclass
class Reduction:
    """A sum reduction loop: every update of ``acc`` in the body is an accumulation.

    Attributes:
        loop: the reduction loop.
        acc: the accumulator (a scalar, or an array element invariant in the loop).
        ctype: the accumulator's C type.
        updates: the accumulation statements (``acc += e``, ``acc -= e``,
            ``acc = acc + e ...``).
        form: ``"+="``, ``"-="``, ``"="`` when all updates are written alike, else
            ``"mixed"``; decides how the partial sum is combined into ``acc``.
    """

    loop: For
    acc: Name | Index
    ctype: str
    updates: list[Assign]
    form: str

    @property
    def acc_text(self) -> str:
        """The accumulator as written (``s``, ``y[i]``)."""
        return self.acc.name if isinstance(self.acc, Name) else (self.acc.text or c_text(self.acc))

    def rewrite(self, stmt: Assign, partial: str) -> Assign:
        """The update ``stmt`` applied to the partial sum ``partial`` instead of ``acc``."""
        p = Name(partial)
        if self.form == "-=":
            return Assign(stmt.line, p, "+=", stmt.value)
        if stmt.op in ("+=", "-="):
            return Assign(stmt.line, p, stmt.op, stmt.value)
        new = replace_acc_leaf(stmt.value, self.acc, p)
        assert new is not None
        return Assign(stmt.line, p, "=", new)

    def combine(self, partial: str, line: int = 0) -> Assign:
        """``acc += partial`` (or the form the C code uses) as a statement."""
        p = Name(partial)
        if self.form == "-=":
            return Assign(line, self.acc, "-=", p)
        if self.form == "=":
            return Assign(line, self.acc, "=", Binary("+", self.acc, p))
        return Assign(line, self.acc, "+=", p)


def _same_acc(e: Expr, acc: Name | Index) -> bool:
    e = strip_parens(e)
    return e == acc


def replace_acc_leaf(value: Expr | None, acc: Name | Index, new: Expr) -> Expr | None:
    """``value`` with the accumulator replaced by ``new`` when ``value`` is ``acc + e``,
    ``acc - e`` (a left-associated chain such as ``acc + a - b``), or ``e + acc``; None
    otherwise."""
    if value is None:
        return None
    v = value
    if isinstance(v, Binary) and v.op in ("+", "-"):
        if _same_acc(v.left, acc):
            return Binary(v.op, new, v.right)
        left = v.left
        if isinstance(left, Binary) and left.op in ("+", "-"):
            inner = replace_acc_leaf(left, acc, new)
            if inner is not None:
                return Binary(v.op, inner, v.right)
        if v.op == "+" and _same_acc(v.right, acc) and not isinstance(v.left, Paren):
            return Binary("+", v.left, new)
    return None


#: Floating-point C types (normalised).
_FLOATING = ("float", "double", "long double")

#: Signed integer C types (normalised) whose arithmetic the affine forms model.
SIGNED_INTS = ("int", "signed", "signed int", "short", "short int", "signed char", "long",
               "long int", "long long", "long long int", "int32_t", "int64_t", "ptrdiff_t")


def header_arrays(loop: For) -> set[str]:
    """Arrays the loop's header reads (its first value and its bound)."""
    return {x.array for e in (loop.first, loop.bound, loop.cond) if e is not None
            for x in iter_expr(e) if isinstance(x, Index)}


def _mentions_acc(e: Expr | None, acc: Name | Index, apart: frozenset[int] = frozenset()) -> bool:
    """``e`` reads the accumulator: its scalar, or any element of its array except the
    reads in ``apart`` (ids of ``Index`` nodes proved never to be the accumulator's
    element)."""
    if e is None:
        return False
    for x in iter_expr(e):
        if isinstance(acc, Name) and isinstance(x, Name) and x.name == acc.name:
            return True
        if (isinstance(acc, Index) and isinstance(x, Index) and x.array == acc.array
                and id(x) not in apart):
            return True
    return False


# ---------------------------------------------------------------------------------------
# The tests
# ---------------------------------------------------------------------------------------

_ATOMIC_TYPES = {
    "float", "double", "int", "signed int", "unsigned", "unsigned int", "long", "long int",
    "long long", "long long int", "unsigned long", "unsigned long long", "size_t",
    "int32_t", "uint32_t", "int64_t", "uint64_t",
}  # fmt: skip


class Dependence:
    """Dependence tests for the loops of one function (results cached per loop)."""

    def __init__(self, fn: Function):
        self.fn = fn
        self.live = Liveness(fn)
        self._verdicts: dict[int, Verdict] = {}
        self._reductions: dict[int, tuple[Reduction | None, str]] = {}
        self._multi: dict[int, tuple[list[Reduction], str]] = {}
        self._kept: list[Stmt] = []
        self._parents: dict[int, tuple[For, ...]] | None = None
        self.proofs: dict[int, str] = {}

    def prove_parallel(self, loop: For, why: str) -> None:
        """Record that ``loop`` (synthesised by a transformation that proved it, e.g.
        ``wavefront``) has independent iterations; its body's scalars are private."""
        self.keep(loop)
        self._verdicts[id(loop)] = Verdict(loop, True, [], scalars_written(loop.body) - {loop.var or ""})
        self.proofs[id(loop)] = why

    def keep(self, *stmts: Stmt) -> None:
        """Keep synthesised statements (transform.py) alive for the analysis's lifetime:
        the caches are keyed by ``id()``, which a freed object's successor could reuse."""
        self._kept.extend(stmts)

    # -- parallel -----------------------------------------------------------------------

    def parallel(self, loop: For, outer: For | None = None) -> Verdict:
        """Test whether the iterations of ``loop`` are independent.

        ``outer`` (interchange test) is an enclosing loop whose index must be treated as
        changing inside ``loop`` (it becomes an inner loop).
        """
        key = id(loop)
        if outer is None and key in self._verdicts:
            return self._verdicts[key]
        v = self._parallel(loop, outer)
        if outer is None:
            self._verdicts[key] = v
        return v

    def _parallel(self, loop: For, outer: For | None) -> Verdict:
        extra_variant = frozenset({outer.var}) if outer is not None and outer.var else frozenset()
        var = loop.var or "?"
        pre = f"loop {var}: "
        reasons: list[str] = []
        if not loop.canonical:
            reasons.append(loop.reason if loop.reason.startswith("loop") else pre + loop.reason)
            return Verdict(loop, False, reasons)
        body = loop.body
        reasons += self._control_reasons(pre, body, allow_continue=True)
        written = scalars_written(body)
        if var in written:
            reasons.append(pre + f"the index {var} is modified in the body")
        hdr = loop.header_names()
        changed = sorted(hdr & written)
        if changed:
            reasons.append(pre + f"its bound uses {', '.join(changed)}, which the body modifies")
        read_by_bound = sorted(header_arrays(loop) & arrays_written(body))
        if read_by_bound:
            reasons.append(pre + f"its bound reads {', '.join(read_by_bound)}, which the body "
                                 "writes")
        if var in self.live.after(loop):
            reasons.append(pre + f"the final value of {var} is used after the loop")
        variant = written | {var} | set(extra_variant)
        reasons += self._array_reasons(pre, loop, body, var, variant,
                                       [outer] if outer is not None else [])
        priv, sreasons = self._scalar_reasons(pre, loop, body, written - {var}, extra_variant)
        reasons += sreasons
        return Verdict(loop, not reasons, reasons, priv)

    def _control_reasons(self, pre: str, body: Sequence[Stmt], allow_continue: bool) -> list[str]:
        out: list[str] = []
        for j in own_jumps(body):
            if j.kind == "continue" and allow_continue:
                continue
            out.append(pre + f"contains '{j.kind}' (line {j.line})")
        seen: set[str] = set()
        for c in calls_in(body):
            if c.func not in MATH_FUNCS and c.func not in seen:
                seen.add(c.func)
                out.append(pre + f"calls {c.func}(), which may have side effects")
        return out

    def _array_reasons(
        self, pre: str, loop: For, body: Sequence[Stmt], var: str, variant: set[str],
        extra_loops: Sequence[For] = (),
    ) -> list[str]:
        acc_list = accesses(body)
        reasons: list[str] = []
        ranges = _loop_ranges([loop, *extra_loops, *loops_in(body)])
        # an index assigned anywhere but in its own header can leave its header's range
        for x in walk(body):
            if not isinstance(x, For):
                for name in stmt_writes(x):
                    ranges.pop(name, None)
        fixed = variant - set(ranges)  # scalars that change in the loop but are no loop index
        for arr in sorted({a.array for a in acc_list if a.write}):
            accs = [a for a in acc_list if a.array == arr]
            writes = [a for a in accs if a.write]
            # reads that provably never touch an element written anywhere in the loop
            relevant = writes + [
                a for a in accs
                if not a.write and not _never_written(a.index, writes, ranges, fixed)
            ]
            ndim = len(accs[0].index.subs)
            if any(self._dim_ok(relevant, d, var, variant)
                   or self._rows_ok(relevant, d, var, variant, ranges) for d in range(ndim)):
                continue
            # what the form test cannot see (a triangle's row and column, ...) isl can prove
            if not extra_loops and polyhedral.independent(loop, arr) is True:
                continue
            reasons.append(pre + self._explain(relevant, var, variant))
        return reasons

    def own_elements(self, loop: For, array: str) -> bool:
        """Every access to ``array`` in ``loop``'s body (reads and writes) has ``var + g`` in
        one dimension with the same invariant ``g``: iteration ``var`` touches only its own
        elements of ``array``, so every dependence on it stays within one iteration."""
        var = loop.var or "?"
        accs = [a for a in accesses(loop.body) if a.array == array]
        if not accs:
            return True
        variant = scalars_written(loop.body) | {var}
        return any(self._dim_ok(accs, d, var, variant) for d in range(len(accs[0].index.subs)))

    @staticmethod
    def _is_var_plus_c(sub: Expr, var: str) -> int | None:
        f = affine(sub)
        if f is not None and f.symbols == {var} and f.coeff(var) == 1:
            return f.const
        return None

    def _dim_ok(self, accs, d: int, var: str, variant: set[str]) -> bool:
        """Every access has ``var + g`` in dimension ``d`` with the same ``g``, which does
        not change in the loop (a constant, or e.g. ``i * m`` in ``A[i * m + j]`` for the
        ``j`` loop)."""
        g0 = None
        one = Affine.make({var: 1}, 0)
        for a in accs:
            f = affine(a.index.subs[d])
            if f is None or f.coeff(var) != 1:
                return False
            g = f - one
            if g.variables & variant:
                return False
            if g0 is not None and g != g0:
                return False
            g0 = g
        return True

    def _rows_ok(self, accs, d: int, var: str, variant: set[str], ranges) -> bool:
        """Delinearised rows of a flat array: every access is ``var * S + r`` with the same
        symbol ``S`` (invariant) and ``0 <= r <= S - 1`` provable from the loop bounds, so
        iteration ``var`` only touches row ``var`` (``A[i * m + j]`` for ``0 <= j < m``)."""
        S0 = None
        fixed = variant - set(ranges)
        for a in accs:
            f = affine(a.index.subs[d])
            if f is None:
                return False
            rows = [(k, c) for k, c in f.coeffs if var in k.split("*")]
            if len(rows) != 1 or rows[0][1] != 1 or "*" not in rows[0][0]:
                return False
            factors = rows[0][0].split("*")
            factors.remove(var)
            S = factors[0]
            if S in variant or (S0 is not None and S != S0):
                return False
            S0 = S
            r = f - Affine.make({rows[0][0]: 1}, 0)
            if var in r.variables or r.variables & fixed:
                return False
            lo, hi = _extreme(r, ranges, False), _extreme(r, ranges, True)
            if lo is None or hi is None:
                return False
            top = Affine.make({S: 1}, -1) - hi  # S - 1 - max(r) >= 0
            if not (lo.is_const() and lo.const >= 0 and top.is_const() and top.const >= 0):
                return False
        return True

    def _explain(self, accs, var: str, variant: set[str]) -> str:
        writes = [a for a in accs if a.write]
        for w in writes:
            if not any(var in names_in(s) for s in w.index.subs):
                return f"{_t(w.index)} is written in every iteration (loop-carried dependence)"
        for w in writes:
            if not any(self._is_var_plus_c(s, var) is not None for s in w.index.subs):
                return (
                    f"subscripts of {_t(w.index)} are not of the form {var} + constant; cannot "
                    "prove that iterations write different elements"
                )
        # find a conflicting pair
        for w in writes:
            for a in accs:
                if a is w or _t(a.index) == _t(w.index):
                    continue
                kind = "written" if a.write else "read"
                return (
                    f"{_t(w.index)} is written and {_t(a.index)} is {kind} by other iterations "
                    "(loop-carried dependence)"
                )
        return f"{_t(writes[0].index)}: cannot prove that iterations write different elements"

    def _scalar_reasons(
        self, pre: str, loop: For, body: Sequence[Stmt], written: set[str],
        extra_variant: frozenset[str],
    ) -> tuple[set[str], list[str]]:
        declared = declared_in(body)
        exposed, _ = exposed_reads(body)
        after = self.live.after(loop)
        priv: set[str] = set()
        reasons: list[str] = []
        for s in sorted(written):
            if s in declared:
                priv.add(s)
            elif s in exposed:
                reasons.append(
                    pre + f"scalar {s} carries a value from one iteration to the next "
                    "(read before it is assigned; loop-carried dependence)"
                )
            elif s in after and s not in extra_variant:
                reasons.append(pre + f"scalar {s} is used after the loop (its last value is needed)")
            else:
                priv.add(s)
        return priv, reasons

    # -- reduction ----------------------------------------------------------------------

    def reduction(self, loop: For) -> tuple[Reduction | None, str]:
        """(the reduction, '') when ``loop`` is a sum reduction, else (None, why not)."""
        key = id(loop)
        if key not in self._reductions:
            self._reductions[key] = self._reduction(loop)
        return self._reductions[key]

    def reductions(self, loop: For) -> tuple[list[Reduction], str]:
        """(one :class:`Reduction` per accumulator, in source order, '') when ``loop`` is
        two or more independent sum reductions, else ([], why not).

        Each accumulator meets every condition of :meth:`reduction` on its own (an element
        fixed in the loop, updated only by accumulations, read nowhere else in the loop
        except by reads proved never to reach its element), and no update's term reads
        another accumulator: gesummv's ``tmp[i] = A[i][j] * x[j] + tmp[i]; y[i] = B[i][j] *
        x[j] + y[i];``.  The accumulators are distinct scalars or elements of distinct
        arrays (two elements of one array could be the same element).  Each sum can then
        be split across threads independently of the others."""
        key = id(loop)
        if key not in self._multi:
            self._multi[key] = self._several(loop)
        return self._multi[key]

    def sums(self, loop: For) -> list[Reduction]:
        """The sum reductions of ``loop``: ``[red]`` for :meth:`reduction`, the list of
        :meth:`reductions` for several accumulators, ``[]`` when neither applies."""
        red, _ = self.reduction(loop)
        if red is not None:
            return [red]
        return self.reductions(loop)[0]

    def _candidates(self, loop: For) -> tuple[list[Assign], list[Name | Index], str]:
        """The accumulation statements of ``loop``'s body and their targets (scalars not
        declared in the body, array elements) in source order, or a reason the loop is no
        reduction at all (not canonical, jumps, its index read after it)."""
        var = loop.var or "?"
        pre = f"loop {var}: "
        if not loop.canonical:
            return [], [], pre + "not canonical"
        body = loop.body
        ctrl = self._control_reasons(pre, body, allow_continue=False)
        if ctrl:
            return [], [], ctrl[0]
        # a split reduction never leaves its index at the final value C gives it (a loop
        # that transform.py synthesised has only an approximate liveness: the transformation
        # itself refused nests whose indices are used after them)
        synthesised = any(k is loop for k in self._kept)
        if not synthesised and var in self.live.after(loop):
            return [], [], pre + f"the final value of {var} is used after the loop"
        updates: list[Assign] = []
        for s in walk(body):
            if not isinstance(s, Assign):
                continue
            form = _acc_form(s)
            if form is None:
                continue
            if s.op == "=" and not isinstance(s.target, (Name, Index)):
                continue
            if isinstance(s.target, Name) and s.target.name == var:
                continue
            updates.append(s)
        declared = declared_in(body)
        cands: list[Name | Index] = []
        for u in updates:
            t = u.target
            if isinstance(t, Name) and t.name in declared:
                continue
            if t not in cands:
                cands.append(t)  # type: ignore[arg-type]
        return updates, cands, ""

    def _reduction(self, loop: For) -> tuple[Reduction | None, str]:
        updates, cands, why = self._candidates(loop)
        if why:
            return None, why
        if len(cands) != 1:
            why = "no accumulation 'acc += expr'" if not cands else "several accumulators"
            return None, f"loop {loop.var or '?'}: " + why
        reds, why = self._check_sums(loop, updates, cands)
        return (reds[0] if reds else None), why

    def _several(self, loop: For) -> tuple[list[Reduction], str]:
        updates, cands, why = self._candidates(loop)
        if why:
            return [], why
        pre = f"loop {loop.var or '?'}: "
        if len(cands) < 2:
            return [], pre + ("no accumulation 'acc += expr'" if not cands
                              else "one accumulator (a single reduction)")
        seen: dict[str, Name | Index] = {}
        for acc in cands:
            name = acc.name if isinstance(acc, Name) else acc.array
            if name in seen:
                return [], pre + (f"{_t(seen[name])} and {_t(acc)} accumulate into the same "
                                  f"array {name} (they may be one element)")
            seen[name] = acc
        return self._check_sums(loop, updates, cands)

    def _check_sums(self, loop: For, updates: list[Assign],
                    cands: list[Name | Index]) -> tuple[list[Reduction], str]:
        """The reductions into ``cands`` (each checked as :meth:`reduction` checks its one
        accumulator), or ([], the first reason one of them fails)."""
        var = loop.var or "?"
        pre = f"loop {var}: "
        body = loop.body
        declared = declared_in(body)
        written = scalars_written(body) - {var}
        per_acc: list[tuple[Name | Index, list[Assign], frozenset[int], set[str]]] = []
        for acc in cands:
            mine = [u for u in updates if u.target == acc]
            if isinstance(acc, Index) and acc.array in header_arrays(loop):
                return [], pre + f"its bound reads {acc.array}, the accumulator's array"
            acc_type = (self.fn.ctype_of(acc.name) if isinstance(acc, Name)
                        else self.fn.arrays[acc.array].ctype)
            if normalize_ctype(acc_type or "") not in _FLOATING and any(
                    self.floating(u.value) for u in mine):
                return [], pre + (f"{_t(acc)} is an integer summing floating-point terms (C "
                                  "truncates after every addition: the order matters)")
            # reads of the accumulator's array that never reach its element (x[j], j < i,
            # in trisolv's `x[i] -= L[i][j] * x[j]`) are ordinary reads
            apart = self._apart_from(loop, acc) if isinstance(acc, Index) else frozenset()
            # updates must be +/- accumulations that do not read acc otherwise
            forms: set[str] = set()
            for u in mine:
                if u.op in ("+=", "-="):
                    if _mentions_acc(u.value, acc, apart):
                        return [], pre + f"{c_text(u.value)} reads the accumulator"
                    forms.add(u.op)
                elif u.op == "=":
                    rest = replace_acc_leaf(u.value, acc, Name("\0"))
                    if rest is None or _mentions_acc(rest, acc, apart):
                        return [], pre + f"'{c_text(u.value)}' is not an accumulation into {_t(acc)}"
                    forms.add("=")
                else:
                    return [], pre + f"{_t(acc)} is updated with {u.op}"
            upd_ids = {id(u) for u in mine}
            # acc must not be read or written anywhere else (another accumulator's updates
            # included: no term reads another sum)
            for s in walk(body):
                if id(s) in upd_ids:
                    if isinstance(acc, Index) and any(_mentions_acc(x, acc) for x in acc.subs):
                        return [], pre + f"subscripts of {_t(acc)} read the accumulator"
                    continue
                if isinstance(s, Assign) and s.target == acc:
                    return [], pre + f"{_t(acc)} is assigned other than by accumulation"
                for e in own_exprs(s):
                    if _mentions_acc(e, acc, apart):
                        return [], pre + f"{_t(acc)} is read in the loop"
            per_acc.append((acc, mine, apart, forms))
        # other writes: private scalars only; no array writes except the accumulators
        elements = [acc for acc in cands if isinstance(acc, Index)]
        for a in accesses(body):
            if a.write and not any(a.index == acc for acc in elements):
                return [], pre + f"{_t(a.index)} is written in the loop"
        for acc in elements:
            subs_names: set[str] = set()
            for x in acc.subs:
                subs_names |= names_in(x)
            if subs_names & (written | {var}):
                return [], pre + f"the subscripts of {_t(acc)} change in the loop"
            if any(isinstance(y, Index) for x in acc.subs for y in iter_expr(x)):
                return [], pre + f"the subscripts of {_t(acc)} read array data"
        exposed, _ = exposed_reads(body)
        after = self.live.after(loop)
        acc_names = {acc.name for acc in cands if isinstance(acc, Name)}
        for s in sorted(written - declared):
            if s in acc_names:
                continue
            if s in exposed or s in after:
                return [], pre + f"scalar {s} carries a value between iterations"
        out: list[Reduction] = []
        for acc, mine, _apart, forms in per_acc:
            if isinstance(acc, Name):
                if acc.name == var or acc.name in declared:
                    return [], pre + "the accumulator is private to the body"
                if acc.name in loop.header_names():
                    return [], pre + f"the loop's bounds read the accumulator {acc.name}"
                ctype = self.fn.ctype_of(acc.name)
            else:
                ctype = normalize_ctype(self.fn.arrays[acc.array].ctype)
            if ctype is None:
                return [], pre + f"unknown type of {_t(acc)}"
            form = forms.pop() if len(forms) == 1 else "mixed"
            out.append(Reduction(loop, acc, ctype, mine, form))
        return out, ""

    def floating(self, e: Expr | None) -> bool:
        """``e`` may have a floating-point value somewhere inside: a floating constant, a
        floating scalar or array, a math call, a cast to a floating type (conservative)."""
        if e is None:
            return False
        for x in iter_expr(e):
            if isinstance(x, Const) and int_literal(x.text) is None:
                return True
            if isinstance(x, Name) and normalize_ctype(self.fn.ctype_of(x.name) or "") in _FLOATING:
                return True
            if isinstance(x, Index) and normalize_ctype(self.fn.arrays[x.array].ctype) in _FLOATING:
                return True
            if isinstance(x, Call) and MATH_RETURNS.get(x.func, "double") in _FLOATING:
                return True
            if isinstance(x, Cast) and normalize_ctype(x.ctype) in _FLOATING:
                return True
        return False

    def signed_ints(self, exprs: Sequence[Expr | None]) -> bool:
        """Every expression is plain signed integer arithmetic: names of signed integer
        scalars, integer constants without an unsigned suffix, no casts, calls or array
        reads.  Then its C value is the value of its affine form, which isl and the range
        tests assume (a ``double`` bound compares as a double, an ``unsigned`` one wraps)."""
        for e in exprs:
            if e is None:
                return False
            for x in iter_expr(e):
                if isinstance(x, (Cast, Call, Index)):
                    return False
                if isinstance(x, Const) and (int_literal(x.text) is None or "u" in x.text.lower()):
                    return False
                if isinstance(x, Name) and normalize_ctype(self.fn.ctype_of(x.name) or "") not in SIGNED_INTS:
                    return False
        return True

    def _apart_from(self, loop: For, acc: Index) -> frozenset[int]:
        """Ids of the reads of ``acc``'s array in ``loop``'s body that never touch the
        element ``acc`` (invariant in the loop).

        Asked of isl with the enclosing loops of ``loop`` as context (lu's
        ``A[i][j] -= A[i][k] * A[k][j]`` under ``for (j < i)``: ``A[k][j]`` with ``k < j <
        i`` is never ``A[i][j]``); without islpy, or when isl cannot encode the accesses, a
        read counts only when its subscript range lies strictly outside the accumulator's in
        some dimension over the loop's own range (``x[j]``, ``j < i``, against ``x[i]``).
        """
        context = self._enclosing(loop)
        # the proof reads subscripts and bounds as integers: they must be plain signed ones
        around = [*context, loop, *loops_in(loop.body)]
        if not self.signed_ints([*acc.subs, *(e for L in around for e in (L.first, L.bound))]):
            return frozenset()
        ranges = _loop_ranges([loop, *loops_in(loop.body)])
        fixed = (scalars_written(loop.body) | {loop.var or "?"}) - set(ranges)
        target = [Access(acc, True)]
        out = set()
        for x, is_write, chain in polyhedral.accesses_with_loops(loop.body):
            if is_write or x.array != acc.array or x == acc:
                continue
            if not self.signed_ints(list(x.subs)):
                continue
            proved = polyhedral.never_touches(acc, x, context, (loop,) + chain)
            if proved is None:
                proved = _never_written(x, target, ranges, fixed)
            if proved:
                out.add(id(x))
        return frozenset(out)

    def _enclosing(self, loop: For) -> tuple[For, ...]:
        """The loops around ``loop`` in the function, outermost first (none for a loop that
        transform.py synthesised)."""
        if self._parents is None:
            self._parents = {}

            def visit(stmts: Sequence[Stmt], chain: tuple[For, ...]) -> None:
                for st in stmts:
                    if isinstance(st, For):
                        self._parents[id(st)] = chain
                        visit(st.body, chain + (st,))
                    elif isinstance(st, If):
                        visit(st.then, chain)
                        visit(st.orelse, chain)

            visit(self.fn.body, ())
        return self._parents.get(id(loop), ())

    def atomic_ok(self, red: Reduction) -> bool:
        """The accumulator's type has a device ``atomicAdd`` (directly or via a cast)."""
        return red.ctype in _ATOMIC_TYPES

    # -- interchange --------------------------------------------------------------------

    def interchange(self, outer: For) -> tuple[bool, str]:
        """May the perfect nest ``outer { inner }`` run as ``inner { outer }`` with the new
        outer loop parallel?  (True, '') or (False, why not)."""
        pre = f"loop {outer.var}: "
        if len(outer.body) != 1 or not isinstance(outer.body[0], For):
            return False, pre + "not a perfect 2-deep nest (no interchange)"
        inner = outer.body[0]
        if not (outer.canonical and inner.canonical):
            return False, pre + "non-canonical header (no interchange)"
        if outer.var in inner.header_names():
            return False, pre + f"the bounds of loop {inner.var} depend on {outer.var} (no interchange)"
        if any(isinstance(x, Index) for e in (inner.first, inner.bound) for x in iter_expr(e)):
            return False, pre + f"the bounds of loop {inner.var} read array data"
        v = self.parallel(inner, outer=outer)
        if not v.parallel:
            return False, v.reasons[0]
        written = scalars_written(inner.body)
        if outer.header_names() & (written | {inner.var}):
            return False, pre + "its bounds change inside the nest"
        if own_jumps(inner.body):
            return False, pre + "jumps inside the nest"
        if outer.var in self.live.after(outer) or inner.var in self.live.after(outer):
            return False, pre + "loop indices are used after the nest"
        for s in written - {inner.var}:
            if s in self.live.after(outer) and s not in declared_in(inner.body):
                return False, pre + f"scalar {s} is used after the nest"
        return True, ""


def _loop_ranges(loops: Sequence[For]) -> dict[str, tuple[Affine, Affine]]:
    """index -> (lowest, highest) value as affine forms, for canonical loops with affine
    bounds; an index used by two loops with different ranges gets none."""
    out: dict[str, tuple[Affine, Affine]] = {}
    bad: set[str] = set()
    for L in loops:
        if L.var is None:
            continue
        r = L.range_affine() if L.canonical and L.var not in scalars_written(L.body) else None
        if r is None or (L.var in out and out[L.var] != r):
            bad.add(L.var)
        else:
            out[L.var] = r
    for b in bad:
        out.pop(b, None)
    return out


def _extreme(f: Affine, ranges: dict[str, tuple[Affine, Affine]], want_max: bool,
             depth: int = 0) -> Affine | None:
    """The least (greatest) value of ``f`` over the loop ranges, as an affine form in
    symbols that are not loop indices; None when loop indices cannot be eliminated."""
    if depth > 8:
        return None
    res = Affine.make({}, f.const)
    again = False
    for sym, c in f.coeffs:
        if "*" in sym and set(sym.split("*")) & set(ranges):
            return None  # a product with a loop index: no linear bound
        if sym in ranges:
            lo, hi = ranges[sym]
            pick = hi if (c > 0) == want_max else lo
            res = res + pick.scale(c)
            again = True
        else:
            res = res + Affine.make({sym: c}, 0)
    if again and res.symbols & set(ranges):
        return _extreme(res, ranges, want_max, depth + 1)
    return res


def _never_written(read: Index, writes, ranges, fixed: set[str]) -> bool:
    """In some dimension, the read's subscript range lies strictly below or above the
    range of every write's subscript (so no element it reads is ever written)."""
    for d in range(len(read.subs)):
        fr = affine(read.subs[d])
        if fr is None or fr.variables & fixed:
            continue
        rlo, rhi = _extreme(fr, ranges, False), _extreme(fr, ranges, True)
        if rlo is None or rhi is None:
            continue
        ok = True
        for w in writes:
            fw = affine(w.index.subs[d])
            if fw is None or fw.variables & fixed:
                ok = False
                break
            wlo, whi = _extreme(fw, ranges, False), _extreme(fw, ranges, True)
            if wlo is None or whi is None:
                ok = False
                break
            below, above = wlo - rhi, rlo - whi
            if not ((below.is_const() and below.const > 0) or (above.is_const() and above.const > 0)):
                ok = False
                break
        if ok:
            return True
    return False


def _acc_form(s: Assign) -> str | None:
    if s.op in ("+=", "-="):
        return s.op
    if s.op == "=" and replace_acc_leaf(s.value, s.target, Name("\0")) is not None:
        return "="
    return None


def _t(e: Expr) -> str:
    if isinstance(e, Index) and e.text:
        return " ".join(e.text.split())
    return c_text(e)


__all__ = ["Dependence", "Liveness", "Reduction", "Verdict", "exposed_reads", "replace_acc_leaf"]
