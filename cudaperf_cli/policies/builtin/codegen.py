"""CUDA source generation for a scheduled function and one :class:`Mapping`.

The output is one ``.cu`` text: a header comment (which loop maps to which grid
dimension, block shapes, what stays sequential in each thread, what stays on the host),
the kernels, and ``extern "C" int <fn>_cuda(...)`` which launches them on the default
stream and returns the CUDA error code.

Expressions are copied as written (literals, casts and the usual arithmetic conversions
of C are kept), with three rewrites: array accesses become row-major offsets into flat
pointers (``A[i][j]`` with extents ``(n, m)`` -> ``A[(size_t)i * m + j]``); calls of C's
double-precision math functions get ``(double)`` casts of their arguments when the problem
uses ``float`` (C++ overloads would otherwise compute them in single precision); and the
accumulator of a reduction is replaced by a per-thread partial sum.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import NamedTuple

from cudaperf_cli.core import ArrayParam, ScalarParam, normalize_ctype
from cudaperf_cli.policies.base import PolicyRefusal
from cudaperf_cli.policies.builtin.analysis import (
    Analysis,
    block_role,
    HostIf,
    HostLoop,
    HostReturn,
    HostStmt,
    Launch,
    Op,
    Serial,
    Site,
)
from cudaperf_cli.policies.builtin.dependence import Reduction, exposed_reads
from cudaperf_cli.policies.builtin.ir import (
    Assign,
    Binary,
    Call,
    Cast,
    Const,
    Decl,
    Expr,
    ExprStmt,
    For,
    If,
    Index,
    iter_expr,
    Jump,
    MATH_FUNCS,
    MATH_RETURNS,
    Name,
    Paren,
    Printer,
    Stmt,
    Ternary,
    Unary,
    accesses,
    arrays_written,
    c_text,
    declared_in,
    names_in,
    scalars_read,
    scalars_written,
    walk,
)
from cudaperf_cli.policies.builtin.mapping import SPLIT_SUMS, Mapping, NestMapping, block_text
from cudaperf_cli.policies.builtin.tiling import STAGE_K, TileParts, staged_operands, tile_parts

IND = "    "
_MAX_GRID_X = 1048576  # grid-stride loops cover the rest
_MAX_GRID_Y = 65535
_MAX_REDUCE_BLOCKS = 1024
#: A split col_reduce launches about this many blocks when its columns alone give fewer
#: (4 per SM of an H200's 132), at most SPLIT_MAX_Y along y.
SPLIT_TARGET_BLOCKS = 528
SPLIT_MAX_Y = 64

_ARITH = {"+", "-", "*", "/", "%"}

#: integer types by conversion rank, for the usual arithmetic conversions
_INT_RANK = ("int", "unsigned int", "long", "unsigned long", "long long",
             "unsigned long long")
#: C type spellings -> the type they behave as in arithmetic (LP64)
_ALIASES = {"unsigned": "unsigned int", "signed int": "int", "long int": "long",
            "long long int": "long long", "size_t": "unsigned long", "int32_t": "int",
            "uint32_t": "unsigned int", "int64_t": "long", "uint64_t": "unsigned long",
            "short": "int", "unsigned short": "int", "char": "int", "signed char": "int",
            "unsigned char": "int", "int8_t": "int", "uint8_t": "int", "int16_t": "int",
            "uint16_t": "int"}


def _is_atom(e: Expr) -> bool:
    if isinstance(e, Const):
        return not e.text.startswith("-")
    return isinstance(e, (Name, Index, Call, Paren))


def _ext(text: str) -> str:
    t = text.strip()
    return t if re.fullmatch(r"[A-Za-z_]\w*|\d+", t) else f"({t})"


def local_array_name(an: Analysis, array: str) -> str:
    """The generated name of ``array``: a local array is a ``static __device__`` array
    ``<prefix>la_<name>`` (its C name could clash with a global: math.h's ``y1``, CUDA's
    ``threadIdx``, the wrapper); a parameter keeps its name."""
    return f"{an.prefix}la_{array}" if array in an.fn.local_arrays else array


class DevicePrinter(Printer):
    """Prints expressions for device code: flat row-major array accesses, math calls with
    C's argument types, optional renaming of scalars."""

    def __init__(self, an: Analysis, rename: dict[str, str] | None = None):
        self.an = an
        self.rename = rename or {}
        # A source-order analysis reproduces the C code's rounding: floating-point products
        # are printed as __dmul_rn/__fmul_rn, which nvcc never contracts into an FMA with
        # the sum that follows (gcc -O3 on x86-64 emits no FMA without -march), so every
        # operation rounds as the CPU reference's does.
        self.no_contract = an.source_order

    _MUL_RN = {"double": "__dmul_rn", "float": "__fmul_rn"}

    def expr(self, e: Expr) -> str:
        """C text of ``e`` (floating products as ``__dmul_rn`` in a source-order analysis)."""
        if self.no_contract and isinstance(e, Binary) and e.op == "*":
            fn = self._MUL_RN.get(self.type_of(e) or "")
            if fn:
                return f"{fn}({self.expr(e.left)}, {self.expr(e.right)})"
        return super().expr(e)

    def mul_assign(self, target: Expr, value: Expr) -> str | None:
        """``t *= v`` as ``t = __dmul_rn(t, v)`` when products are printed uncontracted, in
        the type C multiplies in (``float t *= 1.1`` multiplies in double, then converts)."""
        kind = self._usual(self.type_of(target), self.type_of(value))
        fn = self._MUL_RN.get(kind or "") if self.no_contract else None
        if fn is None:
            return None
        t = self.expr(target)
        return f"{t} = {fn}({t}, {self.expr(value)})"

    def name(self, e: Name) -> str:
        """The identifier, renamed when asked."""
        return self.rename.get(e.name, e.name)

    def wrap(self, e: Expr) -> str:
        """``e`` as an operand of a cast or product (parenthesised unless atomic)."""
        t = self.expr(e)
        return t if _is_atom(e) else f"({t})"

    def index(self, e: Index) -> str:
        """Row-major offset into the flat pointer: ``A[(size_t)i * m + j]`` (a local array
        is the ``static __device__`` array ``cp_la_<name>``)."""
        arr = self.an.fn.arrays[e.array]
        name = local_array_name(self.an, e.array)
        if len(e.subs) == 1:
            return f"{name}[{self.expr(e.subs[0])}]"
        off = f"(size_t){self.wrap(e.subs[0])}"
        for d in range(1, len(e.subs)):
            if d > 1:
                off = f"({off})"
            off = f"{off} * {_ext(arr.extents[d])} + {self.wrap(e.subs[d])}"
        return f"{name}[{off}]"

    def call(self, e: Call) -> str:
        """Math calls: arguments are cast to the C parameter type when their type differs
        (C converts them implicitly; CUDA C++ would pick another overload)."""
        ptype = MATH_FUNCS.get(e.func, "")
        args = []
        for a in e.args:
            at = self.type_of(a)
            if ptype in ("double", "int", "long", "long long") and at != ptype:
                args.append(f"({ptype}){self.wrap(a)}")
            else:
                args.append(self.expr(a))
        return f"{e.func}(" + ", ".join(args) + ")"

    # -- C types of expressions (enough to keep C's conversions at math calls) ---------

    def _norm(self, t: str | None) -> str | None:
        if t is None:
            return None
        t = normalize_ctype(t)
        return _ALIASES.get(t, t)

    def _usual(self, a: str | None, b: str | None) -> str | None:
        if a is None or b is None:
            return None
        for f in ("long double", "double", "float"):
            if f in (a, b):
                return f
        if a in _INT_RANK and b in _INT_RANK:
            return max(a, b, key=_INT_RANK.index)
        return None

    def type_of(self, e: Expr) -> str | None:
        """The C type of ``e`` after the usual conversions (None when unknown)."""
        if isinstance(e, Name):
            return self._norm(self.an.fn.ctype_of(e.name))
        if isinstance(e, Const):
            t = e.text.lower()
            if t.startswith("'"):
                return "int"
            if re.fullmatch(r"-?(0x[0-9a-f]+|\d+)[ul]*", t):
                suf = re.sub(r"^-?(0x[0-9a-f]+|\d+)", "", t)
                return {"": "int", "u": "unsigned int", "l": "long", "ul": "unsigned long",
                        "lu": "unsigned long", "ll": "long long", "ull": "unsigned long long",
                        "llu": "unsigned long long"}.get(suf)
            if t.endswith("f"):
                return "float"
            if t.endswith("l"):
                return "long double"
            return "double"
        if isinstance(e, Index):
            return self._norm(self.an.fn.arrays[e.array].ctype)
        if isinstance(e, Paren):
            return self.type_of(e.inner)
        if isinstance(e, Cast):
            return self._norm(e.ctype)
        if isinstance(e, Call):
            return MATH_RETURNS.get(e.func)
        if isinstance(e, Unary):
            if e.op == "!":
                return "int"
            return self._usual(self.type_of(e.operand), "int")
        if isinstance(e, Binary):
            if e.op in ("<", "<=", ">", ">=", "==", "!=", "&&", "||"):
                return "int"
            if e.op in ("<<", ">>"):
                return self._usual(self.type_of(e.left), "int")
            return self._usual(self.type_of(e.left), self.type_of(e.right))
        if isinstance(e, Ternary):
            return self._usual(self.type_of(e.then), self.type_of(e.other))
        return None


class _SubstPrinter(DevicePrinter):
    """A device printer that prints some array accesses (by identity) as other text."""

    def __init__(self, an: Analysis, subst: dict[int, str]):
        super().__init__(an)
        self.subst = subst

    def index(self, e: Index) -> str:
        """The substitute of ``e`` when it has one (a shared-memory cell), else ``e``."""
        return self.subst.get(id(e)) or super().index(e)

    def expr(self, e: Expr) -> str:
        """The substitute of ``e`` when it has one (a staged product), else ``e``."""
        return self.subst.get(id(e)) or super().expr(e)


class StmtWriter:
    """Prints statements with a printer; ``subst`` replaces statements (by identity)."""

    def __init__(self, printer: Printer, subst: dict[int, Stmt] | None = None):
        self.p = printer
        self.subst = subst or {}

    def header_part(self, s: Stmt | None) -> str:
        """A declaration or assignment without its semicolon (for ``for`` headers)."""
        if s is None:
            return ""
        if isinstance(s, Decl):
            init = f" = {self.p.expr(s.init)}" if s.init is not None else ""
            return f"{s.ctype} {s.name}{init}"
        assert isinstance(s, Assign)
        return self.assign(s)

    def assign(self, s: Assign) -> str:
        """An assignment without its semicolon."""
        if s.op == "*=" and isinstance(self.p, DevicePrinter) and s.value is not None:
            text = self.p.mul_assign(s.target, s.value)
            if text is not None:
                return text
        t = self.p.expr(s.target)
        if s.op in ("++", "--"):
            return f"{s.op}{t}" if s.prefix else f"{t}{s.op}"
        return f"{t} {s.op} {self.p.expr(s.value)}"  # type: ignore[arg-type]

    def stmts(self, stmts: Sequence[Stmt], ind: str) -> list[str]:
        """Lines of ``stmts`` at indentation ``ind``."""
        out: list[str] = []
        for s in stmts:
            out += self.stmt(s, ind)
        return out

    def stmt(self, s: Stmt, ind: str) -> list[str]:
        """Lines of one statement (after substitution)."""
        s = self.subst.get(id(s), s)
        if isinstance(s, Decl):
            return [ind + self.header_part(s) + ";"]
        if isinstance(s, Assign):
            return [ind + self.assign(s) + ";"]
        if isinstance(s, ExprStmt):
            return [ind + self.p.expr(s.expr) + ";"]
        if isinstance(s, Jump):
            return [ind + s.kind + ";"]
        if isinstance(s, If):
            out = [ind + f"if ({self.p.expr(s.cond)}) {{"]
            out += self.stmts(s.then, ind + IND)
            cur = s
            while len(cur.orelse) == 1 and isinstance(cur.orelse[0], If) and id(cur.orelse[0]) not in self.subst:
                cur = cur.orelse[0]
                out.append(ind + f"}} else if ({self.p.expr(cur.cond)}) {{")
                out += self.stmts(cur.then, ind + IND)
            if cur.orelse:
                out.append(ind + "} else {")
                out += self.stmts(cur.orelse, ind + IND)
            out.append(ind + "}")
            return out
        if isinstance(s, For):
            return self.for_loop(s, ind, self.header_part(s.init), self.p.expr(s.cond) if s.cond else "",
                                 self.header_part(s.update))
        raise TypeError(s)

    def for_loop(self, s: For, ind: str, init: str, cond: str, update: str) -> list[str]:
        """Lines of a ``for`` loop with the given header parts."""
        out = [ind + f"for ({init}; {cond}; {update}) {{"]
        out += self.stmts(s.body, ind + IND)
        out.append(ind + "}")
        return out


class BlockWriter(StmtWriter):
    """Statements of a one-block kernel (:attr:`Serial.threads` > 1).

    Every thread runs the statements, so the scalars hold the same values in all of them;
    a statement that writes an array runs in thread 0 between two ``__syncthreads()`` (the
    other threads' reads of the old value come before it, their reads of the new one after
    it); a loop that :func:`~cudaperf_cli.policies.builtin.analysis.block_role` calls
    parallel is strided over the threads between two barriers, and a sum reduction is added
    per thread, then across the block (shuffles within each warp, the warp sums through
    shared memory, every thread adding them in the same order), and combined into the
    accumulator as the C code does.  Any other loop runs in every thread, its body written
    by these rules.
    """

    def __init__(self, gen: _Gen, printer: Printer, source_order: bool):
        super().__init__(printer)
        self.gen = gen
        self.source_order = source_order
        self.sums: list[str] = []  # shared-memory declarations of the block sums

    def stmts(self, stmts: Sequence[Stmt], ind: str) -> list[str]:
        out: list[str] = []
        group: list[Stmt] = []

        def flush() -> None:
            if group:
                out.append(ind + "__syncthreads();")
                out.append(ind + "if (threadIdx.x == 0) {")
                for x in group:  # straight-line statements: the plain printer
                    out.extend(StmtWriter.stmt(self, x, ind + IND))
                out.append(ind + "}")
                out.append(ind + "__syncthreads();")
                group.clear()

        for s in stmts:
            s = self.subst.get(id(s), s)
            if isinstance(s, (Assign, ExprStmt, Decl)) and arrays_written([s]):
                group.append(s)
                continue
            flush()
            out += self.stmt(s, ind)
        flush()
        return out

    def stmt(self, s: Stmt, ind: str) -> list[str]:
        s = self.subst.get(id(s), s)
        if isinstance(s, For):
            role, red = block_role(self.gen.an.dep, s, self.source_order)
            if role == "parallel":
                return self.parallel(s, ind)
            if role == "reduction":
                assert red is not None
                return self.reduction(s, red, ind)
        if isinstance(s, (Assign, ExprStmt, Decl)) and arrays_written([s]):
            return self.stmts([s], ind)
        return super().stmt(s, ind)

    def parallel(self, L: For, ind: str) -> list[str]:
        T = L.ctype or self.gen.ctype(L.var or "?")
        init, cond, upd = self.gen.offset_header(L, self.p, f"({T})threadIdx.x", f"({T})blockDim.x")
        out = [ind + f"__syncthreads();  /* loop {L.var}: its iterations spread over the block */",
               ind + f"for ({init}; {cond}; {upd}) {{"]
        out += StmtWriter(self.p).stmts(L.body, ind + IND)
        out += [ind + "}", ind + "__syncthreads();"]
        return out

    def reduction(self, L: For, red: Reduction, ind: str) -> list[str]:
        P = self.gen.P
        k = len(self.sums)
        part, sums = f"{P}bpart{k}", f"{P}bsum{k}"
        T = red.ctype
        self.sums.append(f"__shared__ {T} {sums}[32];  /* warp sums of loop {L.var} (line {L.line}) */")
        V = L.ctype or self.gen.ctype(L.var or "?")
        init, cond, upd = self.gen.offset_header(L, self.p, f"({V})threadIdx.x", f"({V})blockDim.x")
        w = StmtWriter(self.p, {id(u): red.rewrite(u, part) for u in red.updates})
        i2 = ind + IND
        out = [ind + f"{T} {part} = 0;  /* loop {L.var}: this thread's share of the updates to "
                     f"{red.acc_text} */",
               ind + f"for ({init}; {cond}; {upd}) {{"]
        out += w.stmts(L.body, i2)
        out += [ind + "}",
                ind + f"for (int {P}off = 16; {P}off > 0; {P}off >>= 1)",
                i2 + f"{part} += __shfl_down_sync(0xffffffffu, {part}, {P}off);",
                ind + "if ((threadIdx.x & 31) == 0)",
                i2 + f"{sums}[threadIdx.x >> 5] = {part};",
                ind + "__syncthreads();",
                ind + f"{part} = 0;  /* every thread adds the warp sums in the same order */",
                ind + f"for (int {P}w = 0; {P}w < (int)(blockDim.x >> 5); {P}w++)",
                i2 + f"{part} += {sums}[{P}w];",
                ind + "__syncthreads();"]
        out += self.stmts([red.combine(part, L.line)], ind)
        return out


def _one_barrier(lines: list[str]) -> list[str]:
    """``lines`` without a ``__syncthreads();`` that directly follows another one."""
    out: list[str] = []
    for ln in lines:
        if ln.strip().startswith("__syncthreads();") and out and \
                out[-1].strip().startswith("__syncthreads();") and \
                ln[: len(ln) - len(ln.lstrip())] == out[-1][: len(out[-1]) - len(out[-1].lstrip())]:
            continue
        out.append(ln)
    return out


# ---------------------------------------------------------------------------------------
# Generation
# ---------------------------------------------------------------------------------------


class _Gen:
    def __init__(self, an: Analysis, mapping: Mapping):
        self.an = an
        self.fn = an.fn
        self.m = mapping
        self.P = an.prefix
        self.MAC = an.prefix.upper()
        self.kernels: list[str] = []
        self.globals: list[str] = []
        self.choice: dict[int, NestMapping] = {n.site: n for n in mapping.nests}
        self.host_used: set[str] = set()
        self.kernel_names: dict[int, str] = {}

    # -- helpers ------------------------------------------------------------------------

    def ctype(self, name: str) -> str:
        t = self.fn.ctype_of(name)
        if t is None:
            raise PolicyRefusal(f"cannot find the type of '{name}'")
        return t

    def dp(self, rename: dict[str, str] | None = None) -> DevicePrinter:
        return DevicePrinter(self.an, rename)

    def extent_names(self, arrays: set[str]) -> set[str]:
        out: set[str] = set()
        for a in arrays:
            for e in self.fn.arrays[a].extents[1:]:
                out |= set(re.findall(r"[A-Za-z_]\w*", e))
        return out & (set(self.fn.scalar_params) | set(self.fn.locals))

    def kernel_params(
        self, stmts: Sequence[Stmt], exclude: set[str], skip_arrays: set[str] | None = None,
        reads: set[str] | None = None,
    ) -> tuple[list[str], list[str]]:
        """(declarations, argument names) of a kernel that runs ``stmts`` (and reads the
        scalars ``reads`` besides)."""
        accs = accesses(stmts)
        used_arrays = {a.array for a in accs} - (skip_arrays or set())
        written_arrays = {a.array for a in accs if a.write}
        scalars = (scalars_read(stmts) | (reads or set()) | self.extent_names(used_arrays)) - exclude
        decls: list[str] = []
        names: list[str] = []
        for p in self.fn.params:
            if isinstance(p, ArrayParam) and p.name in used_arrays:
                const = "const " if (p.const or p.name not in written_arrays) else ""
                decls.append(f"{const}{normalize_ctype(p.ctype)} *__restrict__ {p.name}")
                names.append(p.name)
            elif isinstance(p, ScalarParam) and p.name in scalars:
                decls.append(f"{normalize_ctype(p.ctype)} {p.name}")
                names.append(p.name)
        for name, ctype, const in self.scratch_arrays():
            if name in used_arrays:
                decls.append(f"{'const ' if const else ''}{normalize_ctype(ctype)} *__restrict__ {name}")
                names.append(name)
        for n in self.fn.locals:
            if n in scalars and n not in self.fn.scalar_params:
                decls.append(f"{self.ctype(n)} {n}")
                names.append(n)
        self.host_used |= set(names)
        return decls, names

    def scratch_arrays(self) -> list[tuple[str, str, bool]]:
        """(name, element type, read-only) of every site's scratch copies: the privatised
        arrays' copies and the snapshots (``privatize.py``), each once."""
        out: dict[str, tuple[str, str, bool]] = {}
        for site in self.an.sites:
            for x in site.expansions:
                out[x.name] = (x.name, x.ctype, False)
            for sn in site.snapshots:
                out[sn.name] = (sn.name, sn.ctype, True)
        return list(out.values())

    def scratch_lines(self, site: Site, ind: str) -> tuple[list[str], list[str]]:
        """(lines before the launch, lines after it) for the scratch copies ``site`` opens
        (``site.scratch_opens``: allocated, a snapshot copied from its array) and closes
        (``site.scratch_closes``: the last privatised copy written back, all released);
        the sites of one privatised nest split into several kernels share them, in one C
        block the first opens and the last closes.  Stream-ordered (``cudaMallocAsync``,
        ``cudaFreeAsync`` on the default stream): no synchronisation; the write-back is a
        ``cudaMemcpy2DAsync`` (in the copies ``x[p][r][q]`` the elements of one copy lie a
        whole ``r x q`` plane apart).  A failed launch returns before the release (the
        process's CUDA state is lost then anyway)."""
        outer, ind = ind, ind + IND
        out: list[str] = [outer + "{"]
        post: list[str] = []
        for sn in site.snapshots:
            T = normalize_ctype(sn.ctype)
            n, err = f"{sn.name}_n", f"{sn.name}_err"
            count = " * ".join(f"(long long)({e})" for e in self.fn.arrays[sn.array].extents)
            src = local_array_name(self.an, sn.array)
            out += [
                f"{ind}/* {sn.describe()} ({sn.reads} read(s) in loop {sn.loop.var}): {sn.name} */",
                f"{ind}const long long {n} = {count};",
                *_scratch_alloc(sn.name, T, n, err, ind,
                                f"cudaMemcpyAsync({sn.name}, {src}, (size_t){n} * sizeof({T}), "
                                "cudaMemcpyDeviceToDevice, 0)"),
            ]
            post.append(f"{ind}if ({sn.name} != NULL)")
            post.append(f"{ind}{IND}cudaFreeAsync({sn.name}, 0);")
        for x in site.expansions:
            T = normalize_ctype(x.ctype)
            n, err = f"{x.name}_n", f"{x.name}_err"
            trips = [f"{x.name}_t{i}" for i in range(len(x.loops))]
            out.append(f"{ind}/* {x.describe()}: one copy each in {x.name} */")
            for t, C in zip(trips, x.loops):
                out.append(f"{ind}const long long {t} = {C.trip_text()};  /* loop {C.var} */")
            plane = " * ".join(trips)
            positive = " && ".join(f"{t} > 0" for t in trips)
            out += [
                f"{ind}const long long {n} = ({positive}) ? (long long)({x.own_extent}) * "
                f"{plane} : 0;",
                *_scratch_alloc(x.name, T, n, err, ind),
            ]
            last = "0"
            for t in trips:
                last = f"({last}) * {t} + ({t} - 1)"
            dst = local_array_name(self.an, x.array)
            first = f"(long long)({c_text(x.first)})"
            if x.chain_first:  # the last copy is one contiguous row
                copy = (f"cudaMemcpyAsync({dst} + {first}, {x.name} + ((size_t)({last}) * "
                        f"(size_t)({x.own_extent}) + {first}), (size_t){x.name}_k * sizeof({T}), "
                        "cudaMemcpyDeviceToDevice, 0);")
            else:
                copy = (f"cudaMemcpy2DAsync({dst} + {first}, sizeof({T}), {x.name} + "
                        f"((size_t){first} * (size_t)({plane}) + (size_t)({last})), "
                        f"(size_t)({plane}) * sizeof({T}), sizeof({T}), (size_t){x.name}_k, "
                        "cudaMemcpyDeviceToDevice, 0);")
            post += [
                f"{ind}if ({n} > 0) {{",
                f"{ind}{IND}const long long {x.name}_k = {x.count};",
                f"{ind}{IND}if ({x.name}_k > 0) {{  /* {x.array}[first..] from the last copy */",
                f"{ind}{IND}{IND}cudaError_t {err} = {copy}",
                f"{ind}{IND}{IND}if ({err} != cudaSuccess)",
                f"{ind}{IND}{IND}{IND}return (int){err};",
                f"{ind}{IND}}}",
                f"{ind}{IND}cudaFreeAsync({x.name}, 0);",
                f"{ind}}}",
            ]
        return (out if site.scratch_opens else []), (post + [outer + "}"] if site.scratch_closes else [])

    def site_params(self, site: Site) -> tuple[list[str], list[str]]:
        """(declarations, argument names) of the kernel of ``site``."""
        root = site.root
        exclude = scalars_written([root]) | site.dev_reads
        skip: set[str] = set()
        red = site.reduction
        if red is not None and isinstance(red.acc, Index):
            upd = {id(u.target) for u in red.updates}
            if not any(a.array == red.acc.array and id(a.index) not in upd
                       for a in accesses([root])):
                skip.add(red.acc.array)  # only the one-thread combination touches it
        return self.kernel_params([root], exclude, skip_arrays=skip)

    def signature(self, name: str, decls: list[str], threads: int | None) -> list[str]:
        lb = f" __launch_bounds__({threads})" if threads else ""
        params = ", ".join(decls) if decls else "void"
        head = f"__global__ void{lb}\n{name}("
        if len(params) + len(name) > 80 and decls:
            return [head + "\n" + ",\n".join(IND + d for d in decls) + ")"]
        return [head + params + ")"]

    def first_as_index(self, loop: For, printer: Printer, T: str | None) -> str | None:
        """``loop.first`` converted to the index type ``T`` as C's assignment converts it
        (``(int)(n - 1)`` for an unsigned ``n``), or None when no conversion is needed (a
        constant, the same type, or ``T`` unknown)."""
        f = loop.first
        if T is None or f is None or isinstance(f, Const):
            return None
        types = self.dp()
        if types.type_of(f) == types._norm(T):
            return None
        return f"({T}){printer.expr(f)}" if _is_atom(f) else f"({T})({printer.expr(f)})"

    def trip(self, loop: For, printer: Printer) -> str:
        """Iteration count of a canonical loop (``long long``).

        The first value is converted to the index's type before it is widened, as C's
        assignment ``i = first`` converts it: ``for (int i = n - 1; i >= 0; i--)`` with an
        ``unsigned n`` of 0 starts at ``(int)4294967295u == -1`` and runs no iteration
        (widening ``n - 1`` directly would give 2^32 of them)."""
        f, b = loop.first, loop.bound
        assert f is not None and b is not None
        T = loop.ctype or (self.fn.ctype_of(loop.var) if loop.var else None)

        def ll(e: Expr) -> str:
            t = printer.expr(e)
            return f"(long long){t}" if _is_atom(e) else f"(long long)({t})"

        def ll_first() -> str:
            conv = self.first_as_index(loop, printer, T)
            return ll(f) if conv is None else f"(long long){conv}"

        plus = " + 1" if loop.cmp in ("<=", ">=") else ""
        types = self.dp()
        bt, it = types.type_of(b), (types._norm(T) if T else None)
        if bt in ("float", "double", "long double"):
            # C compares the index converted to the bound's floating type: the last index
            # is below ceil(b) for <, at most floor(b) for <= (mirrored for a step of -1)
            up = loop.step > 0
            rnd = "ceil" if (loop.cmp in ("<", ">=")) == up else "floor"
            bound = f"(long long){rnd}((double)({printer.expr(b)}))"
            if up:
                return f"{bound} - {ll_first()}{plus}"
            return f"{ll_first()} - {bound}{plus}"
        if loop.step > 0:
            if isinstance(f, Const) and f.text == "0":
                return ll(b) + plus
            text = f"{ll(b)} - {ll_first()}{plus}"
            if (bt is not None and bt.startswith("unsigned") and it is not None
                    and not it.startswith("unsigned")):
                # C compares a negative signed index converted to unsigned: huge, so the
                # loop runs no iteration
                return f"({ll_first()} < 0 ? 0LL : {text})"
            return text
        return f"{ll_first()} - {ll(b)}{plus}"

    def var_decl(self, loop: For, t: str, printer: Printer) -> str:
        """``const int i = (int)(first + t);`` for the iteration ``t`` of ``loop``."""
        var = loop.var or "?"
        T = loop.ctype or self.ctype(var)
        f = loop.first
        assert f is not None
        ftxt = printer.expr(f)
        if not (_is_atom(f) or (isinstance(f, Binary) and f.op in _ARITH)):
            ftxt = f"({ftxt})"
        # C assigns the first value to the index (converting it to T) and then steps it:
        # the offset is added after the conversion ((int)-1.5 + 2 is 1, not (int)0.5)
        conv = self.first_as_index(loop, printer, T) or ftxt
        if loop.step > 0:
            val = t if (isinstance(f, Const) and f.text == "0") else f"{conv} + {t}"
        else:
            val = f"{conv} - {t}"
        return f"const {T} {var} = ({T})({val});" if " " in val else f"const {T} {var} = ({T}){val};"

    def tri_span(self, P_loop: For, Q: For, printer: DevicePrinter) -> tuple[list[str], str] | None:
        """A triangular grid2d (``Q``'s bounds linear in ``P_loop``'s index; see
        ``analysis.triangular_ok``): statements that compute ``cp_q_lo``, the least value of
        ``Q``'s index over ``P_loop``'s range, and ``cp_q_hi``, the greatest (a linear bound
        is extreme at the first or the last value of ``P_loop``'s index), and the trip text
        of that span; None for a rectangular nest."""
        if P_loop.var not in Q.header_names():
            return None
        P = self.P
        T = P_loop.ctype or self.ctype(P_loop.var or "")
        assert P_loop.first is not None and Q.first is not None and Q.bound is not None
        first = self.first_as_index(P_loop, printer, T) or printer.expr(P_loop.first)
        pf, pl = f"{P}p_first", f"{P}p_last"
        f1, f2 = self._q_end(P_loop, Q, Q.first, pf, printer), self._q_end(P_loop, Q, Q.first, pl, printer)
        l1, l2 = self._q_end(P_loop, Q, Q.bound, pf, printer), self._q_end(P_loop, Q, Q.bound, pl, printer)
        return [
            f"const long long {pf} = (long long)({first});  /* loop {P_loop.var}: first value */",
            f"const long long {pl} = {pf} + ({self.trip(P_loop, printer)}) - 1;",
            f"const long long {P}q_lo = {f1} < {f2} ? {f1} : {f2};  /* loop {Q.var}: least */",
            f"const long long {P}q_hi = {l1} > {l2} ? {l1} : {l2};  /* loop {Q.var}: greatest */",
        ], f"{P}q_hi - {P}q_lo + 1"

    def _q_end(self, P_loop: For, Q: For, e: Expr | None, value: str,
               printer: DevicePrinter) -> str:
        """``Q``'s first value (``e`` is ``Q.first``) or last value (``e`` is ``Q.bound``: one
        less for ``<``) at ``P_loop``'s index ``value``, as ``long long``."""
        assert e is not None
        q = DevicePrinter(self.an, {**printer.rename, P_loop.var or "": value})
        less = " - 1" if e is Q.bound and Q.cmp == "<" else ""
        return f"(long long)({q.expr(e)}){less}"

    def tri_tile_empty(self, P_loop: For, Q: For, p0: str, p1: str, q0: str, q1: str,
                       printer: DevicePrinter) -> str:
        """C condition: the tile of ``P_loop``'s indices ``p0..p1`` and ``Q``'s ``q0..q1``
        holds no point of the triangle (``Q`` from f(p) to g(p), both linear): every row's
        range ends before ``q0`` (max of g at the ends) or starts after ``q1`` (min of f).
        Conservative: a tile that passes may still be empty, never the reverse."""
        g0, g1 = (self._q_end(P_loop, Q, Q.bound, v, printer) for v in (p0, p1))
        f0, f1 = (self._q_end(P_loop, Q, Q.first, v, printer) for v in (p0, p1))
        return (f"(({g0} < {q0} && {g1} < {q0}) || ({f0} > {q1} && {f1} > {q1}))")

    def tri_decl(self, Q: For, t: str) -> str:
        """``const int j = (int)(cp_q_lo + t);``: ``Q``'s index over the bounding span."""
        T = Q.ctype or self.ctype(Q.var or "")
        return f"const {T} {Q.var} = ({T})({self.P}q_lo + {t});"

    def tri_in(self, Q: For, printer: DevicePrinter) -> str:
        """C condition: ``Q``'s index lies in its own range (both indices declared)."""
        assert Q.first is not None and Q.bound is not None
        return (f"{Q.var} >= ({printer.expr(Q.first)}) && "
                f"{Q.var} {Q.cmp} ({printer.expr(Q.bound)})")

    def box_trip(self, L: For, Q: For, span: tuple[list[str], str] | None, printer: DevicePrinter) -> str:
        """Trip of grid2d loop ``L``: the bounding span's for the triangle's inner loop ``Q``
        (``span`` from :meth:`tri_span`), else ``L``'s own."""
        return span[1] if span and L is Q else self.trip(L, printer)

    def box_decl(self, L: For, Q: For, span: tuple[list[str], str] | None, t: str,
                 printer: DevicePrinter) -> str:
        """Declaration of grid2d loop ``L``'s index at iteration ``t`` (over the bounding span
        for the triangle's inner loop ``Q``)."""
        return self.tri_decl(Q, t) if span and L is Q else self.var_decl(L, t, printer)

    def offset_header(self, loop: For, printer: Printer, offset: str, stride: str) -> tuple[str, str, str]:
        """(init, cond, update) of ``loop`` started at ``first +/- offset`` with ``stride``."""
        var = loop.var or "?"
        T = loop.ctype or self.ctype(var)
        f = loop.first
        assert f is not None
        ftxt = printer.expr(f)
        if not (_is_atom(f) or (isinstance(f, Binary) and f.op in _ARITH)):
            ftxt = f"({ftxt})"
        sign = "+" if loop.step > 0 else "-"
        if isinstance(f, Const) and f.text == "0" and sign == "+":
            init_val = offset
        else:  # converted to the index type first, as C's assignment does
            init_val = f"{self.first_as_index(loop, printer, T) or ftxt} {sign} {offset}"
        init = f"{T} {var} = {init_val}" if isinstance(loop.init, Decl) else f"{var} = {init_val}"
        cond = printer.expr(loop.cond) if loop.cond is not None else ""
        update = f"{var} {sign}= {stride}"
        return init, cond, update

    def private_decls(self, region: Sequence[Stmt], exclude: set[str], ind: str) -> list[str]:
        """Declarations of scalars written in ``region`` but declared outside it."""
        names = scalars_written(region) - declared_in(region) - exclude
        out = []
        for n in self.fn.locals:
            if n in names:
                out.append(f"{ind}{self.ctype(n)} {n};")
        for n in self.fn.scalar_params:
            if n in names:
                out.append(f"{ind}{self.fn.scalar_params[n]} {n};")
        return out

    def dev_loads(self, site: Site, written: set[str], ind: str) -> list[str]:
        return [
            f"{ind}const {self.ctype(n)} {n} = {self.P}dev_{n};"
            for n in sorted(site.dev_reads - written)
        ]

    # -- sites --------------------------------------------------------------------------

    def site_kernel(self, site: Site) -> None:
        nm = self.choice[site.id]
        kind = nm.kind
        name = f"{self.fn.name}_k{site.id}_{kind}"
        self.kernel_names[site.id] = name
        root = site.root
        written = scalars_written([root])
        decls, _ = self.site_params(site)
        threads = 1
        for b in nm.block:
            threads *= b
        comment = self.site_comment(site, nm, name)
        body = getattr(self, f"body_{kind}")(site, nm)
        loads = self.dev_loads(site, written, IND)
        if kind == "grid_reduce":
            red = site.reduction
            assert red is not None
            self.globals.append(
                f"static __device__ {red.ctype} {site.red_var};  "
                f"/* sum of the updates to {red.acc_text} in loop {root.var} */"
            )
            self.kernels.append(
                f"/* Kernel {site.id} (reset): zeroes {site.red_var} before the reduction. */\n"
                f"__global__ void {name}_reset(void)\n{{\n{IND}{site.red_var} = 0;\n}}\n"
            )
        src = comment + self.signature(name, decls, threads) + ["{"] + loads + body + ["}", ""]
        self.kernels.append("\n".join(src))

    def site_comment(self, site: Site, nm: NestMapping, name: str) -> list[str]:
        root = site.root
        roles = dict(nm.roles)
        lines = [f"/* Kernel {site.id} ({nm.kind}), block {block_text(nm.block)}:"]
        role_text = {
            "x": "threadIdx.x/blockIdx.x (grid x)",
            "y": "threadIdx.y/blockIdx.y (grid y)",
            "block": "one block per iteration (blockIdx.x, grid-stride)",
            "thread": "the threads of the block (stride blockDim.x)",
            "warp": "one warp per iteration (grid-stride over warps)",
            "lane": "the 32 lanes of the warp, combined with __shfl_down_sync",
            "grid": "all threads of the grid (grid-stride), block sums atomicAdd-ed",
        }
        if nm.kind == "col_reduce":
            role_text = {**role_text, "x": "threadIdx.x/blockIdx.x (grid-stride over tiles)",
                         "y": "threadIdx.y, stride blockDim.y (a share of the sum each)"}
        loops = {root.var: root.line}
        for s in walk(root.body):
            if isinstance(s, For):
                loops.setdefault(s.var, s.line)
        for v, r in nm.roles:
            lines.append(f" *   loop {v} (line {loops.get(v, '?')}) -> {role_text[r]}")
        if nm.sequential:
            lines.append(f" *   sequential in each thread: loop {', loop '.join(nm.sequential)}")
        if nm.tile:
            ty, tx = nm.tile
            lines.append(f" *   register tile {ty}x{tx}: each thread computes the outputs at rows "
                         f"threadIdx.y + r * blockDim.y (r < {ty})")
            lines.append(f" *   and columns threadIdx.x + c * blockDim.x (c < {tx}) of the "
                         "block's tile; the k loop's update")
            lines.append(" *   accumulates in registers, in the order of k (tiling.py)")
        if site.interchanged and nm.kind in SPLIT_SUMS:
            o, i = site.interchanged
            lines.append(f" *   loops {o} and {i} are interchanged ({i} outer, parallel); each "
                         f"element's sum over {o}")
            lines.append(" *   is split between threads (see below)")
        elif site.interchanged:
            o, i = site.interchanged
            lines.append(
                f" *   loops {o} and {i} are interchanged ({i} outer, parallel); each element keeps"
            )
            lines.append(f" *   its updates in the original order of {o}")
        waves = [t for t in site.transforms if t.startswith("wavefront ")]
        rest = [t for t in site.transforms if not t.startswith("wavefront ")]
        for t in waves:
            lines.append(f" *   {t}: the host loop walks the hyperplanes, the threads the points")
            lines.append(" *   of one (isl proved them independent); each point runs the body as written")
        if rest:
            lines.append(f" *   the body of loop {root.var} was rewritten into one loop: "
                         f"{', '.join(rest)}")
            lines.append(" *   (each element keeps its updates in the original order)")
        if nm.kind == "warp_reduce" and nm.sums > 1:
            lines.append(f" *   each lane keeps {nm.sums} partial sums, the warp adds each with shuffles;")
            lines.append(f" *   lane 0 adds them to {nm.accumulator} (in this order) and runs the rest")
            lines.append(f" *   of the body of loop {root.var} in program order")
        elif nm.kind == "warp_reduce":
            lines.append(f" *   lane 0 adds the warp's sum to {nm.accumulator} and runs the rest of the")
            lines.append(f" *   body of loop {root.var} in program order")
        if nm.kind in ("block_reduce", "col_reduce"):
            group = "the block" if nm.kind == "block_reduce" else "a column's threads (threadIdx.y)"
            lines.append(f" *   the partial sums of {group} are added in a tree; its first thread")
            lines.append(f" *   adds them to {nm.accumulator} and runs the rest of the body of loop "
                         f"{root.var}")
        if nm.split:
            lines.append(f" *   with too few columns for the device, loop {nm.roles[1][0]} is split over "
                         "the grid's y blocks too:")
            lines.append(" *   each block's sums are added with atomicAdd (their order varies "
                         "between runs)")
        if nm.kind == "grid_reduce":
            lines.append(f" *   the sum goes to {site.red_var}; a one-thread kernel combines it into "
                         f"{nm.accumulator}")
        if site.host_loops:
            lines.append(f" *   launched once per iteration of host loop {', '.join(site.host_loops)}")
        lines.append(" */")
        del roles
        return lines

    def body_grid1d(self, site: Site, nm: NestMapping) -> list[str]:
        root = site.root
        dp = self.dp()
        P = self.P
        w = StmtWriter(dp)
        i2 = IND * 2
        out = [
            f"{IND}const long long {P}trip = {self.trip(root, dp)};",
            f"{IND}const long long {P}stride = (long long)gridDim.x * blockDim.x;",
            (f"{IND}for (long long {P}t = (long long)blockIdx.x * blockDim.x + threadIdx.x; "
             f"{P}t < {P}trip; {P}t += {P}stride) {{"),
            i2 + self.var_decl(root, f"{P}t", dp),
        ]
        out += self.private_decls(root.body, {root.var or ""}, i2)
        out += w.stmts(root.body, i2)
        out.append(IND + "}")
        return out

    def body_grid2d(self, site: Site, nm: NestMapping) -> list[str]:
        P_loop = site.root
        Q = P_loop.body[0]
        assert isinstance(Q, For)
        roles = dict(nm.roles)
        X = Q if roles[Q.var] == "x" else P_loop
        Y = P_loop if X is Q else Q
        if nm.tile:
            return self.body_grid2d_tiled(P_loop, Q, X, Y, nm)
        dp = self.dp()
        w = StmtWriter(dp)
        P = self.P
        i2, i3 = IND * 2, IND * 3
        span = self.tri_span(P_loop, Q, dp)

        def trip(L: For) -> str:
            return self.box_trip(L, Q, span, dp)

        def decl(L: For, t: str) -> str:
            return self.box_decl(L, Q, span, t, dp)

        out = [IND + ln for ln in (span[0] if span else [])]
        out += [
            f"{IND}const long long {P}trip_y = {trip(Y)};  /* loop {Y.var} */",
            f"{IND}const long long {P}trip_x = {trip(X)};  /* loop {X.var} */",
            (f"{IND}for (long long {P}ty = (long long)blockIdx.y * blockDim.y + threadIdx.y; "
             f"{P}ty < {P}trip_y;"),
            f"{IND}     {P}ty += (long long)gridDim.y * blockDim.y) {{",
            i2 + decl(Y, f"{P}ty"),
            (f"{i2}for (long long {P}tx = (long long)blockIdx.x * blockDim.x + threadIdx.x; "
             f"{P}tx < {P}trip_x;"),
            f"{i2}     {P}tx += (long long)gridDim.x * blockDim.x) {{",
            i3 + decl(X, f"{P}tx"),
        ]
        if span:
            out.append(f"{i3}if (!({self.tri_in(Q, dp)})) continue;  /* outside the triangle */")
        out += self.private_decls(Q.body, {P_loop.var or "", Q.var or ""}, i3)
        out += w.stmts(Q.body, i3)
        out += [i2 + "}", IND + "}"]
        return out

    def body_grid2d_tiled(self, P_loop: For, Q: For, X: For, Y: For, nm: NestMapping) -> list[str]:
        """A TY x TX register tile of outputs per thread (``tiling.py``): rows ``threadIdx.y +
        r * blockDim.y``, columns ``threadIdx.x + c * blockDim.x`` of the block's tile; the
        k loop runs once for the whole tile, unguarded when the tile lies inside the
        iteration space."""
        parts = tile_parts(P_loop, Q)
        assert parts is not None, "a tiled grid2d site without the product shape"
        TY, TX = nm.tile
        dp = self.dp()
        w = StmtWriter(dp)
        P = self.P
        i2, i3, i4 = IND * 2, IND * 3, IND * 4
        upd = parts.update
        K = parts.loop
        T = self.fn.arrays[upd.target.array].ctype  # type: ignore[union-attr]
        acc = f"{P}acc[{P}r][{P}c]"

        span = self.tri_span(P_loop, Q, dp)

        def trip(L: For) -> str:
            return self.box_trip(L, Q, span, dp)

        def decls(ty: str, tx: str) -> list[str]:
            return [self.box_decl(L, Q, span, t, dp) for L, t in ((Y, ty), (X, tx))]

        def each(ind: str, guard: bool, inner: list[str]) -> list[str]:
            """``inner`` for every output (r, c) of the tile, with i and j declared."""
            lines = [f"{ind}#pragma unroll",
                     f"{ind}for (int {P}r = 0; {P}r < {TY}; {P}r++) {{",
                     f"{ind}{IND}#pragma unroll",
                     f"{ind}{IND}for (int {P}c = 0; {P}c < {TX}; {P}c++) {{",
                     f"{ind}{IND * 2}const long long {P}ty = {P}by + threadIdx.y + (long long){P}r * blockDim.y;",
                     f"{ind}{IND * 2}const long long {P}tx = {P}bx + threadIdx.x + (long long){P}c * blockDim.x;"]
            body_ind = ind + IND * 2
            if guard:
                inside = f" && {P}in({P}ty, {P}tx)" if span else ""
                lines.append(f"{body_ind}if ({P}ty < {P}trip_y && {P}tx < {P}trip_x{inside}) {{")
                body_ind += IND
            lines += [body_ind + d for d in decls(f"{P}ty", f"{P}tx")]
            lines += [body_ind + ln for ln in inner]
            if guard:
                lines.append(f"{ind}{IND * 2}}}")
            lines += [f"{ind}{IND}}}", f"{ind}}}"]
            return lines

        target = dp.expr(upd.target)
        k_init = w.header_part(K.init)
        k_cond = dp.expr(K.cond) if K.cond is not None else ""
        k_upd = w.assign(K.update) if K.update is not None else ""
        update_line = [f"{acc} {upd.op} {dp.expr(upd.value)};"]  # type: ignore[arg-type]

        def plain_k_loop(ind: str, guard: bool) -> list[str]:
            return ([f"{ind}for ({k_init}; {k_cond}; {k_upd}) {{"]
                    + each(ind + IND, guard, update_line) + [f"{ind}}}"])

        staged = staged_operands(parts, Y.var or "", X.var or "") if nm.staged else []
        k_loop: Callable[[str, bool], list[str]] = plain_k_loop
        shared: list[str] = []
        if staged:
            # a triangle's row with no element is read by no iteration: not loaded
            row_ok = (f"({dp.expr(Q.first)}) {Q.cmp} ({dp.expr(Q.bound)})"  # type: ignore[arg-type]
                      if span else None)
            k_loop, shared = self.staged_k_loop(
                parts, staged, nm, X, Y, each, acc,
                lambda L, t: self.box_decl(L, Q, span, t, dp),
                lambda L: row_ok if L is P_loop else None)

        out = [IND + ln for ln in shared]
        out += [IND + ln for ln in (span[0] if span else [])]
        if span:  # whether the element (ty, tx) of the bounding box lies in the triangle
            out += [f"{IND}auto {P}in = [&](long long {P}ty, long long {P}tx) -> bool {{",
                    *[i2 + d for d in decls(f"{P}ty", f"{P}tx")],
                    f"{i2}return {self.tri_in(Q, dp)};",
                    f"{IND}}};"]
        out += [
            f"{IND}const long long {P}trip_y = {trip(Y)};  /* loop {Y.var} */",
            f"{IND}const long long {P}trip_x = {trip(X)};  /* loop {X.var} */",
            f"{IND}const long long {P}tile_y = (long long)blockDim.y * {TY};",
            f"{IND}const long long {P}tile_x = (long long)blockDim.x * {TX};",
            (f"{IND}for (long long {P}by = (long long)blockIdx.y * {P}tile_y; {P}by < {P}trip_y; "
             f"{P}by += (long long)gridDim.y * {P}tile_y) {{"),
            (f"{i2}for (long long {P}bx = (long long)blockIdx.x * {P}tile_x; {P}bx < {P}trip_x; "
             f"{P}bx += (long long)gridDim.x * {P}tile_x) {{"),
        ]
        if span:  # a tile of the bounding box with no point of the triangle: nothing to do
            pv = P_loop.var or ""
            TP = P_loop.ctype or self.ctype(pv)
            pfirst = self.first_as_index(P_loop, dp, TP) or dp.expr(P_loop.first)  # type: ignore[arg-type]
            pb, qb = (f"{P}by", f"{P}bx") if Y is P_loop else (f"{P}bx", f"{P}by")
            pt, qt = (f"{P}tile_y", f"{P}tile_x") if Y is P_loop else (f"{P}tile_x", f"{P}tile_y")
            p0 = f"(long long)({pfirst}) + {pb}"
            q0 = f"{P}q_lo + {qb}"
            empty = self.tri_tile_empty(P_loop, Q, f"({p0})", f"({p0} + {pt} - 1)", f"({q0})",
                                        f"({q0} + {qt} - 1)", dp)
            out += [f"{i3}if {empty}",
                    f"{i3}{IND}continue;  /* the tile lies outside the triangle */"]
        out += [f"{i3}{T} {P}acc[{TY}][{TX}];"]
        out += self.private_decls(Q.body, {P_loop.var or "", Q.var or ""}, i3)
        pre = []
        for s in parts.pre:
            pre += w.stmt(s, "")
        out += each(i3, True, pre + [f"{acc} = {target};"])
        full = f"{P}by + {P}tile_y <= {P}trip_y && {P}bx + {P}tile_x <= {P}trip_x"
        if span:  # the triangle is convex: a tile whose corners lie in it lies in it
            ys, xs = (f"{P}by", f"{P}by + {P}tile_y - 1"), (f"{P}bx", f"{P}bx + {P}tile_x - 1")
            full += "".join(f"\n{i3}    && {P}in({y}, {x})" for y in ys for x in xs)
        out += [f"{i3}if ({full}) {{"]
        out += k_loop(i4, False)
        out += [f"{i3}}} else {{"]
        out += k_loop(i4, True)
        out += [f"{i3}}}"]
        post = []
        for s in parts.post:
            post += w.stmt(s, "")
        out += each(i3, True, [f"{target} = {acc};"] + post)
        out += [i2 + "}", IND + "}"]
        return out

    def staged_k_loop(self, parts: TileParts, staged: list[tuple[Index, str]], nm: NestMapping,
                      X: For, Y: For, each: Callable[[str, bool, list[str]], list[str]],
                      acc: str, decl: Callable[[For, str], str],
                      loadable: Callable[[For], str | None]
                      ) -> tuple[Callable[[str, bool], list[str]], list[str]]:
        """The k loop of a tile whose operands go through shared memory (``tiling.py``):
        STAGE_K values of k at a time, the block loads each staged operand's slice (threads
        on consecutive addresses: along k when k is in the last subscript, else along the
        output index), a barrier, the tile's updates from shared memory in the order of k,
        a barrier.  ``decl(L, t)`` declares an output loop's index at offset ``t`` of the
        tile's box (over the bounding span for a triangle's inner loop); ``loadable(L)`` is
        a C condition an index of ``L`` must meet to be loaded (a triangle's row with
        elements), or None.  Returns (the k-loop writer, the ``__shared__`` declarations)."""
        P, K, BK = self.P, parts.loop, STAGE_K
        dp = self.dp()
        TY, TX = nm.tile
        BX, BY = nm.block
        NT, BM, BN = BX * BY, BY * TY, BX * TX
        upd = parts.update
        folded = self.folded_products(upd.value, staged, dp)  # type: ignore[arg-type]
        # operand text -> (buffer, y/x, access, what the cell holds: the access or its product)
        bufs: dict[str, tuple[str, str, Index, Expr]] = {}
        subst: dict[int, str] = {}
        for x, side in staged:
            prod = folded.get(id(x))
            held: Expr = prod if prod is not None else x
            text = dp.expr(held)
            if text not in bufs:
                bufs[text] = (f"{P}s{side}{len(bufs)}", side, x, held)
            buf = bufs[text][0]
            subst[id(held)] = (f"{buf}[threadIdx.y + {P}r * {BY}][{P}kk]" if side == "y"
                               else f"{buf}[{P}kk][threadIdx.x + {P}c * {BX}]")
        decls = []
        for buf, side, x, held in bufs.values():
            T = dp.type_of(x) or self.fn.arrays[x.array].ctype
            dims = f"[{BM}][{BK + 1}]" if side == "y" else f"[{BK}][{BN}]"
            decls.append(f"__shared__ {T} {buf}{dims};  /* {c_text(held)}, {STAGE_K} values of "
                         f"{K.var} a step */")
        sp = _SubstPrinter(self.an, subst)
        update_line = [f"{acc} {upd.op} {sp.expr(upd.value)};"]  # type: ignore[arg-type]

        def loads(ind: str) -> list[str]:
            out = []
            for buf, side, x, held in bufs.values():
                L, rows = (Y, BM) if side == "y" else (X, BN)
                t_out, trip_out = (f"{P}ty", f"{P}trip_y") if side == "y" else (f"{P}tx", f"{P}trip_x")
                base = f"{P}by" if side == "y" else f"{P}bx"
                along_k = K.var in names_in(x.subs[-1])
                a, b = ((f"{P}e / {BK}", f"{P}e % {BK}") if along_k
                        else (f"{P}e % {rows}", f"{P}e / {rows}"))
                cell = f"{buf}[{P}a][{P}b]" if side == "y" else f"{buf}[{P}b][{P}a]"
                out += [f"{ind}for (int {P}e = threadIdx.y * {BX} + threadIdx.x; {P}e < {rows * BK}; "
                        f"{P}e += {NT}) {{",
                        f"{ind}{IND}const int {P}a = {a}, {P}b = {b};  /* output index, k in the step */",
                        f"{ind}{IND}const long long {t_out} = {base} + {P}a, {P}tk = {P}k0 + {P}b;",
                        f"{ind}{IND}if ({t_out} < {trip_out} && {P}tk < {P}trip_k) {{",
                        f"{ind}{IND * 2}" + decl(L, t_out),
                        f"{ind}{IND * 2}" + self.var_decl(K, f"{P}tk", dp)]
                ok = loadable(L)
                if ok:
                    out += [f"{ind}{IND * 2}if ({ok})  /* a row some iteration reads */",
                            f"{ind}{IND * 3}{cell} = {dp.expr(held)};"]
                else:
                    out.append(f"{ind}{IND * 2}{cell} = {dp.expr(held)};")
                out += [f"{ind}{IND}}}",
                        f"{ind}}}"]
            return out

        def steps(ind: str, guard: bool, count: str, unroll: bool) -> list[str]:
            """The tile's updates for ``count`` values of k of the staged step."""
            return ([f"{ind}#pragma unroll"] * unroll
                    + [f"{ind}for (int {P}kk = 0; {P}kk < {count}; {P}kk++) {{",
                       f"{ind}{IND}" + self.var_decl(K, f"{P}k0 + {P}kk", dp)]
                    + each(ind + IND, guard, update_line) + [f"{ind}}}"])

        # When the update reads nothing but the staged cells (and scalars), an edge tile's
        # updates need no guard either: an output outside the space reads cells no thread
        # loaded (values never stored anywhere), an output inside reads only loaded cells.
        # Without this an edge tile ran its updates one guarded output at a time, and at
        # about one wave of blocks the slowest tile sets the kernel's time.
        in_cells = {id(y) for x, _ in staged for y in iter_expr(x) if isinstance(y, Index)}
        only_cells = all(id(y) in in_cells for y in iter_expr(upd.value)  # type: ignore[arg-type]
                         if isinstance(y, Index))

        def k_loop(ind: str, guard: bool) -> list[str]:
            # Inside the iteration space a whole step runs a constant count of k, unrolled;
            # the last, partial step keeps the counted loop, and so do the edge tiles when
            # their updates need a guard.  (PolyBench gemm LARGE on the H200, 16x16 tile
            # 2x2 smem: 0.543 -> 0.523 ms; see the table in docs/builtin-policy.md for what
            # hand-written tiles reach.)
            i2 = ind + IND
            kn = f"{P}kn"
            guard = guard and not only_cells
            inner = (steps(i2, guard, kn, False) if guard else
                     [f"{i2}if ({kn} == {BK}) {{"] + steps(i2 + IND, guard, str(BK), True)
                     + [f"{i2}}} else {{"] + steps(i2 + IND, guard, kn, False) + [f"{i2}}}"])
            return ([f"{ind}for (long long {P}k0 = 0; {P}k0 < {P}trip_k; {P}k0 += {BK}) {{"]
                    + loads(i2)
                    + [f"{i2}__syncthreads();",
                       f"{i2}const int {kn} = (int)({P}trip_k - {P}k0 < {BK} ? {P}trip_k - {P}k0 : {BK});"]
                    + inner
                    + [f"{i2}__syncthreads();", f"{ind}}}"])

        head = [f"const long long {P}trip_k = {self.trip(K, dp)};  /* loop {K.var} */"]
        return k_loop, decls + head

    def folded_products(self, value: Expr, staged: list[tuple[Index, str]],
                        dp: DevicePrinter) -> dict[int, Binary]:
        """Staged accesses whose product with a scalar can be staged instead: access id ->
        the product ``s * X`` (or ``X * s``) of ``value``.  ``s`` is a constant or a scalar
        parameter the function never writes, the product is the access's own type, and the
        access occurs once in ``value``: each cell then holds the very product the update
        computes first (``alpha * A[i][k] * B[k][j]`` is ``(alpha * A[i][k]) * B[k][j]``),
        rounded once as before, so the results stay bit-identical and each step saves one
        multiplication per staged row.  Not under ``source_order`` (products printed
        uncontracted there keep their own form).  The hand-written gemm the H200 ran at
        0.264 ms folds ``alpha`` the same way (docs/builtin-policy.md)."""
        if self.an.source_order:
            return {}
        written = scalars_written(self.fn.body)
        count: dict[str, int] = {}
        for e in iter_expr(value):
            if isinstance(e, Index):
                count[c_text(e)] = count.get(c_text(e), 0) + 1

        def invariant(e: Expr) -> bool:
            if isinstance(e, Const):
                return True
            return (isinstance(e, Name) and e.name in self.fn.scalar_params
                    and e.name not in written)

        ids = {id(x) for x, _ in staged}
        out: dict[int, Binary] = {}
        for e in iter_expr(value):
            if not (isinstance(e, Binary) and e.op == "*"):
                continue
            for x, other in ((e.left, e.right), (e.right, e.left)):
                if (isinstance(x, Index) and id(x) in ids and invariant(other)
                        and count.get(c_text(x)) == 1 and dp.type_of(e) == dp.type_of(x)):
                    out[id(x)] = e
        return out

    def _split_pre(self, pre: Sequence[Stmt], w: StmtWriter, ind: str, leader: str,
                   sync: str) -> tuple[list[str], bool]:
        """Statements before the inner loop: array writes by the leader thread between
        barriers, scalar work by every thread.  Returns (lines, whether array reads by all
        threads happened since the last barrier)."""
        out: list[str] = []
        group: list[Stmt] = []
        pending_reads = False

        def flush() -> None:
            nonlocal group, pending_reads
            if group:
                if pending_reads:
                    out.append(ind + f"{sync};  /* the reads above come before these writes */")
                out.append(ind + f"if ({leader}) {{")
                out.extend(w.stmts(group, ind + IND))
                out.append(ind + "}")
                out.append(ind + f"{sync};")
                group = []
                pending_reads = False

        for s in pre:
            if arrays_written([s]):
                group.append(s)
            else:
                flush()
                out.extend(w.stmts([s], ind))
                if accesses([s]):
                    pending_reads = True
        flush()
        return out, pending_reads

    def body_block_per_row(self, site: Site, nm: NestMapping) -> list[str]:
        Pl = site.root
        body = Pl.body
        Q = next(s for s in body if isinstance(s, For))
        k = body.index(Q)
        pre, post = body[:k], body[k + 1 :]
        dp = self.dp()
        w = StmtWriter(dp)
        P = self.P
        i2, i3 = IND * 2, IND * 3
        out = [
            f"{IND}const long long {P}trip = {self.trip(Pl, dp)};",
            f"{IND}for (long long {P}b = blockIdx.x; {P}b < {P}trip; {P}b += gridDim.x) {{",
            i2 + self.var_decl(Pl, f"{P}b", dp),
        ]
        out += self.private_decls(body, {Pl.var or ""}, i2)
        pre_lines, pending = self._split_pre(pre, w, i2, "threadIdx.x == 0", "__syncthreads()")
        out += pre_lines
        written_arrays = {a.array for a in accesses(body) if a.write}
        if pending and any(a.array in written_arrays for a in accesses(pre)):
            out.append(i2 + "__syncthreads();  /* the reads above happen before the loop's writes */")
        T = Q.ctype or self.ctype(Q.var or "?")
        init, cond, upd = self.offset_header(Q, dp, f"({T})threadIdx.x", f"({T})blockDim.x")
        out.append(f"{i2}for ({init}; {cond}; {upd}) {{")
        out += w.stmts(Q.body, i3)
        out.append(i2 + "}")
        if post:
            out.append(i2 + "__syncthreads();")
            out.append(i2 + "if (threadIdx.x == 0) {")
            out += w.stmts(post, i3)
            out.append(i2 + "}")
        out.append(IND + "}")
        return out

    def _sums(self, site: Site) -> _Sums:
        """The parts of a site whose loop P holds one sum loop R (warp_reduce, block_reduce,
        col_reduce): one partial sum per accumulator (``cp_part``; ``cp_part0``,
        ``cp_part1``... for several) and writers with and without R's updates rewritten
        onto them."""
        Pl = site.root
        body = Pl.body
        R = next(s for s in body if isinstance(s, For))
        reds = self.an.dep.sums(R)
        assert reds
        k = body.index(R)
        P = self.P
        parts = [f"{P}part"] if len(reds) == 1 else [f"{P}part{n}" for n in range(len(reds))]
        dp = self.dp()
        subst = {id(u): red.rewrite(u, part) for red, part in zip(reds, parts)
                 for u in red.updates}
        return _Sums(Pl, R, reds, body[:k], body[k + 1:], parts, dp, StmtWriter(dp, subst),
                     StmtWriter(dp))

    def body_warp_reduce(self, site: Site, nm: NestMapping) -> list[str]:
        Pl, R, reds, pre, post, parts, dp, w, plain = self._sums(site)
        body = Pl.body
        P = self.P
        i2, i3 = IND * 2, IND * 3
        out = [
            f"{IND}const int {P}lane = threadIdx.x & 31;",
            f"{IND}const long long {P}nwarps = ((long long)gridDim.x * blockDim.x) >> 5;",
            f"{IND}const long long {P}trip = {self.trip(Pl, dp)};",
            (f"{IND}for (long long {P}w = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5; "
             f"{P}w < {P}trip; {P}w += {P}nwarps) {{"),
            i2 + self.var_decl(Pl, f"{P}w", dp),
        ]
        out += self.private_decls(body, {Pl.var or ""}, i2)
        pre_lines, _ = self._split_pre(pre, plain, i2, f"{P}lane == 0", "__syncwarp()")
        out += pre_lines
        for red, part in zip(reds, parts):
            out.append(f"{i2}{red.ctype} {part} = 0;  /* this lane's share of the updates to "
                       f"{red.acc_text} */")
        init, cond, upd = self.offset_header(R, dp, f"{P}lane", "32")
        out.append(f"{i2}for ({init}; {cond}; {upd}) {{")
        out += w.stmts(R.body, i3)
        out.append(i2 + "}")
        if len(parts) == 1:
            out.append(f"{i2}for (int {P}off = 16; {P}off > 0; {P}off >>= 1)")
            out.append(f"{i3}{parts[0]} += __shfl_down_sync(0xffffffffu, {parts[0]}, {P}off);")
        else:
            out.append(f"{i2}for (int {P}off = 16; {P}off > 0; {P}off >>= 1) {{")
            out += [f"{i3}{part} += __shfl_down_sync(0xffffffffu, {part}, {P}off);"
                    for part in parts]
            out.append(i2 + "}")
        out.append(f"{i2}if ({P}lane == 0) {{")
        # the warp's sums reach their accumulators in source order, then the rest runs
        out += plain.stmts([red.combine(part) for red, part in zip(reds, parts)], i3)
        out += plain.stmts(post, i3)
        out.append(i2 + "}")
        out.append(IND + "}")
        return out

    def body_block_reduce(self, site: Site, nm: NestMapping) -> list[str]:
        return self._group_reduce(site, nm)

    def body_col_reduce(self, site: Site, nm: NestMapping) -> list[str]:
        return self._group_reduce(site, nm)

    def _group_reduce(self, site: Site, nm: NestMapping) -> list[str]:
        """A sum over the inner loop R by a group of threads per iteration of the site's
        loop P: ``block_reduce``, the block's threads over R for one iteration of P (a
        shuffle sum per warp, then the first warp adds the warps' sums); ``col_reduce``,
        blockDim.x consecutive iterations of P along x, R split along y (the partial sums
        added in shared memory, a tree over y).  The group's first thread adds the sums to
        their accumulators in source order and runs the rest of P's body, as warp_reduce's
        lane 0 does.  Every thread of a block runs the same iterations of the tile loop,
        so the barriers are reached by all."""
        Pl, R, reds, pre, post, parts, dp, w, plain = self._sums(site)
        body = Pl.body
        P = self.P
        bufs = [f"{P}red"] if len(reds) == 1 else [f"{P}red{n}" for n in range(len(reds))]
        i2, i3, i4 = IND * 2, IND * 3, IND * 4
        col = nm.kind == "col_reduce"
        if col:
            bx, by = nm.block
            lane_r, first, active, leader = "threadIdx.y", f"{P}t", f"{P}t < {P}trip", \
                f"threadIdx.y == 0 && {P}t < {P}trip"
            out = [f"{IND}__shared__ {red.ctype} {b}[{by}][{bx}];" for red, b in zip(reds, bufs)]
            out += [
                f"{IND}const long long {P}trip = {self.trip(Pl, dp)};",
                (f"{IND}for (long long {P}c = (long long)blockIdx.x * {bx}; {P}c < {P}trip; "
                 f"{P}c += (long long)gridDim.x * {bx}) {{"),
                f"{i2}const long long {P}t = {P}c + threadIdx.x;",
            ]
        else:
            (by,) = nm.block
            lane_r, first, active, leader = "threadIdx.x", f"{P}c", "", "threadIdx.x == 0"
            out = [f"{IND}__shared__ {red.ctype} {b}[32];" for red, b in zip(reds, bufs)]
            out += [
                f"{IND}const long long {P}trip = {self.trip(Pl, dp)};",
                f"{IND}for (long long {P}c = blockIdx.x; {P}c < {P}trip; {P}c += gridDim.x) {{",
            ]
        # the index of an idle column (past the trip) is computed but never used
        out.append(i2 + self.var_decl(Pl, first, dp))
        out += self.private_decls(body, {Pl.var or ""}, i2)
        if pre:  # (col_reduce: array writes only, by each column's first thread)
            pre_lines, _ = self._split_pre(pre, plain, i2, leader, "__syncthreads()")
            out += pre_lines
        for red, part in zip(reds, parts):
            out.append(f"{i2}{red.ctype} {part} = 0;  /* this thread's share of the updates to "
                       f"{red.acc_text} */")
        T = R.ctype or self.ctype(R.var or "?")
        if nm.split:  # the grid's y blocks share the sum too
            init, cond, upd = self.offset_header(R, dp, f"({T})(blockIdx.y * {by} + threadIdx.y)",
                                                 f"({T})(gridDim.y * {by})")
        else:
            init, cond, upd = self.offset_header(R, dp, f"({T}){lane_r}", f"({T}){by}")
        ind = i2
        if active:
            out.append(f"{i2}if ({active}) {{")
            ind = i3
        out.append(f"{ind}for ({init}; {cond}; {upd}) {{")
        out += w.stmts(R.body, ind + IND)
        out.append(ind + "}")
        if active:
            out.append(i2 + "}")
        if col:
            out += [f"{i2}{b}[threadIdx.y][threadIdx.x] = {part};" for b, part in zip(bufs, parts)]
            out.append(f"{i2}__syncthreads();")
            out.append(f"{i2}for (int {P}s = {by // 2}; {P}s > 0; {P}s >>= 1) {{  /* tree over y */")
            out.append(f"{i3}if (threadIdx.y < {P}s) {{")
            out += [f"{i4}{b}[threadIdx.y][threadIdx.x] += {b}[threadIdx.y + {P}s][threadIdx.x];"
                    for b in bufs]
            out.append(i3 + "}")
            out.append(f"{i3}__syncthreads();")
            out.append(i2 + "}")
            out += [f"{i2}{part} = {b}[0][threadIdx.x];" for b, part in zip(bufs, parts)]
        else:
            out.append(f"{i2}for (int {P}off = 16; {P}off > 0; {P}off >>= 1) {{  /* each warp */")
            out += [f"{i3}{part} += __shfl_down_sync(0xffffffffu, {part}, {P}off);" for part in parts]
            out.append(i2 + "}")
            out.append(f"{i2}if ((threadIdx.x & 31) == 0) {{")
            out += [f"{i3}{b}[threadIdx.x >> 5] = {part};" for b, part in zip(bufs, parts)]
            out.append(i2 + "}")
            out.append(f"{i2}__syncthreads();")
            out.append(f"{i2}if (threadIdx.x < 32) {{  /* the first warp adds the warps' sums */")
            out += [f"{i3}{part} = threadIdx.x < {by // 32} ? {b}[threadIdx.x] : ({red.ctype})0;"
                    for red, b, part in zip(reds, bufs, parts)]
            out.append(f"{i3}for (int {P}off = 16; {P}off > 0; {P}off >>= 1) {{")
            out += [f"{i4}{part} += __shfl_down_sync(0xffffffffu, {part}, {P}off);" for part in parts]
            out.append(i3 + "}")
            out.append(i2 + "}")
        out.append(f"{i2}if ({leader}) {{")
        # the group's sums reach their accumulators in source order, then the rest runs
        combine = [red.combine(part) for red, part in zip(reds, parts)]
        if nm.split:
            out.append(f"{i3}if (gridDim.y == 1) {{  /* the whole sum is this block's */")
            out += plain.stmts(combine, i4)
            out.append(f"{i3}}} else {{  /* one share of it per y block */")
            for red, part in zip(reds, parts):
                val = f"-{part}" if red.form == "-=" else part
                out.append(f"{i4}{self.atomic_add(red.ctype, dp.expr(red.acc), val)};")
            out.append(i3 + "}")
        else:
            out += plain.stmts(combine, i3)
        out += plain.stmts(post, i3)
        out.append(i2 + "}")
        out.append(f"{i2}__syncthreads();  /* the buffers are reused by the next iteration */")
        out.append(IND + "}")
        return out

    def body_grid_reduce(self, site: Site, nm: NestMapping) -> list[str]:
        R = site.root
        red = site.reduction
        assert red is not None
        P = self.P
        part = f"{P}part"
        T = red.ctype
        dp = self.dp()
        subst = {id(u): red.rewrite(u, part) for u in red.updates}
        w = StmtWriter(dp, subst)
        i2, i3 = IND * 2, IND * 3
        out = [
            f"{IND}__shared__ {T} {P}warp_sums[32];",
            f"{IND}{T} {part} = 0;  /* this thread's share of the updates to {red.acc_text} */",
            f"{IND}const long long {P}trip = {self.trip(R, dp)};",
            f"{IND}const long long {P}stride = (long long)gridDim.x * blockDim.x;",
            (f"{IND}for (long long {P}t = (long long)blockIdx.x * blockDim.x + threadIdx.x; "
             f"{P}t < {P}trip; {P}t += {P}stride) {{"),
            i2 + self.var_decl(R, f"{P}t", dp),
        ]
        excl = {R.var or ""}
        if isinstance(red.acc, Name):
            excl.add(red.acc.name)
        out += self.private_decls(R.body, excl, i2)
        out += w.stmts(R.body, i2)
        out.append(IND + "}")
        out += [
            f"{IND}/* block sum: shuffles within each warp, then the first warp adds the warp sums */",
            f"{IND}for (int {P}off = 16; {P}off > 0; {P}off >>= 1)",
            f"{i2}{part} += __shfl_down_sync(0xffffffffu, {part}, {P}off);",
            f"{IND}if ((threadIdx.x & 31) == 0)",
            f"{i2}{P}warp_sums[threadIdx.x >> 5] = {part};",
            f"{IND}__syncthreads();",
            f"{IND}if (threadIdx.x < 32) {{",
            f"{i2}{part} = threadIdx.x < (blockDim.x >> 5) ? {P}warp_sums[threadIdx.x] : ({T})0;",
            f"{i2}for (int {P}off = 16; {P}off > 0; {P}off >>= 1)",
            f"{i3}{part} += __shfl_down_sync(0xffffffffu, {part}, {P}off);",
            f"{i2}if (threadIdx.x == 0)",
            f"{i3}{self.atomic_add(T, site.red_var, part)};",
            f"{IND}}}",
        ]
        return out

    @staticmethod
    def atomic_add(T: str, var: str, val: str) -> str:
        """``atomicAdd`` of ``val`` to ``var`` of C type ``T`` (the analysis offers atomics only
        for ``Dependence.atomic_ok`` types: 8- and 16-bit ones have no atomicAdd).

        Raises:
            AssertionError: ``T`` is narrower than 32 bits."""
        if T in ("float", "double", "int", "unsigned int", "unsigned", "int32_t", "uint32_t",
                 "signed int", "unsigned long long"):
            return f"atomicAdd(&{var}, {val})"
        assert T not in ("short", "short int", "unsigned short", "char", "signed char",
                         "unsigned char", "_Bool", "bool"), T
        # 64-bit integers: two's complement addition through the unsigned overload
        return f"atomicAdd((unsigned long long *)&{var}, (unsigned long long){val})"

    # -- host side ----------------------------------------------------------------------

    def launch_site(self, site: Site, ind: str) -> list[str]:
        nm = self.choice[site.id]
        name = self.kernel_names[site.id]
        root = site.root
        hp = self.dp()
        _, args = self.site_params(site)
        call_args = ", ".join(args)
        self.host_used |= (root.header_names())
        P, MAC = self.P, self.MAC
        i2 = ind + IND
        out = [ind + f"{{   /* kernel {site.id}: {nm.describe()} */"]
        if nm.kind == "col_reduce":
            bx, by = nm.block
            i3 = i2 + IND
            out += [
                f"{i2}const long long {P}trip = {self.trip(root, hp)};  /* loop {root.var} */",
                f"{i2}if ({P}trip > 0) {{",
                f"{i3}const unsigned int {P}gx = {P}blocks({P}trip, {bx}, {_MAX_GRID_X});",
            ]
            if nm.split:  # too few columns: the sums are split over y blocks too
                out.append(f"{i3}const unsigned int {P}gy = {P}gx >= {SPLIT_TARGET_BLOCKS} ? 1u : "
                           f"({SPLIT_TARGET_BLOCKS}u + {P}gx - 1) / {P}gx > {SPLIT_MAX_Y}u ? "
                           f"{SPLIT_MAX_Y}u : ({SPLIT_TARGET_BLOCKS}u + {P}gx - 1) / {P}gx;")
            else:
                out.append(f"{i3}const unsigned int {P}gy = 1;")
            out += [
                f"{i3}{name}<<<dim3({P}gx, {P}gy), dim3({bx}, {by})>>>({call_args});",
                f"{i3}{MAC}CHECK_LAUNCH();",
                f"{i2}}}",
            ]
        elif nm.kind == "grid2d":
            Q = root.body[0]
            assert isinstance(Q, For)
            self.host_used |= Q.header_names()
            roles = dict(nm.roles)
            X = Q if roles[Q.var] == "x" else root
            Y = root if X is Q else Q
            bx, by = nm.block
            ty, tx = nm.tile or (1, 1)
            span = self.tri_span(root, Q, hp)
            if span:
                out += [i2 + ln for ln in span[0]]

            def trip(L: For) -> str:
                return self.box_trip(L, Q, span, hp)

            out += [
                f"{i2}const long long {P}trip_y = {trip(Y)};  /* loop {Y.var} */",
                f"{i2}const long long {P}trip_x = {trip(X)};  /* loop {X.var} */",
                f"{i2}if ({P}trip_x > 0 && {P}trip_y > 0) {{",
                f"{i2}{IND}const dim3 {P}block({bx}, {by});",
                (f"{i2}{IND}const dim3 {P}grid({P}blocks({P}trip_x, {bx * tx}, {_MAX_GRID_X}), "
                 f"{P}blocks({P}trip_y, {by * ty}, {_MAX_GRID_Y}));"),
                f"{i2}{IND}{name}<<<{P}grid, {P}block>>>({call_args});",
                f"{i2}{IND}{MAC}CHECK_LAUNCH();",
                f"{i2}}}",
            ]
        else:
            b = nm.block[0]
            if nm.kind == "grid1d":
                grid = f"{P}blocks({P}trip, {b}, {_MAX_GRID_X})"
            elif nm.kind in ("block_per_row", "block_reduce"):
                grid = f"{P}blocks({P}trip, 1, {_MAX_GRID_X})"
            elif nm.kind == "warp_reduce":
                grid = f"{P}blocks({P}trip, {b // 32}, {_MAX_GRID_X})"
            else:
                grid = f"{P}blocks({P}trip, {b}, {_MAX_REDUCE_BLOCKS})"
            if nm.kind == "grid_reduce":
                out += [f"{i2}{name}_reset<<<1, 1>>>();", f"{i2}{MAC}CHECK_LAUNCH();"]
            out += [
                f"{i2}const long long {P}trip = {self.trip(root, hp)};  /* loop {root.var} */",
                f"{i2}if ({P}trip > 0) {{",
                f"{i2}{IND}{name}<<<{grid}, {b}>>>({call_args});",
                f"{i2}{IND}{MAC}CHECK_LAUNCH();",
                f"{i2}}}",
            ]
        out.append(ind + "}")
        return out

    def serial_kernel(self, g: Serial) -> list[str]:
        """Emit the one-thread kernel of ``g``; return its launch lines (unindented)."""
        name = f"{self.fn.name}_serial{g.id}"
        P = self.P
        stmts = g.stmts
        red_globals = {v for v in self.an.red_vars.values()}
        declared = declared_in(stmts)
        exposed, definite = exposed_reads(stmts)
        # a scalar that later code reads but this kernel assigns on some paths only keeps
        # its incoming value on the others (``if (c) q = n - 2;``): it comes in like one
        # that is read
        exposed = set(exposed) | g.uploads | ((scalars_written(stmts) - definite) & g.store)
        touched = (scalars_read(stmts) | scalars_written(stmts) | g.uploads) - red_globals
        free = touched - declared
        host_in = {n for n in free if n not in g.dev_in and n in exposed}
        decls, args = self.kernel_params(stmts, (free - host_in) | declared | red_globals,
                                         reads=g.uploads | host_in)
        dp = self.dp()
        w = BlockWriter(self, dp, self.an.source_order) if g.threads > 1 else StmtWriter(dp)
        body: list[str] = []
        order = [n for n in list(self.fn.scalar_params) + list(self.fn.locals) if n in free and n not in host_in]
        for n in dict.fromkeys(order):
            if n in g.dev_in and n in exposed:
                body.append(f"{IND}{self.ctype(n)} {n} = {P}dev_{n};")
            else:
                body.append(f"{IND}{self.ctype(n)} {n};")
        body += w.stmts(stmts, IND)
        if isinstance(w, BlockWriter):
            body = [IND + d for d in w.sums] + _one_barrier(body)
        lead = "if (threadIdx.x == 0) " if g.threads > 1 else ""
        for n in sorted(g.store):
            body.append(f"{IND}{lead}{P}dev_{n} = {n};  /* read later on the device */")
        lines = sorted({s.line for s in stmts})
        what = "; ".join(dict.fromkeys(g.notes))
        where = (f"line{'s' if len(lines) > 1 else ''} {', '.join(map(str, lines))} of the C "
                 "function, in program order" if lines else "no statement of the C function")
        if g.threads > 1:
            comment = [f"/* One-block kernel {g.id} ({g.threads} threads): {where}",
                       f" * ({what}); parallel loops and sums spread over the block, array",
                       " * writes outside them by thread 0 between barriers. */"]
        else:
            comment = [f"/* One-thread kernel {g.id}: {where}", f" * ({what}). */"]
        self.kernels.append("\n".join(comment + self.signature(name, decls, g.threads) + ["{"]
                                      + body + ["}", ""]))
        return [f"{name}<<<1, {g.threads}>>>({', '.join(args)});", f"{self.MAC}CHECK_LAUNCH();"]

    def host_ops(self, ops: Sequence[Op], ind: str) -> list[str]:
        out: list[str] = []
        hp = self.dp()  # no array on the host; math calls keep C's argument types
        hw = StmtWriter(hp)
        for op in ops:
            if isinstance(op, HostStmt):
                out += hw.stmts([op.stmt], ind)
                if not (isinstance(op.stmt, Decl) and op.stmt.init is None):
                    self.host_used |= scalars_read([op.stmt]) | scalars_written([op.stmt])
            elif isinstance(op, HostLoop):
                L = op.loop
                self.host_used |= {L.var or ""} | L.header_names()
                why = op.why.split(": ", 1)[-1] if op.why else ""
                why = f" ({why})" if why else ""
                out.append(ind + f"/* loop {L.var} stays on the host{why} */")
                init, cond, upd = hw.header_part(L.init), hp.expr(L.cond) if L.cond else "", hw.header_part(L.update)
                out.append(ind + f"for ({init}; {cond}; {upd}) {{")
                out += self.host_ops(op.body, ind + IND)
                out.append(ind + "}")
            elif isinstance(op, HostIf):
                self.host_used |= names_in(op.cond)
                out.append(ind + f"if ({hp.expr(op.cond)}) {{")
                out += self.host_ops(op.then, ind + IND)
                if op.orelse:
                    out.append(ind + "} else {")
                    out += self.host_ops(op.orelse, ind + IND)
                out.append(ind + "}")
            elif isinstance(op, HostReturn):
                out.append(ind + "return (int)cudaGetLastError();")
            elif isinstance(op, Launch):
                self.site_kernel(op.site)
                scoped = bool(op.site.expansions or op.site.snapshots)
                before, after = self.scratch_lines(op.site, ind) if scoped else ([], [])
                out += before + self.launch_site(op.site, ind + IND if scoped else ind) + after
            elif isinstance(op, Serial):
                out += [ind + x for x in self.serial_kernel(op)]
        return out

    # -- the file -----------------------------------------------------------------------

    def file_header(self) -> list[str]:
        an = self.an
        prob = an.problem
        lines = [
            f"/* {self.fn.name}_cuda: generated by cudaperf's built-in policy from {self.fn.name}()"
            + (f" in {prob.path.name}" if prob.path else "") + ".",
            f" * Mapping: {self.m.describe()}",
            " *",
        ]
        for nm in self.m.nests:
            site = an.sites[nm.site]
            roles = ", ".join(f"loop {v} -> {r}" for v, r in nm.roles)
            text = f" *   kernel {nm.site} ({nm.kind}): {roles}; block {block_text(nm.block)}"
            if nm.tile:
                text += f"; register tile {block_text(nm.tile)} (outputs per thread, y x)"
            lines.append(text)
            seq = f"sequential in each thread: loop {', loop '.join(nm.sequential)}" if nm.sequential else "nothing sequential in a thread"
            lines.append(f" *     {seq}")
            if site.interchanged:
                lines.append(f" *     loops {site.interchanged[0]}, {site.interchanged[1]} interchanged")
            if site.transforms:
                lines.append(f" *     rewritten: {', '.join(site.transforms)}")
        host = an.host_loop_names()
        if host:
            lines.append(f" *   on the host: loop {', loop '.join(host)} (one launch of each kernel inside per iteration)")
        else:
            lines.append(" *   on the host: only the launches")
        if an.serials:
            lines.append(f" *   one-thread kernels: {len(an.serials)} (statements outside the parallel loops, in program order)")
        for var, line, n in an.distributed:
            lines.append(f" *   loop {var} (line {line}): distributed into {n} loops; every "
                         "dependence between them stays within one")
            lines.append(" *     iteration and runs from an earlier loop to a later one")
        lines.append(" *")
        lines.append(" * Dependence test (line numbers count from the function's first line):")
        for r in an.loop_report():
            lines += _wrap_comment(r, " *   ", " *     ")
        lines += [
            " *",
            " * Arrays are flat device pointers, indexed row-major from their extents.  Array",
            " * parameters are assumed not to alias each other (hence __restrict__).  Kernels run",
            " * on the default stream in program order; the function returns the CUDA error code.",
            " */",
        ]
        return lines

    def generate(self) -> str:
        P, MAC = self.P, self.MAC
        body = self.host_ops(self.an.ops, IND)
        # device copies of scalars assigned on the device
        for n in sorted(self.an.device_scalars):
            self.globals.insert(0, f"static __device__ {self.ctype(n)} {P}dev_{n};  /* {n}, assigned on the device */")
        for n in reversed(self.fn.local_arrays):
            a = self.fn.arrays[n]
            count = 1
            for e in a.extents:
                count *= int(e)
            self.globals.insert(0, f"static __device__ {a.ctype} {local_array_name(self.an, n)}"
                                   f"[{count}];  /* the local array {n}[{']['.join(a.extents)}], "
                                   "row-major */")
        params = []
        for p in self.fn.params:
            if isinstance(p, ArrayParam):
                const = "const " if p.const else ""
                params.append(f"{const}{normalize_ctype(p.ctype)} *{p.name}")
            else:
                params.append(f"{normalize_ctype(p.ctype)} {p.name}")
        out = self.file_header()
        out += [
            "#include <cuda_runtime.h>",
            "#include <stddef.h>",
            "#include <stdint.h>",
            "#include <math.h>",
            "",
            "/* Return the error of the last launch, if any (no synchronisation). */",
            f"#define {MAC}CHECK_LAUNCH() \\",
            "    do { \\",
            f"        cudaError_t {P}err = cudaGetLastError(); \\",
            f"        if ({P}err != cudaSuccess) \\",
            f"            return (int){P}err; \\",
            "    } while (0)",
            "",
            "/* Blocks needed for `work` items at `per_block` items per block, at most `cap`",
            " * (the kernels' grid-stride loops cover the rest). */",
            f"static inline unsigned int {P}blocks(long long work, long long per_block, long long cap)",
            "{",
            f"{IND}long long b = (work + per_block - 1) / per_block;",
            f"{IND}return (unsigned int)(b < cap ? b : cap);",
            "}",
            "",
        ]
        if self.globals:
            out += self.globals + [""]
        out += self.kernels
        out.append(f'extern "C" int {self.fn.name}_cuda({", ".join(params)})')
        out.append("{")
        out += self._prune_host_decls(body)
        out.append(f"{IND}return (int)cudaGetLastError();")
        out.append("}")
        return "\n".join(out) + "\n"

    def _prune_host_decls(self, body: list[str]) -> list[str]:
        """Drop host declarations without initialiser of scalars the host never uses."""
        out = []
        for line in body:
            m = re.fullmatch(r"\s*(?:const\s+)?[\w ]+?\s+(\w+);", line)
            if m and "=" not in line and m.group(1) not in self.host_used:
                continue
            out.append(line)
        return out


class _Sums(NamedTuple):
    """What :meth:`_Gen._sums` returns."""

    loop: For
    sum_loop: For
    reds: list[Reduction]
    pre: list[Stmt]
    post: list[Stmt]
    parts: list[str]
    dp: DevicePrinter
    writer: StmtWriter
    plain: StmtWriter


def _scratch_alloc(name: str, T: str, n: str, err: str, ind: str, fill: str | None = None
                   ) -> list[str]:
    """Launcher lines that declare ``T *name`` and, when ``n`` elements are wanted,
    allocate them on the default stream (``cudaMallocAsync``), then run ``fill`` (a CUDA
    call, e.g. the snapshot's copy); a failure returns its error."""
    lines = [f"{ind}{T} *{name} = NULL;",
             f"{ind}if ({n} > 0) {{",
             f"{ind}{IND}cudaError_t {err} = cudaMallocAsync((void **)&{name}, "
             f"(size_t){n} * sizeof({T}), 0);"]
    if fill is not None:
        lines += [f"{ind}{IND}if ({err} == cudaSuccess)", f"{ind}{IND}{IND}{err} = {fill};"]
    return lines + [f"{ind}{IND}if ({err} != cudaSuccess)", f"{ind}{IND}{IND}return (int){err};",
                    f"{ind}}}"]


def _wrap_comment(text: str, first: str, rest: str, width: int = 92) -> list[str]:
    text = text.replace("*/", "* /")
    words = text.split()
    lines: list[str] = []
    cur = first
    for w in words:
        if len(cur) + len(w) + 1 > width and cur.strip(" *"):
            lines.append(cur.rstrip())
            cur = rest
        cur += w + " "
    lines.append(cur.rstrip())
    return lines


def generate(an: Analysis, mapping: Mapping) -> str:
    """The complete ``.cu`` source for ``an`` mapped with ``mapping``."""
    return _Gen(an, mapping).generate()


__all__ = ["DevicePrinter", "StmtWriter", "generate"]
