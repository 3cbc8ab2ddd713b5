"""Where each part of the function runs: host, parallel kernels, one-thread kernels.

:func:`analyze` walks the top level of the function body (and, recursively, the bodies of
loops kept on the host) and decides, in program order:

* a loop whose iterations are independent (:meth:`Dependence.parallel`) becomes a kernel
  *site*; so does a sum reduction into a scalar or an invariant element (``grid_reduce``)
  and a perfect 2-deep nest whose inner loop is parallel over the whole nest (interchanged);
* any other loop that contains a site stays on the host: its header runs on the CPU and
  every kernel inside is launched once per iteration, with the index passed by value;
* a loop with nothing parallel inside runs in a one-thread kernel (only when something
  else in the function is parallel);
* statements outside loops run on the host when they only compute scalars from scalars,
  otherwise in a one-thread kernel, in program order.  A scalar assigned on the device
  (in a one-thread kernel or by a reduction) lives on from then on in a ``__device__``
  variable; later statements that read it run on the device as well.
"""

from __future__ import annotations

import re

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from cudaperf_cli.core import (
    C_TYPE_TO_DTYPE,
    CProblem,
    ProblemError,
    eval_int_expr,
    normalize_ctype,
)
from cudaperf_cli.policies.base import PolicyRefusal
from cudaperf_cli.policies.builtin.dependence import (
    SIGNED_INTS,
    Dependence,
    Reduction,
    Verdict,
)
from cudaperf_cli.policies.builtin.ir import (
    MATH_FUNCS,
    Call,
    Const,
    Decl,
    Expr,
    For,
    Function,
    If,
    Index,
    Jump,
    Name,
    Stmt,
    accesses,
    affine,
    arrays_written,
    c_text,
    calls_in,
    declared_in,
    has_loop,
    int_literal,
    iter_expr,
    names_in,
    own_exprs,
    own_jumps,
    parse_function,
    scalars_read,
    scalars_written,
    walk,
)
from cudaperf_cli.policies.builtin.mapping import (
    BLOCKS,
    FEW_COLUMNS,
    FEW_ROWS,
    LONG_ROW,
    NestMapping,
)
from cudaperf_cli.policies.builtin.privatize import (
    Expansion,
    Snapshot,
    expand,
    scratch_fits,
    snapshot,
    split_chain,
)
from cudaperf_cli.policies.builtin.tiling import staged_operands, tile_parts
from cudaperf_cli.policies.builtin.transform import distribute, perfect_nest
from cudaperf_cli.policies.builtin.wavefront import describe as describe_wave
from cudaperf_cli.policies.builtin.wavefront import perfect_nest_of, wavefront

# ---------------------------------------------------------------------------------------
# Host program
# ---------------------------------------------------------------------------------------


@dataclass(eq=False)
class Site:
    """A loop nest that becomes a kernel (two for ``grid_reduce``: reset + reduce).

    Attributes:
        id: index in program order.
        root: the loop mapped onto the grid (a synthesised loop when interchanged).
        kind: ``"parallel"`` or ``"reduction"``.
        host_loops: enclosing loops kept on the host, outermost first.
        interchanged: ``(outer, inner)`` index names of the original nest when swapped.
        reduction: the reduction (``grid_reduce`` sites).
        options: applicable mappings, best first, each with its default block.
        dev_reads: scalars read by the kernel that live in ``__device__`` variables.
        red_var: the ``__device__`` scratch of a reduction site (``cp_red0``).
        transforms: the rewrites of the root's body (``transform.perfect_nest``), in words.
        tileable: its grid2d option has the product shape that ``tiling.tile_parts``
            register-tiles.
        stageable: tileable, with operands to stage in shared memory (a triangle's
            tiles load the bounding box's rows and columns)
            (``tiling.staged_operands``).
        expansions: arrays privatised for this nest (``privatize.py``): the launcher
            allocates their copies around the launch and copies the last one back.
        snapshots: arrays whose earlier values the nest reads from a copy the launcher
            takes before the launch (``privatize.snapshot``).
        scratch_opens, scratch_closes: this site's launch allocates those copies (and
            takes the snapshots) / writes the last privatised copies back and releases
            them; both for a nest that is one kernel, the first and the last of a
            privatised nest split into several (``privatize.split_chain``).
    """

    id: int
    root: For
    kind: str
    host_loops: tuple[str, ...]
    interchanged: tuple[str, str] | None = None
    reduction: Reduction | None = None
    options: list[NestMapping] = field(default_factory=list)
    dev_reads: set[str] = field(default_factory=set)
    red_var: str = ""
    transforms: tuple[str, ...] = ()
    tileable: bool = False
    stageable: bool = False
    expansions: tuple[Expansion, ...] = ()
    snapshots: tuple[Snapshot, ...] = ()
    scratch_opens: bool = False
    scratch_closes: bool = False


@dataclass(eq=False)
class HostStmt:
    """A statement run on the CPU (scalars only)."""

    stmt: Stmt


@dataclass(eq=False)
class HostLoop:
    """A loop kept on the CPU; ``body`` is scheduled recursively."""

    loop: For
    body: list[Op]
    why: str = ""


@dataclass(eq=False)
class HostIf:
    """An ``if`` with a host-computable condition around scheduled branches."""

    cond: Expr
    then: list[Op]
    orelse: list[Op]


@dataclass(eq=False)
class HostReturn:
    """``return;`` on the host (an early exit such as ``if (n <= 0) return;``)."""


@dataclass(eq=False)
class Launch:
    """Launch of the kernel(s) of a site."""

    site: Site


@dataclass(eq=False)
class Serial:
    """Statements run in program order by a one-thread kernel.

    Attributes:
        stmts: the statements (a ``grid_reduce`` combination may be among them).
        dev_in: scalars living on the device when the kernel starts.
        store: scalars written here that later code reads (kept in ``__device__`` copies).
        notes: why these statements are here.
        uploads: host scalars this kernel receives by value and stores in their
            ``__device__`` copies (before a host loop whose body keeps them on the device).
        threads: 1, or :data:`BLOCK_THREADS` for a *one-block kernel*: every thread runs
            the statements (scalars alike in all of them), array writes outside parallel
            loops by thread 0 between barriers, and the loops :func:`block_role` names
            spread over the block (see :func:`analyze`).
        float_sum: a one-block kernel that adds a floating-point sum across threads.
    """

    stmts: list[Stmt]
    dev_in: set[str]
    store: set[str] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)
    id: int = 0
    uploads: set[str] = field(default_factory=set)
    threads: int = 1
    float_sum: bool = False


Op = HostStmt | HostLoop | HostIf | HostReturn | Launch | Serial


@dataclass
class Analysis:
    """The scheduled function.

    Attributes:
        problem: the input problem.
        fn: the IR.
        dep: the dependence tester (cached verdicts).
        ops: the host program.
        sites: the kernel sites in program order.
        serials: the one-thread kernels in program order.
        reasons: why loops could not be parallelised (``"loop j: ..."``), deduplicated.
        device_scalars: scalars with a ``__device__`` copy.
        prefix: prefix of generated identifiers (``cp_``), not used by the C code.
        red_vars: per reduction site id, the ``__device__`` accumulator of partial sums.
        distributed: loops split by ``transform.distribute``: (index, line, how many
            loops), in program order.
        source_order: scheduled with floating-point sums in the C code's order
            (:func:`analyze`).
        waves: host loops over the hyperplanes of a wavefront (``wavefront.py``): index
            -> ``"wavefront -i+j"``.
        one_block_loops: scheduled with ``analyze(one_block_loops=True)``.
    """

    problem: CProblem
    fn: Function
    dep: Dependence
    ops: list[Op]
    sites: list[Site]
    serials: list[Serial]
    reasons: list[str]
    device_scalars: set[str]
    prefix: str
    red_vars: dict[int, str]
    distributed: list[tuple[str, int, int]] = field(default_factory=list)
    source_order: bool = False
    waves: dict[str, str] = field(default_factory=dict)
    one_block_loops: bool = False

    def loop_report(self) -> list[str]:
        """One line per loop of the function (program order): what the dependence test
        says, e.g. ``loop j (line 5): sum reduction into y[i]; not parallel: y[i] is
        written in every iteration (loop-carried dependence)``."""
        out = []
        for L in walk(self.fn.body):
            if not isinstance(L, For):
                continue
            v = self.dep.parallel(L)
            head = f"loop {L.var or '?'} (line {L.line})"
            if v.parallel:
                out.append(f"{head}: parallel")
                continue
            why = "; ".join(r.split(": ", 1)[-1] for r in v.reasons)
            red, _ = self.dep.reduction(L) if L.canonical else (None, "")
            reds = self.dep.reductions(L)[0] if L.canonical and red is None else []
            if red is not None:
                out.append(f"{head}: sum reduction into {red.acc_text}; not parallel: {why}")
            elif reds:
                out.append(f"{head}: sum reductions into "
                           f"{', '.join(r.acc_text for r in reds)}; not parallel: {why}")
            else:
                out.append(f"{head}: not parallel: {why}")
        return out

    def host_loop_names(self) -> tuple[str, ...]:
        """Indices of the loops kept on the host, in program order."""
        out: list[str] = []

        def visit(ops: Sequence[Op]) -> None:
            for op in ops:
                if isinstance(op, HostLoop):
                    var = op.loop.var or "?"
                    out.append("w=" + self.waves[var].split()[-1] if var in self.waves else var)
                    visit(op.body)
                elif isinstance(op, HostIf):
                    visit(op.then)
                    visit(op.orelse)

        visit(self.ops)
        return tuple(dict.fromkeys(out))


# ---------------------------------------------------------------------------------------
# Scheduling
# ---------------------------------------------------------------------------------------


@dataclass
class _State:
    device: set[str] = field(default_factory=set)

    def copy(self) -> _State:
        return _State(set(self.device))


def _choose_prefix(fn: Function) -> str:
    names = set(fn.scalar_params) | set(fn.locals) | set(fn.arrays)
    for p in ("cp_", "cpf_", "cudaperf_", "cp0_", "cp1_"):
        if not any(n.startswith(p) for n in names):
            return p
    raise PolicyRefusal("identifiers clash with the generated names (cp_...)")


#: Accumulator types whose sums change with the order of the additions.
FLOAT_TYPES = ("float", "double", "long double")

#: Threads of a one-block kernel (:attr:`Serial.threads`).
BLOCK_THREADS = 256

#: Accumulator types a one-block kernel sums with ``__shfl_down_sync``.
SHUFFLE_TYPES = (
    "float", "double", "int", "signed int", "unsigned", "unsigned int", "long", "long int",
    "long long", "long long int", "unsigned long", "unsigned long long", "int32_t",
    "uint32_t", "int64_t", "uint64_t", "size_t",
)  # fmt: skip


#: Index types narrower than int: a stride of a block or a grid can step such an index
#: past its largest value, where it wraps and the loop never ends (``short i < 32767``).
_NARROW_INDEX = ("short", "short int", "unsigned short", "unsigned short int", "char",
                 "signed char", "unsigned char", "int8_t", "uint8_t", "int16_t", "uint16_t")

#: Most sums a col_reduce adds at once: each takes a shared buffer of the block's size
#: (at 32x16 doubles, 4 KiB), under the 48 KiB of static shared memory.
MAX_COL_SUMS = 8


def strideable(dep: Dependence, loop: For) -> bool:
    """Threads may start ``loop`` at ``first +- threadIdx.x`` and step by the block: it
    counts up, or its index is signed (an unsigned index counting down would wrap past 0
    instead of ending the loop), and its index is at least as wide as an int."""
    T = normalize_ctype(loop.ctype or dep.fn.ctype_of(loop.var or "") or "")
    if T in _NARROW_INDEX:
        return False
    if loop.step > 0:
        # a signed index against an unsigned bound: C compares as unsigned (``-1 < m`` is
        # false: no iteration), the threads' own starts (``first + threadIdx.x``) would not
        return not (T in SIGNED_INTS and _unsigned_in(loop.bound, dep))
    return T in SIGNED_INTS


def _unsigned_in(e: Expr | None, dep: Dependence) -> bool:
    """``e`` reads an unsigned integer scalar or has an unsigned literal."""
    for x in iter_expr(e) if e is not None else ():
        if isinstance(x, Name):
            t = normalize_ctype(dep.fn.ctype_of(x.name) or "")
            if (C_TYPE_TO_DTYPE.get(t, "").startswith("uint") or t.startswith("unsigned")
                    or t == "uintptr_t"):
                return True
        elif isinstance(x, Const) and int_literal(x.text) is not None and "u" in x.text.lower():
            return True  # hex digits have no u: only the suffix does
    return False


def block_role(dep: Dependence, loop: For, source_order: bool) -> tuple[str, Reduction | None]:
    """How a one-block kernel runs ``loop``: ``("parallel", None)`` when its iterations are
    independent (the block's threads stride over them), ``("reduction", red)`` for a sum
    reduction whose accumulator the threads can add with shuffles (its updates summed per
    thread, then across the block; not a floating-point sum under ``source_order``), else
    ``("", None)``: every thread runs it."""
    if not loop.canonical or not loop.var or not strideable(dep, loop):
        return "", None
    if dep.parallel(loop).parallel:
        return "parallel", None
    red, _ = dep.reduction(loop)
    if red is None:
        return "", None
    T = normalize_ctype(red.ctype)
    if T not in SHUFFLE_TYPES or (source_order and T in FLOAT_TYPES):
        return "", None
    return "reduction", red

#: Integer types a triangular grid2d's bounds may use (their arithmetic is done in long long).
_SIGNED = ("int", "short", "long", "long int", "long long", "long long int", "signed char",
           "short int")


class _Scheduler:
    def __init__(self, problem: CProblem, fn: Function, source_order: bool = False,
                 one_block_loops: bool = False):
        self.problem = problem
        self.fn = fn
        self.source_order = source_order
        self.one_block_loops = one_block_loops
        self.dep = Dependence(fn)
        self.prefix = _choose_prefix(fn)
        self.reasons: list[str] = []
        self.distributed: list[tuple[str, int, int]] = []
        self.scalars = set(fn.scalar_params) | set(fn.locals)
        self._site_count = 0
        self._red_count = 0
        self._wave_count = 0
        self._expansion_count = 0
        self.waves: dict[str, str] = {}

    # -- predicates ---------------------------------------------------------------------

    def expr_host_ok(self, e: Expr | None, st: _State) -> bool:
        if e is None:
            return True
        for x in iter_expr(e):
            if isinstance(x, Index):
                return False
            if isinstance(x, Call) and x.func not in MATH_FUNCS:
                return False
        return not (names_in(e) & st.device) and names_in(e) <= self.scalars

    def stmt_host_ok(self, s: Stmt, st: _State) -> bool:
        if accesses([s]) or any(c.func not in MATH_FUNCS for c in calls_in([s])):
            return False
        if has_loop([s]) or any(isinstance(x, Jump) for x in walk([s])):
            return False
        touched = scalars_read([s]) | scalars_written([s])
        return not (touched & st.device)

    def bounds_host_ok(self, loop: For, st: _State) -> bool:
        return loop.canonical and self.expr_host_ok(loop.first, st) and self.expr_host_ok(loop.bound, st)

    def triangular_ok(self, P: For, Q: For, st: _State) -> bool:
        """``Q``'s bounds are linear in ``P``'s index (``for (j = 0; j <= i; j++)``), both
        loops count up by one, and every other name of the bounds (signed integers only)
        is known on the host: grid2d then covers the bounding box of the triangle, which
        the host computes from ``P``'s first and last values (a linear bound is extreme at
        an end), and each thread checks its element against ``Q``'s bounds."""
        if not (P.canonical and Q.canonical and P.var and P.step == 1 and Q.step == 1
                and Q.cmp in ("<", "<=") and self.bounds_host_ok(P, st)):
            return False
        def ctype(loop: For) -> str:
            return normalize_ctype(loop.ctype or self.fn.ctype_of(loop.var or "") or "")

        if ctype(P) not in _SIGNED or ctype(Q) not in _SIGNED:
            return False
        for e in (Q.first, Q.bound):
            f = affine(e) if e is not None else None
            if f is None or not f.is_linear():
                return False
            if any(isinstance(x, (Index, Call)) for x in iter_expr(e)):  # type: ignore[arg-type]
                return False
            for name in names_in(e) - {P.var}:
                t = normalize_ctype(self.fn.ctype_of(name) or "")
                if t not in _SIGNED or name not in self.scalars or name in st.device:
                    return False
        return True

    def reassociates(self, red: Reduction) -> bool:
        """A parallel sum of ``red`` would change its floating-point result's rounding and
        ``source_order`` forbids that (integer sums are exact in any order)."""
        return self.source_order and normalize_ctype(red.ctype) in FLOAT_TYPES

    def note(self, reasons: Sequence[str]) -> None:
        for r in reasons:
            if r not in self.reasons:
                self.reasons.append(r)

    # -- the walk -----------------------------------------------------------------------

    def schedule(self, stmts: Sequence[Stmt], host_loops: tuple[str, ...], st: _State) -> list[Op]:
        ops: list[Op] = []
        for s in stmts:
            if isinstance(s, For):
                ops.extend(self.loop(s, host_loops, st))
            elif isinstance(s, If) and has_loop([s]) and self.expr_host_ok(s.cond, st):
                st1, st2 = st.copy(), st.copy()
                then = self.schedule(s.then, host_loops, st1)
                orelse = self.schedule(s.orelse, host_loops, st2)
                st.device = st1.device | st2.device
                ops.append(HostIf(s.cond, then, orelse))
            elif isinstance(s, Jump) and s.kind == "return" and not host_loops:
                ops.append(HostReturn())
            elif (isinstance(s, If) and not host_loops and self.expr_host_ok(s.cond, st)
                  and all(isinstance(x, Jump) and x.kind == "return" for x in s.then + s.orelse)):
                ops.append(HostIf(s.cond, [HostReturn()] if s.then else [],
                                  [HostReturn()] if s.orelse else []))
            elif (isinstance(s, If) and s.then + s.orelse
                  and all(isinstance(x, Jump) and x.kind == "return" for x in s.then + s.orelse)):
                # in a kernel, 'return' would end that kernel only, not the launches after it
                raise PolicyRefusal(f"line {s.line}: 'return' under a condition computed on the "
                                    "device (from array data or device-side scalars) is not "
                                    "supported")
            elif isinstance(s, Jump):
                raise PolicyRefusal(f"line {s.line}: '{s.kind}' outside a loop is not supported")
            elif self.stmt_host_ok(s, st):
                ops.append(HostStmt(s))
            else:
                bad = [c.func for c in calls_in([s]) if c.func not in MATH_FUNCS]
                if bad:
                    raise PolicyRefusal(
                        f"line {s.line}: calls {bad[0]}(), which cannot run on the GPU"
                    )
                self.serial(ops, s, st, "touches array data or device-side scalars")
        return ops

    def serial(self, ops: list[Op], s: Stmt, st: _State, note: str) -> None:
        if ops and isinstance(ops[-1], Serial):
            grp = ops[-1]
        else:
            grp = Serial([], set(st.device))
            ops.append(grp)
        grp.stmts.append(s)
        grp.notes.append(note)
        live = self.dep.live.after(s)
        written = scalars_written([s]) & self.scalars
        # a declaration nested in a loop or branch is scoped there
        nested_decl = set()
        for x in walk([s]):
            if x is not s and isinstance(x, Decl):
                nested_decl.add(x.name)
        if isinstance(s, For) and s.ctype is not None:
            nested_decl.add(s.var)
        written -= nested_decl
        grp.store = {n for n in (grp.store | written) if n in live}
        st.device |= written
        st.device &= live  # a dead value needs no device copy

    def loop(self, L: For, host_loops: tuple[str, ...], st: _State) -> list[Op]:
        verdict = self.dep.parallel(L)
        if verdict.parallel and self.bounds_host_ok(L, st):
            nest, transforms = perfect_nest(self.dep, L)
            if transforms and not self.bounds_host_ok(nest.body[0], st):  # type: ignore[arg-type]
                nest, transforms = L, ()
            return [Launch(self.new_site(nest, "parallel", host_loops, st, verdict=verdict,
                                         transforms=transforms))]
        if not verdict.parallel:
            made = self.privatised(L, host_loops, st)
            if made is not None:
                return made
        if verdict.parallel:
            self.note([f"loop {L.var}: its bounds cannot be computed on the host"])
        else:
            self.note(verdict.reasons)
        red, _why = self.dep.reduction(L) if L.canonical else (None, "")
        if red is not None and not self.reassociates(red) and self.bounds_host_ok(L, st) \
                and self.dep.atomic_ok(red):
            site = self.new_site(L, "reduction", host_loops, st, reduction=red)
            site.red_var = f"{self.prefix}red{self._red_count}"
            self._red_count += 1
            ops: list[Op] = [Launch(site)]
            combine = red.combine(site.red_var, line=L.line)
            self.dep.live.alias(combine, L)
            self.serial(ops, combine, st, f"combines the sum of loop {L.var} into {red.acc_text}")
            return ops
        ok, why = self.dep.interchange(L)
        if ok and self.bounds_host_ok(L, st) and self.bounds_host_ok(L.body[0], st):  # type: ignore[arg-type]
            inner = L.body[0]
            assert isinstance(inner, For)
            new_inner = For(L.line, L.var, L.ctype, L.init, L.cond, L.update, inner.body,
                            L.canonical, L.reason, L.first, L.cmp, L.bound, L.step)
            new_outer = For(inner.line, inner.var, inner.ctype, inner.init, inner.cond,
                            inner.update, [new_inner], inner.canonical, inner.reason,
                            inner.first, inner.cmp, inner.bound, inner.step)
            self.dep.live.alias(new_outer, L)
            self.dep.live.alias(new_inner, L, inner)
            self.dep.keep(new_outer, new_inner)
            site = self.new_site(new_outer, "parallel", host_loops, st,
                                 interchanged=(L.var or "?", inner.var or "?"))
            return [Launch(site)]
        parts = distribute(self.dep, L)
        if parts:
            self.distributed.append((L.var or "?", L.line, len(parts)))
            dist: list[Op] = []
            for part in parts:
                dist.extend(self.loop(part, host_loops, st))
            return dist
        # a nest none of whose loops is parallel may still be, along hyperplanes; only at
        # the top level (inside a host loop, a launch per hyperplane and iteration is more
        # than the few launches a wavefront exists to save: floyd-warshall's k loop)
        if not host_loops and not self.source_order and self.bounds_host_ok(L, st) and \
                not any(self.dep.parallel(N).parallel for N in perfect_nest_of(L)[1:]):
            wave = f"{self.prefix}w{self._wave_count}"
            made = wavefront(self.dep, L, wave, self.fn.locals)
            if made is not None:
                self._wave_count += 1
                self.scalars |= {wave, f"{wave}_{perfect_nest_of(L)[-1].var}"}
                W, h = made
                self.waves[wave] = describe_wave(h, [N.var or "?" for N in perfect_nest_of(L)])
                for x in walk([W]):
                    if isinstance(x, For):
                        self.dep.live.alias(x, L)
                self.dep.live.alias(W, L)
                return self.loop(W, host_loops, st)
        # keep on the host when something inside is parallel
        if (
            L.var is not None
            and not own_jumps(L.body)
            and L.var not in scalars_written(L.body)
            and not (L.header_names() & scalars_written(L.body))
            and self.expr_host_ok(L.cond, st)
            and all(self.expr_host_ok(e, st) for h in (L.init, L.update) if h is not None
                    for e in own_exprs(h))
        ):
            inner_loops = (*host_loops, L.var)
            saved = (self._site_count, self._red_count)
            entry_device = set(st.device)
            trial_st = st.copy()
            body = self.schedule(L.body, inner_loops, trial_st)
            if _has_launch(body) and not self.source_order and (
                    _only_reductions(body) or (self.one_block_loops and _one_dim_sites(body))):
                # a launch per reduction and iteration costs more than one block that runs
                # the loop and adds each sum across its threads (trisolv, cholesky); with
                # one_block_loops, so may a launch per 1-D loop and iteration (durbin)
                self._site_count, self._red_count = saved
                ops1: list[Op] = []
                inside = "sums" if _only_reductions(body) else "sums and 1-D loops"
                self.serial(ops1, L, st, f"loop {L.var}: one block runs it (only {inside} "
                                         "are parallel inside)")
                return ops1
            if _has_launch(body):
                # the device set at the end of an iteration flows into the next one
                for _ in range(4):
                    if trial_st.device <= st.device:
                        break
                    st.device |= trial_st.device
                    self._site_count, self._red_count = saved
                    trial_st = st.copy()
                    body = self.schedule(L.body, inner_loops, trial_st)
                st.device |= trial_st.device
                why = verdict.reasons[0] if verdict.reasons else ""
                # A scalar the host holds at entry that an iteration leaves on the device:
                # the body reads its device copy, so the host value goes there first (else
                # the first iteration read an unset copy).
                uploads = ((st.device - entry_device) & self.scalars) - declared_in(L.body) - {L.var}
                if uploads:
                    up = Serial([], entry_device, store=set(uploads), uploads=set(uploads),
                                notes=[f"copies {', '.join(sorted(uploads))} to the device before "
                                       f"loop {L.var}"])
                    return [up, HostLoop(L, body, why)]
                return [HostLoop(L, body, why)]
            self._site_count, self._red_count = saved
        ops2: list[Op] = []
        why = verdict.reasons[0] if verdict.reasons else f"loop {L.var} is not parallel"
        self.serial(ops2, L, st, why)
        return ops2

    def privatised(self, L: For, host_loops: tuple[str, ...], st: _State) -> list[Op] | None:
        """``L``'s nest as parallel sites once its scratch arrays get a copy per iteration
        (``privatize.expand``; one site, or one per statement group after
        ``privatize.split_chain``) or, failing that, once the reads that see only an array's
        earlier values read a copy taken before it (``privatize.snapshot``); None when
        neither makes it parallel, or the copies would not fit (``scratch_fits``), or the
        launcher could not size them or write them back from the host."""
        exps: list[Expansion] = []
        snaps: list[Snapshot] = []
        split: list[For] | None = None
        # first with the copies laid out for a block per iteration (the chain split into a
        # loop per group of statements, threads over the array's own index), else laid out
        # for threads that differ in the chain's innermost index
        made = expand(self.dep, L, self.prefix, self._expansion_count, chain_first=True)
        if made is not None and not scratch_fits(self.fn, made[1], self.problem.sizes):
            for x in made[1]:
                del self.fn.arrays[x.name]
            self.note([f"loop {L.var}: a copy of {', '.join(x.array for x in made[1])} per "
                       "iteration would take more device memory than the function's arrays"])
            made = None
        if made is not None:
            # the collapsed index's name: unique, also when a host loop's body is
            # scheduled again (its fixpoint over device scalars)
            base = f"{self.prefix}{'_'.join(C.var or '' for C in made[1][0].loops)}"
            var, n = base, 1
            while var in self.scalars or var in self.fn.locals:
                var, n = f"{base}{n}", n + 1
            split = split_chain(self.dep, made[0], len(made[1][0].loops), var)
            if split:
                self.scalars.add(var)
            else:
                for x in made[1]:
                    del self.fn.arrays[x.name]
                self._expansion_count += len(made[1])
                made = expand(self.dep, L, self.prefix, self._expansion_count)
        if made is not None:
            new_L, exps = made
            loops: tuple[For, ...] = exps[0].loops
        else:
            made2 = snapshot(self.dep, L, self.prefix, self._expansion_count)
            if made2 is None:
                return None
            new_L, snaps = made2
            loops = (L,)
        names = [x.name for x in exps] + [x.name for x in snaps]
        # the launcher sizes the copies and writes the last one back from the host: the
        # chain's and the writing loop's headers and the arrays' extents must read there what
        # the kernels and the C function see (not a scalar assigned on the device, not an
        # array element, not a size the function changes)
        changed = scalars_written(self.fn.body)
        extents = [x.own_extent for x in exps]
        extents += [e for sn in snaps for e in self.fn.arrays[sn.array].extents]
        if (not all(self.bounds_host_ok(C, st) for C in loops)
                or not all(x.writer is not None and self.bounds_host_ok(x.writer, st) for x in exps)
                or any(set(re.findall(r"[A-Za-z_]\w*", e)) & changed for e in extents)):
            for n in names:
                del self.fn.arrays[n]
            return None
        self._expansion_count += len(names)
        done = tuple(x.describe() for x in [*exps, *snaps])
        parts = split or [new_L]
        if split:
            self.distributed.append((L.var or "?", L.line, len(split)))
        sites: list[Site] = []
        for part in parts:
            nest, transforms = perfect_nest(self.dep, part)
            if transforms and not self.bounds_host_ok(nest.body[0], st):  # type: ignore[arg-type]
                nest, transforms = part, ()
            site = self.new_site(nest, "parallel", host_loops, st,
                                 verdict=self.dep.parallel(part), transforms=(*done, *transforms))
            site.expansions, site.snapshots = tuple(exps), tuple(snaps)
            sites.append(site)
        sites[0].scratch_opens = sites[-1].scratch_closes = True
        return [Launch(s) for s in sites]

    # -- sites --------------------------------------------------------------------------

    def new_site(self, root: For, kind: str, host_loops: tuple[str, ...], st: _State,
                 verdict: Verdict | None = None, reduction: Reduction | None = None,
                 interchanged: tuple[str, str] | None = None,
                 transforms: tuple[str, ...] = ()) -> Site:
        proof = self.dep.proofs.get(id(root))
        if proof:
            transforms = (proof, *transforms)
        site = Site(self._site_count, root, kind, host_loops, interchanged, reduction,
                    transforms=transforms)
        self._site_count += 1
        site.dev_reads = (scalars_read([root]) | scalars_written([root])) & st.device
        if reduction is not None and isinstance(reduction.acc, Name):
            site.dev_reads.discard(reduction.acc.name)  # the kernel only adds to a scratch
        site.options = self.options(site, st)
        return site

    def options(self, site: Site, st: _State) -> list[NestMapping]:
        P = site.root
        p = P.var or "?"
        hl = site.host_loops
        if site.kind == "reduction":
            red = site.reduction
            assert red is not None
            seq = tuple(x.var or "?" for x in _loops_below(P))
            return [NestMapping(site.id, "grid_reduce", BLOCKS["grid_reduce"][0], ((p, "grid"),),
                                seq, hl, None, red.acc_text)]
        body = P.body
        opts: dict[str, NestMapping] = {}
        top_loops = [s for s in body if isinstance(s, For)]
        others = [s for s in body if not isinstance(s, For)]
        p_continue = any(j.kind == "continue" for j in own_jumps(body))
        # grid2d: perfectly nested parallel pair
        if len(body) == 1 and isinstance(body[0], For):
            Q = body[0]
            q = Q.var or "?"
            vq = self.dep.parallel(Q)
            rect = p not in Q.header_names() and self.bounds_host_ok(Q, st)
            if (vq.parallel and (rect or self.triangular_ok(P, Q, st))
                    and not (Q.header_names() & scalars_written(body))):
                x, y = (q, p) if self._x_score(Q, p, q) >= 0 else (p, q)
                seq = tuple(s.var or "?" for s in _loops_below(Q))
                opts["grid2d"] = NestMapping(site.id, "grid2d", BLOCKS["grid2d"][0],
                                             ((y, "y"), (x, "x")), seq, hl, site.interchanged)
                parts = tile_parts(P, Q)
                site.tileable = parts is not None
                site.stageable = bool(parts is not None and staged_operands(parts, y, x)
                                      and (rect or self._stageable_triangle(P, Q)))
        if len(top_loops) == 1 and not any(has_loop([s]) for s in others) and not p_continue:
            Q = top_loops[0]
            q = Q.var or "?"
            idx = body.index(Q)
            pre = body[:idx]
            split_ok = all(not (arrays_written([s]) and scalars_written([s])) for s in pre)
            seq = tuple(s.var or "?" for s in _loops_below(Q))
            if split_ok and Q.canonical and strideable(self.dep, Q):
                if self.dep.parallel(Q).parallel:
                    opts["block_per_row"] = NestMapping(
                        site.id, "block_per_row", BLOCKS["block_per_row"][0],
                        ((p, "block"), (q, "thread")), seq, hl, site.interchanged)
                else:
                    # one sum, or several independent ones (gesummv's tmp[i] and y[i]): each
                    # lane keeps a partial sum of each, the warp adds each with shuffles
                    reds = self.dep.sums(Q)
                    if (reds and not any(self.reassociates(r) for r in reds)
                            and all(normalize_ctype(r.ctype) in SHUFFLE_TYPES for r in reds)):
                        acc = ", ".join(r.acc_text for r in reds)
                        opts["warp_reduce"] = NestMapping(
                            site.id, "warp_reduce", BLOCKS["warp_reduce"][0],
                            ((p, "warp"), (q, "lane")), seq, hl, site.interchanged,
                            acc, sums=len(reds))
                        # a block per iteration of P (few long rows), or a tile of P's
                        # iterations along x with Q split along y (sums down columns)
                        opts["block_reduce"] = NestMapping(
                            site.id, "block_reduce", BLOCKS["block_reduce"][0],
                            ((p, "block"), (q, "thread")), seq, hl, site.interchanged,
                            acc, sums=len(reds))
                        if (all(arrays_written([s]) and not scalars_written([s]) for s in pre)
                                and len(reds) <= MAX_COL_SUMS):
                            # (statements before the sum: array writes only, by each column's
                            # first thread) split over blocks too when the sum is all the
                            # body does
                            post = body[idx + 1:]
                            split = (not pre and not post
                                     and all(isinstance(r.acc, Index) and self.dep.atomic_ok(r)
                                             for r in reds))
                            opts["col_reduce"] = NestMapping(
                                site.id, "col_reduce", BLOCKS["col_reduce"][0],
                                ((p, "x"), (q, "y")), seq, hl, site.interchanged,
                                acc, sums=len(reds), split=split)
        seq = tuple(s.var or "?" for s in _loops_below(P))
        opts["grid1d"] = NestMapping(site.id, "grid1d", BLOCKS["grid1d"][0], ((p, "x"),), seq,
                                     hl, site.interchanged)
        order = ["grid2d"]
        trip = self._trip_at_sizes(P)
        # block_reduce and col_reduce only for sums known to be long at the problem's sizes
        # (a sparse row's length is not)
        long_sum = "warp_reduce" in opts and (self._trip_at_sizes(top_loops[0]) or 0) >= LONG_ROW
        if "warp_reduce" in opts and self._row_reduction(opts, P):
            # rows: a warp per row, or a block per row when there are too few rows for the
            # warps to fill the device (and no column sum is coalesced)
            opts.pop("col_reduce", None)
            if not long_sum:
                opts.pop("block_reduce", None)
            few = trip is not None and trip < FEW_ROWS
            order += (["block_reduce", "warp_reduce"] if few else ["warp_reduce", "block_reduce"])
            order += ["block_per_row", "grid1d"]
        elif "warp_reduce" in opts:
            # sums down columns: a thread per column keeps the C code's order, but too few
            # columns leave most of the device idle; then the column's sum is split
            opts.pop("block_reduce", None)
            if not long_sum:
                opts.pop("col_reduce", None)
            few = trip is not None and trip < FEW_COLUMNS
            order += (["col_reduce", "block_per_row", "grid1d"] if few
                      else ["block_per_row", "grid1d", "col_reduce"])
            order += ["warp_reduce"]
        else:
            order += ["block_per_row", "grid1d"]
        return [replace(opts[k], transforms=site.transforms) for k in order if k in opts]

    @staticmethod
    def _stageable_triangle(P: For, Q: For) -> bool:
        """A triangle whose bounds move by at most one a row (coefficients of ``P``'s index
        in -1, 0, 1): the rows' ranges of ``Q`` then join without gaps, so every column of
        the bounding box is read by some row and staging may load it; rows of ``P`` whose
        range is empty are not loaded (``codegen``: the load checks the row)."""
        for e in (Q.first, Q.bound):
            f = affine(e) if e is not None else None
            if f is None or abs(f.coeff(P.var or "")) > 1:
                return False
        return True

    def _trip_at_sizes(self, L: For) -> int | None:
        """``L``'s iteration count at the problem's sizes, or None when its bounds name
        something the sizes do not give (another loop's index, a computed scalar)."""
        if not L.canonical or L.first is None or L.bound is None or abs(L.step) != 1:
            return None
        try:
            first = eval_int_expr(c_text(L.first), self.problem.sizes)
            bound = eval_int_expr(c_text(L.bound), self.problem.sizes)
        except (ValueError, ProblemError):
            return None
        span = bound - first if L.step > 0 else first - bound
        return max(span + (1 if L.cmp in ("<=", ">=") else 0), 0)

    def _row_reduction(self, opts: dict[str, NestMapping], P: For) -> bool:
        """The reduction loop walks arrays contiguously: every direct access that depends
        on its index has it, with coefficient +-1, in the last subscript only (indirect
        accesses such as ``x[col[k]]`` are ignored)."""
        R = next(s for s in P.body if isinstance(s, For))
        r = R.var or "?"
        found = False
        for a in accesses(R.body):
            subs = a.index.subs
            direct = [names_in(x) if not any(isinstance(y, Index) for y in iter_expr(x)) else set()
                      for x in subs]
            if not any(r in d for d in direct):
                continue
            f = affine(subs[-1])
            if any(r in d for d in direct[:-1]) or f is None or abs(f.coeff(r)) != 1:
                return False
            found = True
        return found

    @staticmethod
    def _x_score(Q: For, p: str, q: str) -> int:
        score = 0
        for a in accesses(Q.body):
            last = names_in(a.index.subs[-1])
            w = 2 if a.write else 1
            if q in last:
                score += w
            if p in last:
                score -= w
        return score


def _loops_below(loop: For) -> list[For]:
    out: list[For] = []
    for s in walk(loop.body):
        if isinstance(s, For) and s.var not in [x.var for x in out]:
            out.append(s)
    return out


def _has_launch(ops: Sequence[Op]) -> bool:
    for op in ops:
        if isinstance(op, Launch):
            return True
        if isinstance(op, HostLoop) and _has_launch(op.body):
            return True
        if isinstance(op, HostIf) and (_has_launch(op.then) or _has_launch(op.orelse)):
            return True
    return False


def _only_reductions(ops: Sequence[Op]) -> bool:
    """Every kernel launched in ``ops`` (host loops and branches included) is a reduction."""
    for op in ops:
        if isinstance(op, Launch) and op.site.kind != "reduction":
            return False
        if isinstance(op, HostLoop) and not _only_reductions(op.body):
            return False
        if isinstance(op, HostIf) and not (_only_reductions(op.then)
                                           and _only_reductions(op.orelse)):
            return False
    return True


def _one_dim_sites(ops: Sequence[Op]) -> bool:
    """Every kernel launched in ``ops`` is a reduction or a parallel loop with no loop
    inside, and no host loop is nested in ``ops``."""
    for op in ops:
        if isinstance(op, Launch) and op.site.kind != "reduction" and (
                op.site.interchanged or has_loop(op.site.root.body)):
            return False
        if isinstance(op, HostLoop):
            return False
        if isinstance(op, HostIf) and not (_one_dim_sites(op.then) and _one_dim_sites(op.orelse)):
            return False
    return True


def _one_block(g: Serial, dep: Dependence, source_order: bool) -> None:
    """Make ``g`` a one-block kernel when some loop in it can spread over a block."""
    roles = [block_role(dep, L, source_order) for L in walk(g.stmts) if isinstance(L, For)]
    if any(role for role, _ in roles):
        g.threads = BLOCK_THREADS
        g.float_sum = any(red is not None and normalize_ctype(red.ctype) in FLOAT_TYPES
                          for _, red in roles)


def _collect(ops: Sequence[Op], sites: list[Site], serials: list[Serial]) -> None:
    for op in ops:
        if isinstance(op, Launch):
            sites.append(op.site)
        elif isinstance(op, Serial):
            op.id = len(serials)
            serials.append(op)
        elif isinstance(op, HostLoop):
            _collect(op.body, sites, serials)
        elif isinstance(op, HostIf):
            _collect(op.then, sites, serials)
            _collect(op.orelse, sites, serials)


def analyze(problem: CProblem, source_order: bool = False, one_thread_ok: bool = False,
            one_block_loops: bool = False) -> Analysis:
    """Parse and schedule ``problem``'s function.

    A one-thread kernel that holds a loop :func:`block_role` can spread (a parallel loop, a
    sum) becomes a one-block kernel (:attr:`Serial.threads`); so does a loop that would stay
    on the host with only reductions inside (one launch per sum and iteration otherwise).

    ``source_order``: no floating-point sum is split across threads (no ``grid_reduce``
    site, no ``warp_reduce`` mapping); every such sum runs in one thread in the order the
    C code adds, so the results are bit-identical to the C code's where the rest of the
    mapping keeps the order too; with ``one_thread_ok``, a function with nothing parallel
    left is not refused (its one-thread kernels are the fallback of a function whose only
    parallel work is in one-block kernels).  Used for the plan's fallback entry: an ill-conditioned
    problem (PolyBench's ``gramschmidt`` with fewer rows than columns orthogonalises
    columns whose norm is rounding noise) has no tolerance a reordered sum meets.

    ``one_block_loops``: a sequential loop whose parallel work inside is reductions and
    1-D loops (no loop inside them, no host loop) becomes a one-block kernel too (durbin,
    jacobi-1d: one launch instead of several per iteration; right when the 1-D loops are
    short). Used for one more entry of the plan.

    Raises:
        PolicyRefusal: unsupported source, or no loop can run in parallel (the message lists
            the reason for every loop).
    """
    fn = parse_function(problem)
    _check_supported(fn)
    sch = _Scheduler(problem, fn, source_order, one_block_loops)
    st = _State()
    ops = sch.schedule(fn.body, (), st)
    sites: list[Site] = []
    serials: list[Serial] = []
    _collect(ops, sites, serials)
    for g in serials:
        _one_block(g, sch.dep, source_order)
    # a function whose only parallel work is in one-block kernels (trisolv) is accepted;
    # so is its source-order fallback, one thread throughout, when asked (one_thread_ok)
    if not sites and not any(g.threads > 1 for g in serials) and not (one_thread_ok and serials):
        if not any(isinstance(s, For) for s in walk(fn.body)):
            raise PolicyRefusal(f"'{fn.name}' has no loop to parallelise")
        lines = "\n".join("  " + r for r in sch.reasons) or "  (no parallel loop found)"
        raise PolicyRefusal(f"no loop of '{fn.name}' can run in parallel:\n{lines}")
    for i, s in enumerate(sites):
        s.id = i
        s.options = [_renumber(o, i) for o in s.options]
    device_scalars: set[str] = set()
    for g in serials:
        device_scalars |= g.store | (g.dev_in & _touched(g.stmts))
    for s in sites:
        device_scalars |= s.dev_reads
    red_vars = {s.id: s.red_var for s in sites if s.kind == "reduction"}
    return Analysis(problem, fn, sch.dep, ops, sites, serials, sch.reasons, device_scalars,
                    sch.prefix, red_vars, sch.distributed, source_order, sch.waves,
                    one_block_loops)


def _check_supported(fn: Function) -> None:
    """Refuse functions that use unknown identifiers (globals), call anything but known
    math functions, or return from inside a loop."""
    known = set(fn.scalar_params) | set(fn.locals)
    for s in walk(fn.body):
        for e in own_exprs(s):
            for x in iter_expr(e):
                if isinstance(x, Name) and x.name not in known:
                    raise PolicyRefusal(
                        f"line {s.line}: '{x.name}' is neither a parameter nor a local variable "
                        "(global variables are not supported)"
                    )
    allowed = set()
    for s in fn.body:
        if isinstance(s, Jump):
            allowed.add(id(s))
        elif isinstance(s, If) and all(isinstance(x, Jump) and x.kind == "return"
                                       for x in s.then + s.orelse):
            allowed |= {id(x) for x in s.then + s.orelse}
    # C fixes a variably modified array's extents when the function is entered; the CUDA
    # indexes flat arrays with the size parameters as they are at each access.  The first
    # extent is in no stride (copies sized from it are refused where they are made)
    assigned = scalars_written(fn.body)
    for a in fn.arrays.values():
        for e in a.extents[1:]:
            for name in sorted(set(re.findall(r"[A-Za-z_]\w*", e)) & assigned):
                raise PolicyRefusal(
                    f"'{name}' is assigned in '{fn.name}' and is in the extents of '{a.name}' "
                    f"({a.name}[{']['.join(a.extents)}]): C keeps the extents of the call, the "
                    "generated indices would use the new value")
    for s in walk(fn.body):
        if isinstance(s, Jump) and s.kind == "return" and id(s) not in allowed:
            raise PolicyRefusal(
                f"line {s.line}: 'return' inside a loop or nested block is not supported "
                "(the rest of the function would still run on the GPU)"
            )
    for s in walk(fn.body):
        for e in own_exprs(s):
            for x in iter_expr(e):
                if isinstance(x, Call) and x.func not in MATH_FUNCS:
                    dep = Dependence(fn)
                    reasons = []
                    for L in walk(fn.body):
                        if isinstance(L, For) and any(c is x for c in calls_in(L.body)):
                            reasons += [r for r in dep.parallel(L).reasons if x.func in r]
                    lines = "".join(f"\n  {r}" for r in reasons)
                    raise PolicyRefusal(
                        f"'{fn.name}' calls {x.func}() (line {s.line}); the built-in policy only "
                        f"calls known math functions (sqrt, exp, fabs, ...) on the GPU{lines}"
                    )


def _renumber(o: NestMapping, i: int) -> NestMapping:
    return replace(o, site=i)


def _touched(stmts: Sequence[Stmt]) -> set[str]:
    return scalars_read(stmts) | scalars_written(stmts)


__all__ = [
    "Analysis",
    "HostIf",
    "HostLoop",
    "HostReturn",
    "HostStmt",
    "Launch",
    "Op",
    "Serial",
    "Site",
    "analyze",
]
