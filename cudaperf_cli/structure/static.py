"""Static analysis of CUDA source with tree-sitter-cuda.

The file is parsed once.  For every ``__global__`` kernel a walker visits the body in
program order and evaluates expressions *symbolically and numerically at once*:

* every value is a :class:`Val`: a per-thread numeric vector over one representative
  thread block (``threadIdx`` enumerated, ``blockIdx`` = 1, problem sizes = a
  representative value unless given), flags saying whether it varies with the thread
  index (``tid``), depends on memory contents (``data``) or on an assumed representative
  value (``sym``), and, for affine integer arithmetic, a polynomial (:class:`Poly`) used
  to print strides symbolically (``A[i*n + j]`` -> stride ``n`` along ``threadIdx.x``);
* local variables are resolved through their definitions (first definition; compound
  updates such as ``i += stride`` keep the first-iteration value and merge the flags);
* loops with a simple induction variable are simulated (trip count, sample values of the
  induction variable, so that ``if (tid < s)`` in a tree reduction is evaluated for
  ``s = 128 ... 1``);
* ``if``/loop conditions split an active-thread mask, giving per-warp divergence and
  the active lanes of every memory access;
* each global access yields 32-byte sectors per warp request (vs. the ideal for the bytes
  it needs); each shared access yields bank wavefronts per request (vs. the ideal).

Host code is scanned for ``<<<grid, block, smem>>>`` launches (constant-folded through
``#define``, ``const`` and ``dim3`` locals) and for host synchronisations between launches.

Everything here is an *estimate*: representative values stand for unknown sizes, loops
with unknown trip counts count :data:`DEFAULT_TRIP` iterations, data-dependent indices
are assumed scattered.  ``docs/structural-score.md`` lists the blind spots.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from fractions import Fraction
from functools import lru_cache
from typing import Any, Iterable, Mapping

import numpy as np

from ..core import eval_int_expr

#: Trip count assumed for a loop whose trip count is not a compile-time constant.
DEFAULT_TRIP = 8
#: Per-loop-level weight of a memory access / branch / barrier (8 ** depth).
LOOP_WEIGHT = 8
#: Representative value of an unknown integer size (``n``): large and a multiple of 32.
DEFAULT_SIZE = 4096
#: Representative ``blockIdx`` component.
DEFAULT_BLOCK_IDX = 1
#: Representative ``gridDim`` component when the grid is unknown.
DEFAULT_GRID_DIM = 64
#: SIMT efficiency factor assumed inside a branch whose condition depends on loaded data.
DATA_BRANCH_EFFICIENCY = 0.75
#: Maximum number of sample values per loop and of samples multiplied over a loop nest.
MAX_SAMPLES_PER_LOOP = 8
SAMPLE_BUDGET = 16
#: Iterations a non-additive loop is simulated before its trip count is called unknown.
MAX_SIMULATED_ITERATIONS = 64

# ---------------------------------------------------------------------------------------
# Types
# ---------------------------------------------------------------------------------------

#: Element type -> size in bytes.
TYPE_BYTES: dict[str, int] = {
    "bool": 1,
    "char": 1,
    "signed char": 1,
    "unsigned char": 1,
    "int8_t": 1,
    "uint8_t": 1,
    "char2": 2,
    "uchar2": 2,
    "short": 2,
    "unsigned short": 2,
    "int16_t": 2,
    "uint16_t": 2,
    "half": 2,
    "__half": 2,
    "__nv_bfloat16": 2,
    "nv_bfloat16": 2,
    "int": 4,
    "unsigned": 4,
    "unsigned int": 4,
    "signed": 4,
    "signed int": 4,
    "int32_t": 4,
    "uint32_t": 4,
    "float": 4,
    "uchar": 1,
    "ushort": 2,
    "uint": 4,
    "ulong": 8,
    "u8": 1,
    "u16": 2,
    "u32": 4,
    "u64": 8,
    "half2": 4,
    "__half2": 4,
    "__nv_bfloat162": 4,
    "char4": 4,
    "uchar4": 4,
    "short2": 4,
    "long": 8,
    "unsigned long": 8,
    "long int": 8,
    "long long": 8,
    "long long int": 8,
    "unsigned long long": 8,
    "unsigned long long int": 8,
    "size_t": 8,
    "ptrdiff_t": 8,
    "int64_t": 8,
    "uint64_t": 8,
    "double": 8,
    "float2": 8,
    "int2": 8,
    "uint2": 8,
    "short4": 8,
    "ushort4": 8,
    "float3": 12,
    "int3": 12,
    "uint3": 12,
    "float4": 16,
    "int4": 16,
    "uint4": 16,
    "double2": 16,
    "longlong2": 16,
    "ulonglong2": 16,
    "long2": 16,
    "ulong2": 16,
    "double3": 24,
    "double4": 32,
    "longlong4": 32,
}

#: Vector type -> its component type.
VECTOR_COMPONENT: dict[str, str] = {
    "float2": "float",
    "float3": "float",
    "float4": "float",
    "double2": "double",
    "double3": "double",
    "double4": "double",
    "int2": "int",
    "int3": "int",
    "int4": "int",
    "uint2": "unsigned",
    "uint3": "unsigned",
    "uint4": "unsigned",
    "half2": "half",
    "__half2": "half",
    "__nv_bfloat162": "half",
    "char2": "char",
    "char4": "char",
    "uchar2": "char",
    "uchar4": "char",
    "short2": "short",
    "short4": "short",
    "ushort4": "short",
    "longlong2": "long",
    "longlong4": "long",
    "ulonglong2": "long",
    "long2": "long",
    "ulong2": "long",
}

#: Scalar type -> FLOP data type.
FLOAT_DTYPE = {
    "double": "fp64",
    "float": "fp32",
    "half": "fp16",
    "__half": "fp16",
    "__nv_bfloat16": "fp16",
    "nv_bfloat16": "fp16",
}

_TYPE_RANK = {"fp64": 3, "fp32": 2, "fp16": 1}

_QUALIFIERS = {
    "const",
    "volatile",
    "__restrict__",
    "__restrict",
    "restrict",
    "static",
    "register",
    "struct",
    "__shared__",
    "__device__",
    "__constant__",
    "extern",
    "inline",
    "__forceinline__",
    "__managed__",
    "constexpr",
    "unsigned_",
    "typename",
}


def norm_type(text: str) -> str:
    """Normalise a C/CUDA type spelling: qualifiers, pointers and namespaces dropped."""
    t = text.replace("*", " ").replace("&", " ")
    t = re.sub(r"\b\w+::", "", t)
    words = [w for w in t.split() if w not in _QUALIFIERS]
    return " ".join(words)


def type_bytes(ctype: str) -> int | None:
    """Size in bytes of an element type (``None`` for an unknown type)."""
    return TYPE_BYTES.get(norm_type(ctype))


def scalar_kind(ctype: str | None) -> str | None:
    """``fp64``/``fp32``/``fp16`` for a floating type (or vector of one), else ``None``."""
    if ctype is None:
        return None
    t = norm_type(ctype)
    t = VECTOR_COMPONENT.get(t, t)
    return FLOAT_DTYPE.get(t)


# ---------------------------------------------------------------------------------------
# Polynomials (symbolic strides)
# ---------------------------------------------------------------------------------------

Mono = tuple  # sorted tuple of symbol names (with repetition)


class Poly:
    """A polynomial with rational coefficients over symbol names (affine index math)."""

    __slots__ = ("terms",)

    def __init__(self, terms: dict[Mono, Fraction] | None = None):
        self.terms = {m: c for m, c in (terms or {}).items() if c != 0}

    @staticmethod
    def const(c: int | Fraction) -> "Poly":
        """A constant."""
        return Poly({(): Fraction(c)})

    @staticmethod
    def sym(name: str) -> "Poly":
        """A symbol."""
        return Poly({(name,): Fraction(1)})

    def __add__(self, o: "Poly") -> "Poly":
        t = dict(self.terms)
        for m, c in o.terms.items():
            t[m] = t.get(m, Fraction(0)) + c
        return Poly(t)

    def __neg__(self) -> "Poly":
        return Poly({m: -c for m, c in self.terms.items()})

    def __sub__(self, o: "Poly") -> "Poly":
        return self + (-o)

    def __mul__(self, o: "Poly") -> "Poly":
        if len(self.terms) * len(o.terms) > 64:
            raise OverflowError("polynomial too large")
        t: dict[Mono, Fraction] = {}
        for m1, c1 in self.terms.items():
            for m2, c2 in o.terms.items():
                m = tuple(sorted(m1 + m2))
                t[m] = t.get(m, Fraction(0)) + c1 * c2
        return Poly(t)

    def scale(self, f: Fraction) -> "Poly":
        """Multiply every coefficient by ``f``."""
        return Poly({m: c * f for m, c in self.terms.items()})

    def coefficient_of(self, name: str) -> "Poly | None":
        """d(self)/d(name) when ``self`` is affine in ``name`` (else ``None``)."""
        t: dict[Mono, Fraction] = {}
        for m, c in self.terms.items():
            k = m.count(name)
            if k > 1:
                return None
            if k == 1:
                rest = list(m)
                rest.remove(name)
                rest_t = tuple(rest)
                t[rest_t] = t.get(rest_t, Fraction(0)) + c
        return Poly(t)

    def is_zero(self) -> bool:
        """No terms."""
        return not self.terms

    def __str__(self) -> str:
        if not self.terms:
            return "0"
        parts = []
        for m, c in sorted(self.terms.items(), key=lambda t: (len(t[0]), t[0])):
            cs = str(c.numerator) if c.denominator == 1 else f"{c.numerator}/{c.denominator}"
            if not m:
                parts.append(cs)
            elif c == 1:
                parts.append("*".join(m))
            elif c == -1:
                parts.append("-" + "*".join(m))
            else:
                parts.append(cs + "*" + "*".join(m))
        s = " + ".join(parts)
        return s.replace("+ -", "- ")


# ---------------------------------------------------------------------------------------
# Values
# ---------------------------------------------------------------------------------------


class Val:
    """A value in the kernel: numeric per-thread vector (or scalar) plus flags.

    Attributes:
        num: python/numpy scalar (uniform) or ``np.ndarray`` of one entry per thread of the
            representative block; ``None`` when unknown per thread (data-dependent).
        tid: varies with the thread index.
        data: depends on memory contents or an opaque call.
        sym: depends on an assumed representative value (unknown size, assumed block...).
        poly: affine/polynomial form for symbolic printing (``None`` if not polynomial).
    """

    __slots__ = ("num", "tid", "data", "sym", "poly")

    def __init__(
        self,
        num: Any,
        tid: bool = False,
        data: bool = False,
        sym: bool = False,
        poly: Poly | None = None,
    ):
        self.num = num
        self.tid = tid
        self.data = data
        self.sym = sym
        self.poly = poly

    @staticmethod
    def const(c: int | float) -> "Val":
        """A constant."""
        p = Poly.const(c) if isinstance(c, int) else None
        return Val(c, poly=p)

    def scalar(self) -> float | int | None:
        """The value as a uniform python number, or ``None``."""
        if self.num is None or self.tid:
            return None
        n = self.num
        if isinstance(n, np.ndarray):
            if n.size == 0:
                return None
            n = n.flat[0]
        if isinstance(n, (np.integer,)):
            return int(n)
        if isinstance(n, (np.floating,)):
            return float(n)
        return n

    def known_int(self) -> int | None:
        """A compile-time-known integer (no assumed symbols), else ``None``."""
        if self.sym or self.data:
            return None
        s = self.scalar()
        if s is None:
            return None
        try:
            return int(s)
        except (TypeError, ValueError, OverflowError):
            return None


UNKNOWN = Val(None, tid=True, data=True)


def _is_int(x: Any) -> bool:
    if isinstance(x, (bool, int, np.integer, np.bool_)):
        return True
    if isinstance(x, np.ndarray):
        return x.dtype.kind in "iub"
    return False


def _as_int(x: Any) -> Any:
    if isinstance(x, np.ndarray):
        if x.dtype.kind == "f":
            return np.nan_to_num(np.trunc(x)).astype(np.int64)
        return x.astype(np.int64)
    if isinstance(x, float):
        if not math.isfinite(x):
            return 0
        return int(x)
    return int(x)


def _num_binop(op: str, a: Any, b: Any) -> Any:
    both_int = _is_int(a) and _is_int(b)
    with np.errstate(all="ignore"):
        if op == "+":
            return a + b
        if op == "-":
            return a - b
        if op == "*":
            return a * b
        if op in ("/", "%"):
            if both_int:
                a_i, b_i = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
                b_safe = np.where(b_i == 0, 1, b_i)
                if op == "/":
                    q = np.abs(a_i) // np.abs(b_safe) * np.sign(a_i) * np.sign(b_safe)
                else:
                    q = np.fmod(a_i, b_safe)
                return q if q.ndim else int(q)
            bf = np.asarray(b, dtype=np.float64)
            bf = np.where(bf == 0, 1.0, bf)
            r = np.asarray(a, dtype=np.float64) / bf if op == "/" else np.fmod(a, bf)
            return r if np.ndim(r) else float(r)
        if op in ("<<", ">>"):
            a_i = np.asarray(_as_int(a), dtype=np.int64)
            s = np.clip(np.asarray(_as_int(b), dtype=np.int64), 0, 62)
            r = np.left_shift(a_i, s) if op == "<<" else np.right_shift(a_i, s)
            return r if r.ndim else int(r)
        if op in ("&", "|", "^"):
            a_i = np.asarray(_as_int(a), dtype=np.int64)
            b_i = np.asarray(_as_int(b), dtype=np.int64)
            r = {"&": np.bitwise_and, "|": np.bitwise_or, "^": np.bitwise_xor}[op](a_i, b_i)
            return r if r.ndim else int(r)
        cmp = {
            "<": np.less,
            "<=": np.less_equal,
            ">": np.greater,
            ">=": np.greater_equal,
            "==": np.equal,
            "!=": np.not_equal,
        }.get(op)
        if cmp is not None:
            r = cmp(a, b)
            return r.astype(np.int64) if isinstance(r, np.ndarray) else int(bool(r))
        if op == "&&":
            r = np.logical_and(a, b)
            return r.astype(np.int64) if isinstance(r, np.ndarray) else int(bool(r))
        if op == "||":
            r = np.logical_or(a, b)
            return r.astype(np.int64) if isinstance(r, np.ndarray) else int(bool(r))
    raise ValueError(op)


# ---------------------------------------------------------------------------------------
# Parsing
# ---------------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _parser():
    import tree_sitter as ts
    import tree_sitter_cuda as tsc

    return ts.Parser(ts.Language(tsc.language()))


def parse(source: str | bytes):
    """Parse CUDA source with tree-sitter-cuda; returns the tree."""
    data = source.encode("utf-8", "replace") if isinstance(source, str) else source
    return _parser().parse(data)


def _text(node) -> str:
    return node.text.decode("utf-8", "replace") if node is not None else ""


def _line(node) -> int:
    return node.start_point[0] + 1


def _short(text: str, n: int = 60) -> str:
    t = " ".join(text.split())
    return t if len(t) <= n else t[: n - 1] + "…"


def _strip_parens(node):
    while node is not None and node.type == "parenthesized_expression" and node.named_child_count:
        node = node.named_children[0]
    return node


def _declarator_info(decl) -> tuple[str | None, int, list]:
    """(name, pointer depth, array size nodes) of a declarator."""
    ptr = 0
    dims: list = []
    node = decl
    while node is not None:
        t = node.type
        if t == "identifier" or t == "field_identifier":
            return _text(node), ptr, dims
        if t == "pointer_declarator":
            ptr += 1
            node = node.child_by_field_name("declarator")
        elif t == "array_declarator":
            dims.insert(0, node.child_by_field_name("size"))
            node = node.child_by_field_name("declarator")
        elif t in (
            "reference_declarator",
            "parenthesized_declarator",
            "init_declarator",
            "abstract_pointer_declarator",
        ):
            if t == "abstract_pointer_declarator":
                ptr += 1
            nxt = node.child_by_field_name("declarator")
            if nxt is None:
                named = [c for c in node.named_children if c.type != "type_qualifier"]
                nxt = named[0] if named else None
            node = nxt
        else:
            named = [c for c in node.named_children if c.type != "type_qualifier"]
            node = named[0] if named else None
    return None, ptr, dims


# ---------------------------------------------------------------------------------------
# File-level facts
# ---------------------------------------------------------------------------------------


@dataclass
class ParamInfo:
    """A function parameter: name, element type, pointer depth, array dimensions."""

    name: str
    ctype: str
    pointer: int
    dims: tuple = ()


@dataclass
class FuncInfo:
    """A function definition of the file."""

    node: Any
    name: str
    qualifiers: frozenset
    params: list[ParamInfo]
    template_params: list[str]
    body: Any
    line: int
    return_type: str = ""
    launch_bounds: tuple | None = None  # (max_threads_node, min_blocks_node)

    @property
    def is_kernel(self) -> bool:
        """A ``__global__`` function."""
        return "__global__" in self.qualifiers

    @property
    def is_device(self) -> bool:
        """A ``__device__`` (not ``__global__``) function."""
        return "__device__" in self.qualifiers and "__global__" not in self.qualifiers


@dataclass
class ArrayInfo:
    """An array or pointer the kernel can subscript.

    ``space`` is ``global`` (pointer params, ``__device__`` arrays), ``shared``,
    ``constant`` or ``local`` (per-thread arrays).
    """

    name: str
    space: str
    ctype: str
    elem_bytes: int
    dims: tuple = ()  # sizes of the dimensions after the first (for linearisation)
    extern: bool = False
    line: int = 0
    scalar: bool = False  # a file-scope __device__ scalar variable


@dataclass
class PtrRef:
    """A pointer value: base array, byte offset, element type."""

    array: ArrayInfo
    offset: Val
    ctype: str
    elem_bytes: int
    dims: tuple = ()


class SourceFile:
    """A parsed CUDA file with its file-scope facts (macros, constants, functions)."""

    def __init__(self, source: str, sizes: Mapping[str, int] | None = None):
        self.source = source
        self.tree = parse(source)
        self.sizes = dict(sizes or {})
        self.defines: dict[str, str] = {}
        self.macro_fns: dict[str, tuple[list[str], str]] = {}
        self.const_nodes: dict[str, Any] = {}  # file-scope const/constexpr/enum -> value node
        self.file_arrays: dict[str, ArrayInfo] = {}
        self.functions: list[FuncInfo] = []
        self.functions_by_name: dict[str, FuncInfo] = {}
        self.errors: list[int] = []  # lines of syntax errors outside functions
        self.instantiations: dict[str, list[list[str]]] = {}  # explicit template instantiations
        self.typedefs: dict[str, str] = {}  # typedef / using aliases of scalar types
        self.shared_structs: set[str] = set()  # SharedMemory<T>-style helpers
        self.unparsed_kernels: list[tuple[str, int, str]] = []  # (name, line, why)
        self._memory_fns: dict[str, bool] = {}
        self._define_cache: dict[str, Val | None] = {}
        self._collect()

    # -- collection ---------------------------------------------------------------------
    def _collect(self) -> None:
        stack = [self.tree.root_node]
        while stack:
            node = stack.pop()
            t = node.type
            if t == "function_definition":
                self._add_function(node)
                continue
            if t == "preproc_def":
                name = node.child_by_field_name("name")
                value = node.child_by_field_name("value")
                if name is not None and value is not None:
                    self.defines[_text(name)] = _text(value).strip()
                continue
            if t == "preproc_function_def":
                name = node.child_by_field_name("name")
                params = node.child_by_field_name("parameters")
                value = node.child_by_field_name("value")
                if name is not None and params is not None and value is not None:
                    pnames = [_text(c) for c in params.named_children if c.type == "identifier"]
                    self.macro_fns[_text(name)] = (pnames, _text(value).strip())
                continue
            if (
                t == "declaration"
                and node.parent is not None
                and node.parent.type
                in (
                    "translation_unit",
                    "declaration_list",
                    "linkage_specification",
                    "preproc_ifdef",
                    "preproc_if",
                    "preproc_else",
                    "preproc_elif",
                )
            ):
                self._file_declaration(node)
                continue
            if t in ("type_definition", "alias_declaration"):
                self._typedef(node)
                continue
            if t in ("struct_specifier", "class_specifier"):
                name = node.child_by_field_name("name")
                body = node.child_by_field_name("body")
                if name is not None and body is not None and "__shared__" in _text(body):
                    self.shared_structs.add(_text(name))
                stack.extend(reversed(node.named_children))
                continue
            if t == "template_instantiation":
                for fd in node.named_children:
                    if fd.type == "function_declarator":
                        tf = fd.child_by_field_name("declarator")
                        if tf is not None and tf.type == "template_function":
                            nm = _text(tf.child_by_field_name("name")).split("::")[-1]
                            args = tf.child_by_field_name("arguments")
                            texts = [_text(a) for a in (args.named_children if args else [])]
                            self.instantiations.setdefault(nm, []).append(texts)
                continue
            if t == "enumerator":
                name = node.child_by_field_name("name")
                value = node.child_by_field_name("value")
                if name is not None and value is not None:
                    self.const_nodes[_text(name)] = value
                continue
            if t == "ERROR":
                self.errors.append(_line(node))
            stack.extend(reversed(node.named_children))
        self.functions.sort(key=lambda f: f.node.start_byte)
        self._find_unparsed_kernels()

    def _find_unparsed_kernels(self) -> None:
        """Every ``__global__`` in the text that did not become a kernel definition, a
        prototype or an instantiation (syntax errors, kernels generated by macros)."""
        data = self.tree.root_node.text or b""
        for m in re.finditer(rb"\b__global__\b", data):
            node = self.tree.root_node.descendant_for_byte_range(m.start(), m.end())
            why = None
            cur = node
            while cur is not None:
                t = cur.type
                if t in ("comment", "string_literal", "raw_string_literal", "char_literal"):
                    break
                if t == "function_definition":
                    if cur.child_by_field_name("body") is None:
                        why = "a kernel definition without a body"
                    break
                if t in ("declaration", "template_instantiation", "field_declaration"):
                    break
                if t in ("preproc_def", "preproc_function_def"):
                    why = "a kernel generated by a macro is not analysed"
                    break
                if t == "ERROR":
                    why = "syntax the parser does not understand around this kernel"
                    break
                cur = cur.parent
            if why is None and (cur is None or cur.type != "ERROR"):
                continue
            tail = data[m.end() : m.end() + 2000].decode("utf-8", "replace")
            nm = re.search(r"(\w+)\s*\(", tail)
            end = re.search(r"[;{]", tail)
            if why != "a kernel generated by a macro is not analysed" and (
                end is None or end.group(0) == ";"
            ):
                continue  # a prototype
            line = data[: m.start()].count(b"\n") + 1
            self.unparsed_kernels.append((nm.group(1) if nm else "?", line, why or "not parsed"))

    def _file_declaration(self, node) -> None:
        tnode = node.child_by_field_name("type")
        ctype = norm_type(_text(tnode)) if tnode is not None else "int"
        words = {
            (_text(c))
            for c in node.children
            if not c.is_named or c.type in ("type_qualifier", "storage_class_specifier")
        }
        quals = set()
        for w in words:
            quals.update(w.split())
        for c in node.children_by_field_name("declarator"):
            if c.type == "init_declarator":
                name, ptr, dims = _declarator_info(c.child_by_field_name("declarator"))
                value = c.child_by_field_name("value")
                if (
                    name
                    and not ptr
                    and not dims
                    and value is not None
                    and ("const" in quals or "constexpr" in quals)
                    and "__device__" not in quals
                ):
                    self.const_nodes[name] = value
                    continue
                if name and (
                    "__device__" in quals or "__managed__" in quals or "__constant__" in quals
                ):
                    space = "constant" if "__constant__" in quals else "global"
                    self.file_arrays[name] = ArrayInfo(
                        name,
                        space,
                        ctype,
                        type_bytes(ctype) or 4,
                        tuple(dims[1:]),
                        line=_line(c),
                        scalar=not dims and not ptr,
                    )
                continue
            name, ptr, dims = _declarator_info(c)
            if name and (
                "__device__" in quals or "__constant__" in quals or "__managed__" in quals
            ):
                space = "constant" if "__constant__" in quals else "global"
                if dims:
                    self.file_arrays[name] = ArrayInfo(
                        name, space, ctype, type_bytes(ctype) or 4, tuple(dims[1:]), line=_line(c)
                    )
                elif not ptr:
                    self.file_arrays[name] = ArrayInfo(
                        name, space, ctype, type_bytes(ctype) or 4, (), line=_line(c), scalar=True
                    )

    def _add_function(self, node) -> None:
        quals = frozenset(
            c.type for c in node.children if not c.is_named and c.type.startswith("__")
        )
        decl = node.child_by_field_name("declarator")
        while decl is not None and decl.type != "function_declarator":
            nxt = decl.child_by_field_name("declarator")
            decl = nxt
        if decl is None:
            return
        name_node = decl.child_by_field_name("declarator")
        name = _text(name_node)
        if "::" in name:
            name = name.split("::")[-1]
        params: list[ParamInfo] = []
        plist = decl.child_by_field_name("parameters")
        if plist is not None:
            for p in plist.named_children:
                if p.type not in ("parameter_declaration", "optional_parameter_declaration"):
                    continue
                tnode = p.child_by_field_name("type")
                pname, ptr, dims = _declarator_info(p.child_by_field_name("declarator"))
                if pname is None:
                    continue
                params.append(
                    ParamInfo(pname, norm_type(_text(tnode)), ptr + len(dims), tuple(dims[1:]))
                )
        tparams: list[str] = []
        parent = node.parent
        if parent is not None and parent.type == "template_declaration":
            tpl = parent.child_by_field_name("parameters")
            if tpl is not None:
                for tp in tpl.named_children:
                    nm = tp.child_by_field_name("declarator") or tp.child_by_field_name("name")
                    if nm is None:
                        ids = [
                            c
                            for c in tp.named_children
                            if c.type in ("identifier", "type_identifier")
                        ]
                        nm = ids[-1] if ids else None
                    if nm is not None:
                        tparams.append(_text(nm))
        lb = None
        for c in node.children:
            if c.type == "launch_bounds":
                args = c.named_children
                lb = tuple(args)
        body = node.child_by_field_name("body")
        rtype = node.child_by_field_name("type")
        fi = FuncInfo(
            node,
            name,
            quals,
            params,
            tparams,
            body,
            _line(node),
            norm_type(_text(rtype)) if rtype is not None else "",
            lb,
        )
        self.functions.append(fi)
        self.functions_by_name.setdefault(name, fi)

    # -- constants ----------------------------------------------------------------------
    def define_value(self, name: str, _depth: int = 0) -> Val | None:
        """Value of an object-like macro or file-scope constant (``None`` if not numeric)."""
        if name in self._define_cache:
            return self._define_cache[name]
        self._define_cache[name] = None  # recursion guard
        val: Val | None = None
        if name in self.defines and _depth < 16:
            text = self.defines[name]
            env: dict[str, int] = {}
            for ident in set(re.findall(r"[A-Za-z_]\w*", text)):
                v = self.define_value(ident, _depth + 1)
                if v is not None and v.known_int() is not None:
                    env[ident] = v.known_int()  # type: ignore[assignment]
            try:
                val = Val.const(eval_int_expr(text, env))
            except (ValueError, SyntaxError, ZeroDivisionError, RecursionError):
                m = re.fullmatch(r"\(?\s*([-+]?\d*\.?\d+(?:[eE][-+]?\d+)?)[fF]?\s*\)?", text)
                if m:
                    val = Val.const(float(m.group(1)))
        elif name in self.const_nodes and _depth < 16:
            node = self.const_nodes[name]
            try:
                val = Val.const(eval_int_expr(_text(node), self._int_env(_text(node), _depth)))
            except (ValueError, SyntaxError, ZeroDivisionError, RecursionError):
                m = re.fullmatch(r"([-+]?\d*\.?\d+(?:[eE][-+]?\d+)?)[fF]?", _text(node).strip())
                if m:
                    val = Val.const(float(m.group(1)))
        self._define_cache[name] = val
        return val

    def _int_env(self, text: str, depth: int) -> dict[str, int]:
        env: dict[str, int] = {}
        for ident in set(re.findall(r"[A-Za-z_]\w*", text)):
            v = self.define_value(ident, depth + 1)
            if v is not None and v.known_int() is not None:
                env[ident] = v.known_int()  # type: ignore[assignment]
        return env

    def _typedef(self, node) -> None:
        if node.type == "alias_declaration":
            name = node.child_by_field_name("name")
            ty = node.child_by_field_name("type")
            if name is not None and ty is not None and "*" not in _text(ty):
                self.typedefs[_text(name)] = norm_type(_text(ty))
            return
        ty = node.child_by_field_name("type")
        for d in node.children_by_field_name("declarator"):
            if d.type in ("type_identifier", "identifier") and ty is not None:
                self.typedefs[_text(d)] = norm_type(_text(ty))

    def resolve_type(self, ctype: str, extra: Mapping[str, str] | None = None) -> str:
        """Normalised type with typedefs (and ``extra`` template bindings) expanded."""
        t = norm_type(ctype)
        for _ in range(4):
            nxt = (extra or {}).get(t) or self.typedefs.get(t)
            if nxt is None or nxt == t:
                break
            t = nxt
        return t

    def instantiation_args(self, name: str) -> tuple:
        """Integer template arguments of the first explicit instantiation of ``name``."""
        for texts in self.instantiations.get(name, []):
            vals: list = []
            for t in texts:
                try:
                    vals.append(
                        eval_int_expr(
                            t.replace("true", "1").replace("false", "0"), self._int_env(t, 0)
                        )
                    )
                except (ValueError, SyntaxError, ZeroDivisionError):
                    rt = self.resolve_type(t)
                    vals.append(rt if type_bytes(rt) else None)
            return tuple(vals)
        return ()

    def touches_memory(self, fn: FuncInfo) -> bool:
        """Whether a (device) function subscripts or dereferences anything."""
        hit = self._memory_fns.get(fn.name)
        if hit is None:
            hit = False
            if fn.body is not None:
                for n in _iter_nodes(fn.body):
                    if (
                        n.type == "subscript_expression"
                        or (
                            n.type == "pointer_expression"
                            and n.children
                            and n.children[0].type == "*"
                        )
                        or (
                            n.type == "call_expression"
                            and _ATOMIC_RE.match(
                                _text(n.child_by_field_name("function")).split("::")[-1]
                            )
                        )
                    ):
                        hit = True
                        break
            self._memory_fns[fn.name] = hit
        return hit

    @property
    def kernels(self) -> list[FuncInfo]:
        """The ``__global__`` function definitions, in source order."""
        return [f for f in self.functions if f.is_kernel and f.body is not None]


@lru_cache(maxsize=512)
def _parse_expression(text: str):
    """Parse a macro expansion as an expression; returns its node (or ``None``)."""
    tree = parse(f"void __cudaperf_macro(void) {{ __cudaperf_x = ({text}); }}")
    for node in _iter_nodes(tree.root_node):
        if node.type == "assignment_expression":
            right = node.child_by_field_name("right")
            return _strip_parens(right) if right is not None else None
    return None


def _iter_nodes(root) -> Iterable:
    stack = [root]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(n.children))


def expand_macro(params: list[str], body: str, args: list[str]) -> str:
    """Substitute macro arguments (parenthesised) for parameters in ``body``."""
    mapping = dict(zip(params, args))
    return re.sub(
        r"[A-Za-z_]\w*",
        lambda m: f"({mapping[m.group(0)]})" if m.group(0) in mapping else m.group(0),
        body,
    )


# ---------------------------------------------------------------------------------------
# Thread environment
# ---------------------------------------------------------------------------------------


class ThreadEnv:
    """One representative thread block: per-thread ``threadIdx`` vectors, padded to warps."""

    def __init__(
        self,
        block: tuple[int, int, int],
        block_idx=(DEFAULT_BLOCK_IDX,) * 3,
        grid: tuple[int, int, int] | None = None,
        *,
        block_assumed: bool = False,
        block_idx_exact: bool = False,
    ):
        bx, by, bz = (max(1, int(v)) for v in block)
        self.block = (bx, by, bz)
        self.threads = bx * by * bz
        self.nwarps = max(1, -(-self.threads // 32))
        self.padded = self.nwarps * 32
        t = np.arange(self.padded, dtype=np.int64)
        self.valid = t < self.threads
        self.tx = t % bx
        self.ty = (t // bx) % by
        self.tz = t // (bx * by)
        self.row = t // bx  # threads sharing threadIdx.y/z (a row of the block)
        self.block_idx = tuple(int(v) for v in block_idx)
        self.grid = grid
        self.block_assumed = block_assumed
        # blockIdx is a representative value (sym) unless a specific block is studied
        self.block_idx_exact = block_idx_exact

    def full_mask(self) -> np.ndarray:
        """All valid threads of the block active."""
        return self.valid.copy()

    def empty_mask(self) -> np.ndarray:
        """No thread active."""
        return np.zeros(self.padded, dtype=bool)


# ---------------------------------------------------------------------------------------
# Findings
# ---------------------------------------------------------------------------------------


@dataclass
class Access:
    """One memory access site (aggregated over loop samples).

    Units: ``sectors``/``ideal_sectors`` are 32-byte sectors per warp request;
    ``wavefronts``/``ideal_wavefronts`` are shared-memory bank wavefronts per request;
    ``weight`` is ``8 ** loop_depth``; ``stride`` is in elements along ``threadIdx.x``.
    """

    array: str
    space: str
    kind: str  # load | store | atomic
    line: int
    text: str
    elem_bytes: int
    ctype: str
    depth: int
    weight: float
    stride: str  # symbolic stride along threadIdx.x ("1", "n", "data-dependent", ...)
    stride_elems: float | None
    pattern: str  # coalesced | broadcast | misaligned | strided | irregular | data-dependent
    sectors: float = 0.0
    ideal_sectors: float = 0.0
    wavefronts: float = 0.0
    ideal_wavefronts: float = 0.0
    active_lanes: float = 32.0
    executed: bool = True  # active in the representative sample

    @property
    def sector_ratio(self) -> float:
        """sectors / ideal sectors (>= 1)."""
        return self.sectors / self.ideal_sectors if self.ideal_sectors else 1.0

    @property
    def conflict_ways(self) -> float:
        """wavefronts / ideal wavefronts (>= 1)."""
        return self.wavefronts / self.ideal_wavefronts if self.ideal_wavefronts else 1.0


@dataclass
class Branch:
    """A branch (``if``/``switch``/loop condition) and its warp behaviour.

    ``kind`` of condition: ``uniform`` (same for all threads), ``warp-uniform``
    (thread-dependent, but whole warps agree), ``tail-only`` (a bounds check against a
    size: only the last block's warps can split), ``divergent`` (warps split),
    ``data-dependent`` (depends on loaded data: unknown, assumed partly divergent).
    ``split_fraction``: fraction of active warps that split; ``loss``: weighted lane-time
    lost inside the branch (``sum weight * (1 - efficiency)``).
    """

    line: int
    stmt: str
    cond: str
    kind: str
    split_fraction: float
    depth: int
    weight: float
    loss: float = 0.0


@dataclass
class Barrier:
    """A barrier or warp sync; ``hazard`` explains a thread-dependent placement."""

    line: int
    call: str
    scope: str  # block | warp | grid
    depth: int
    weight: float
    hazard: str | None = None
    severity: float = 0.0  # 1 = barrier inside a thread-dependent branch, 0.5 = after exit


@dataclass
class Atomic:
    """An atomic operation: space, loop depth, addresses distinct per warp."""

    line: int
    call: str
    space: str
    depth: int
    weight: float
    distinct_addresses: float = 32.0


@dataclass
class KernelFacts:
    """Everything the static walker found in one kernel."""

    name: str
    line: int
    params: list[ParamInfo]
    launch_bounds: tuple[int | None, int | None] | None
    block: tuple[int, int, int]
    block_assumed: bool
    uses_ty: bool = False
    uses_tz: bool = False
    shared_static_bytes: int = 0
    shared_arrays: list[ArrayInfo] = field(default_factory=list)
    uses_dynamic_shared: bool = False
    accesses: list[Access] = field(default_factory=list)
    branches: list[Branch] = field(default_factory=list)
    barriers: list[Barrier] = field(default_factory=list)
    atomics: list[Atomic] = field(default_factory=list)
    flops: dict[str, float] = field(default_factory=dict)  # dtype -> trip-weighted FLOP/thread
    global_bytes: float = 0.0  # trip-weighted requested global bytes / thread
    global_sector_bytes: float = 0.0  # trip-weighted DRAM sector bytes / thread
    fp64_promotions: list[int] = field(default_factory=list)  # lines
    simt_weight: float = 0.0
    simt_eff_weighted: float = 0.0
    idle_fraction: float | None = None
    idle_note: str = ""
    notes: list[str] = field(default_factory=list)
    error_lines: list[int] = field(default_factory=list)

    @property
    def simt_efficiency(self) -> float:
        """Estimated average active lanes per executed warp instruction / 32."""
        return self.simt_eff_weighted / self.simt_weight if self.simt_weight else 1.0


@dataclass
class Launch:
    """A ``kernel<<<grid, block, smem, stream>>>`` launch in host code."""

    kernel: str
    line: int
    function: str
    grid: tuple[int, int, int] | None
    block: tuple[int, int, int] | None
    smem: int | None
    grid_text: str
    block_text: str
    loop_depth: int
    template_args: tuple = ()
    args: tuple = ()  # compile-time-known argument values (None where unknown)


@dataclass
class HostFacts:
    """Launches and host synchronisations of the file."""

    launches: list[Launch] = field(default_factory=list)
    syncs: list[tuple[int, str, str, str, bool]] = field(default_factory=list)
    # (line, call, after_kernel, before_kernel, in_loop)


# ---------------------------------------------------------------------------------------
# Evaluation context of one function
# ---------------------------------------------------------------------------------------

_THREAD_BUILTINS = {"threadIdx", "blockIdx", "blockDim", "gridDim"}
_BARRIER_CALLS = {
    "__syncthreads": "block",
    "__syncthreads_count": "block",
    "__syncthreads_and": "block",
    "__syncthreads_or": "block",
    "__syncwarp": "warp",
}
_ATOMIC_RE = re.compile(r"^atomic(Add|Sub|Exch|Min|Max|Inc|Dec|CAS|And|Or|Xor)(_block|_system)?$")
_LOAD_INTRINSICS = {"__ldg", "__ldcg", "__ldca", "__ldcs", "__ldlu", "__ldcv"}
_STORE_INTRINSICS = {"__stcg", "__stcs", "__stwb", "__stwt"}
_HOST_SYNCS = {
    "cudaDeviceSynchronize",
    "cudaStreamSynchronize",
    "cudaEventSynchronize",
    "cudaThreadSynchronize",
    "cudaMemcpy",
    "cudaMemcpy2D",
    "cudaMemcpy3D",
    "cudaMemcpyToSymbol",
    "cudaMemcpyFromSymbol",
    "cudaFree",
    "cudaMalloc",
}
_MATH_2FLOP = {
    "fma",
    "fmaf",
    "__fmaf_rn",
    "__fmaf_rz",
    "__fmaf_ru",
    "__fmaf_rd",
    "__fma_rn",
    "__fma_rz",
    "__fma_ru",
    "__fma_rd",
    "__hfma",
}
_MATH_NAMES = {
    "sqrt",
    "rsqrt",
    "cbrt",
    "rcbrt",
    "exp",
    "exp2",
    "exp10",
    "expm1",
    "log",
    "log2",
    "log10",
    "log1p",
    "sin",
    "cos",
    "tan",
    "asin",
    "acos",
    "atan",
    "atan2",
    "sinh",
    "cosh",
    "tanh",
    "asinh",
    "acosh",
    "atanh",
    "pow",
    "fabs",
    "fmin",
    "fmax",
    "floor",
    "ceil",
    "round",
    "trunc",
    "rint",
    "fmod",
    "remainder",
    "erf",
    "erfc",
    "hypot",
    "copysign",
    "lgamma",
    "tgamma",
    "norm3d",
    "norm4d",
    "rhypot",
    "fdim",
    "ldexp",
    "sincos",
    "sincospi",
    "sinpi",
    "cospi",
    "__expf",
    "__logf",
    "__log2f",
    "__log10f",
    "__sinf",
    "__cosf",
    "__tanf",
    "__powf",
    "__exp10f",
    "__fdividef",
    "__frcp_rn",
    "__fsqrt_rn",
    "__frsqrt_rn",
    "__fmul_rn",
    "__fadd_rn",
    "__fsub_rn",
    "__fdiv_rn",
    "__dmul_rn",
    "__dadd_rn",
    "__dsub_rn",
    "__ddiv_rn",
    "__drcp_rn",
    "__dsqrt_rn",
    "__saturatef",
    "__hadd",
    "__hsub",
    "__hmul",
    "__hdiv",
    "hsqrt",
    "hexp",
    "hlog",
}
_NUMPY_MATH = {
    "sqrt": np.sqrt,
    "fabs": np.abs,
    "abs": np.abs,
    "floor": np.floor,
    "ceil": np.ceil,
    "exp": np.exp,
    "log": np.log,
    "log2": np.log2,
    "sin": np.sin,
    "cos": np.cos,
    "round": np.round,
    "trunc": np.trunc,
}


def _math_base(name: str) -> str | None:
    """Base name of a math function (``sqrtf`` -> ``sqrt``), or ``None``."""
    if name in _MATH_NAMES or name in _MATH_2FLOP:
        return name
    if name.endswith("f") and name[:-1] in _MATH_NAMES:
        return name[:-1]
    return None


@dataclass
class _Def:
    kind: str  # init | assign | compound | incdec
    op: str
    rhs: Any
    node: Any



def _in_loop_header(node) -> bool:
    """Whether ``node`` is (inside) the update clause of a ``for`` loop: it runs after the
    body, though it stands before it in the text."""
    parent = node.parent
    while parent is not None:
        if parent.type == "for_statement":
            update = parent.child_by_field_name("update")
            return update is not None and update.start_byte <= node.start_byte < update.end_byte
        if parent.type in ("compound_statement", "function_definition"):
            return False
        parent = parent.parent
    return False


class FuncCtx:
    """Definitions, types and arrays of one function, and its expression evaluator."""

    def __init__(
        self,
        sf: SourceFile,
        fn: FuncInfo,
        env: ThreadEnv,
        *,
        bindings: Mapping[str, Val] | None = None,
        ptr_bindings: Mapping[str, PtrRef] | None = None,
        template_bind: Mapping[str, int] | None = None,
        host: bool = False,
        depth: int = 0,
    ):
        self.sf = sf
        self.fn = fn
        self.env = env
        self.host = host
        self.depth = depth
        self.defs: dict[str, list[_Def]] = {}
        self.var_types: dict[str, str] = {}
        self.pointer_vars: set[str] = set()
        self.dim3_vars: dict[str, Any] = {}
        self.arrays: dict[str, ArrayInfo] = {}
        self.alias_nodes: dict[str, Any] = {}
        self.bindings = dict(bindings or {})
        self.ptr_bindings = dict(ptr_bindings or {})
        self.template_bind = {
            k: v for k, v in (template_bind or {}).items() if not isinstance(v, str)
        }
        self.type_bind = {k: v for k, v in (template_bind or {}).items() if isinstance(v, str)}
        self.overrides: dict[str, Val] = {}
        self.stmt_pos = 1 << 60  # byte position of the statement being walked
        self.foreign = 0  # > 0 while evaluating a macro expansion (another tree)
        self._version = 0
        self._memo: dict[tuple[str, int, int], Val] = {}
        self._ptr_memo: dict[tuple[str, int], PtrRef | None] = {}
        self._resolving: set[str] = set()
        self.uses_ty = False
        self.uses_tz = False
        self.assumed: set[str] = set()
        self.device_calls: set[str] = set()
        self.asm = False
        self.lambdas = False
        self.type_cache: dict[int, str | None] = {}
        self.params = {p.name: replace(p, ctype=self.tmap(p.ctype)) for p in fn.params}
        for p in self.params.values():
            if p.pointer and p.name not in self.ptr_bindings:
                space = "global"
                self.arrays[p.name] = ArrayInfo(
                    p.name,
                    space,
                    p.ctype,
                    type_bytes(p.ctype) or 4,
                    tuple(self._dim_values(p.dims)),
                )
            self.var_types[p.name] = p.ctype
        self.shared_arrays: list[ArrayInfo] = []
        self.shared_static_bytes = 0
        self.uses_dynamic_shared = False
        if fn.body is not None:
            self._collect(fn.body)

    def tmap(self, text: str) -> str:
        """Normalised type with typedefs and template type arguments expanded."""
        return self.sf.resolve_type(text, self.type_bind)

    # -- collection ---------------------------------------------------------------------
    def _dim_values(self, dims) -> list[int | None]:
        out: list[int | None] = []
        for d in dims:
            if d is None:
                out.append(None)
                continue
            v = self.eval(d)
            s = v.scalar()
            out.append(int(s) if s is not None else None)
        return out

    def _collect(self, body) -> None:
        stack = [body]
        while stack:
            node = stack.pop()
            t = node.type
            if t == "declaration":
                self._declaration(node)
            elif t == "assignment_expression":
                left = _strip_parens(node.child_by_field_name("left"))
                if left is not None and left.type == "identifier":
                    op = _text(node.child_by_field_name("operator"))
                    kind = "assign" if op == "=" else "compound"
                    self.defs.setdefault(_text(left), []).append(
                        _Def(kind, op, node.child_by_field_name("right"), node)
                    )
            elif t == "update_expression":
                arg = _strip_parens(node.child_by_field_name("argument"))
                if arg is not None and arg.type == "identifier":
                    op = "++" if "++" in _text(node) else "--"
                    self.defs.setdefault(_text(arg), []).append(_Def("incdec", op, None, node))
            elif t == "field_expression":
                arg = node.child_by_field_name("argument")
                fld = node.child_by_field_name("field")
                if arg is not None and _text(arg) == "threadIdx" and fld is not None:
                    f = _text(fld)
                    self.uses_ty |= f == "y"
                    self.uses_tz |= f == "z"
            elif t == "lambda_expression":
                self.lambdas = True
                continue
            elif t == "gnu_asm_expression" or t == "asm_statement":
                self.asm = True
            stack.extend(reversed(node.named_children))

    def _declaration(self, node) -> None:
        tnode = node.child_by_field_name("type")
        raw_type = _text(tnode) if tnode is not None else "int"
        ctype = self.tmap(raw_type)
        quals = " ".join(
            _text(c)
            for c in node.children
            if c.type in ("type_qualifier", "storage_class_specifier")
        )
        shared = "__shared__" in quals
        extern = "extern" in quals
        for c in node.children_by_field_name("declarator"):
            value = None
            decl = c
            if c.type == "init_declarator":
                decl = c.child_by_field_name("declarator")
                value = c.child_by_field_name("value")
            if decl is not None and decl.type == "function_declarator" and ctype == "dim3":
                # most vexing parse: dim3 block(TILE, ROWS) reads as a declaration
                name = _text(decl.child_by_field_name("declarator"))
                plist = decl.child_by_field_name("parameters")
                texts = [_text(q) for q in plist.named_children] if plist is not None else []
                self.var_types[name] = ctype
                self.dim3_vars[name] = (texts, c.start_byte)
                continue
            name, ptr, dims = _declarator_info(decl)
            if name is None:
                continue
            self.var_types[name] = ctype
            if ctype == "dim3":
                self.dim3_vars[name] = value
                continue
            if dims:
                dvals = self._dim_values(dims)
                elem = type_bytes(ctype) or 4
                space = "shared" if shared else "local"
                info = ArrayInfo(
                    name, space, ctype, elem, tuple(dvals[1:]), extern=extern, line=_line(c)
                )
                self.arrays[name] = info
                if shared:
                    self.shared_arrays.append(info)
                    if extern or dvals[0] is None:
                        self.uses_dynamic_shared = True
                    elif all(v is not None for v in dvals):
                        self.shared_static_bytes += elem * int(np.prod([int(v) for v in dvals]))
                continue
            if ptr:
                self.pointer_vars.add(name)
                if value is not None:
                    self.alias_nodes[name] = value
                continue
            if value is not None:
                if value.type == "initializer_list":
                    continue
                if value.type == "argument_list":  # int x(5);
                    args = value.named_children
                    if len(args) == 1:
                        value = args[0]
                    else:
                        continue
                self.defs.setdefault(name, []).append(_Def("init", "=", value, c))

    # -- overrides ------------------------------------------------------------------------
    def set_override(self, name: str, val: Val | None) -> None:
        """Pin (or release, with ``None``) the value of ``name`` (a loop sample)."""
        if val is None:
            self.overrides.pop(name, None)
        else:
            self.overrides[name] = val
        self._version += 1

    # -- identifiers -----------------------------------------------------------------------
    def ident(self, name: str, pos: int | None = None) -> Val:
        """Value of identifier ``name`` used at byte ``pos`` (reaching definition)."""
        if name in self.overrides:
            return self.overrides[name]
        if name in self.bindings:
            return self.bindings[name]
        if name in self.defs:
            return self._resolve(name, self.stmt_pos if pos is None or self.foreign else pos)
        if name in self.template_bind:
            return Val.const(self.template_bind[name])
        if name in self.sf.sizes:
            return Val(int(self.sf.sizes[name]), poly=Poly.sym(name))
        if name in self.params:
            p = self.params[name]
            if p.pointer:
                return Val(0, sym=True, poly=None)
            self.assumed.add(name)
            if scalar_kind(p.ctype):
                return Val(1.5, sym=True, poly=Poly.sym(name))
            return Val(DEFAULT_SIZE, sym=True, poly=Poly.sym(name))
        v = self.sf.define_value(name)
        if v is not None:
            return v
        if name in self.sf.file_arrays:
            return Val(0, sym=True, data=False)
        if name == "warpSize":
            return Val.const(32)
        if name in ("true", "false"):
            return Val.const(int(name == "true"))
        if name in self.fn.template_params:
            self.assumed.add(name)
            return Val(32, sym=True, poly=Poly.sym(name))
        self.assumed.add(name)
        return Val(DEFAULT_SIZE, sym=True, poly=Poly.sym(name))

    def _resolve(self, name: str, pos: int) -> Val:
        """Value of a local at ``pos``: the last plain definition before ``pos`` (the first
        one if none precedes it); compound updates (``+=``...) keep that first-iteration
        value but merge their thread/data dependence."""
        defs = self.defs[name]
        base_i = -1
        for i, d in enumerate(defs):
            if d.kind in ("init", "assign"):
                if d.node.start_byte < pos or base_i < 0:
                    base_i = i
                if d.node.start_byte >= pos:
                    break
        key = (name, base_i, self._version)
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        rkey = f"{name}#{base_i}"
        if rkey in self._resolving:
            # loop-carried self reference (x = x * 2): an unknown uniform value
            return Val(0, sym=True, poly=Poly.sym(name))
        self._resolving.add(rkey)
        try:
            base = defs[base_i] if base_i >= 0 else None
            if base is None:
                v = Val(0, sym=True, poly=Poly.sym(name))
            else:
                v = self.eval(base.rhs)
            # a compound update in straight-line code between that definition and ``pos``
            # (``i *= 32;`` before ``x[i]``) runs before the access: applied, in order
            base_at = base.node.end_byte if base is not None else -1
            applied: set[int] = set()
            for i, d in enumerate(defs):
                if d.kind != "compound" or not (base_at <= d.node.start_byte < pos) \
                        or _in_loop_header(d.node) or not d.op.endswith("=") or len(d.op) < 2:
                    continue
                if any(e.kind in ("init", "assign") and base_at <= e.node.start_byte < d.node.start_byte
                       for e in defs):
                    continue
                v = self._binop(d.op[:-1], v, self.eval(d.rhs), d.node)
                applied.add(i)
            tid, data, sym = v.tid, v.data, v.sym
            poly = v.poly
            num = v.num
            for i, d in enumerate(defs):
                if d.kind != "compound" or i in applied:
                    continue
                r = self.eval(d.rhs)
                if r.tid:
                    tid = True
                    if r.num is None:
                        num = None
                    if d.op in ("+=", "-=") and poly is not None and r.poly is not None:
                        poly = poly + r.poly if d.op == "+=" else poly - r.poly
                    else:
                        poly = None
                data |= r.data and r.tid
                sym = True
            if num is None and not tid and data:
                num = 0
            out = Val(num, tid=tid, data=data and tid, sym=sym or v.sym, poly=poly)
        finally:
            self._resolving.discard(rkey)
        self._memo[key] = out
        return out

    # -- evaluation ------------------------------------------------------------------------
    def eval(self, node) -> Val:  # noqa: C901 - a dispatcher
        """Evaluate an expression node to a :class:`Val`."""
        if node is None:
            return Val(0, sym=True)
        t = node.type
        if t == "number_literal":
            return _number(_text(node))
        if t == "identifier":
            return self.ident(_text(node), node.start_byte)
        if t == "parenthesized_expression":
            inner = node.named_children
            return self.eval(inner[-1]) if inner else Val(0, sym=True)
        if t == "field_expression":
            return self._field(node)
        if t == "binary_expression":
            op = _text(node.child_by_field_name("operator"))
            a = self.eval(node.child_by_field_name("left"))
            b = self.eval(node.child_by_field_name("right"))
            return self._binop(op, a, b, node)
        if t == "unary_expression":
            op = _text(node.child_by_field_name("operator"))
            a = self.eval(node.child_by_field_name("argument"))
            if a.num is None:
                return Val(None, a.tid, a.data, a.sym)
            with np.errstate(all="ignore"):
                if op == "-":
                    return Val(-a.num, a.tid, a.data, a.sym, -a.poly if a.poly else None)
                if op == "+":
                    return a
                if op == "!":
                    r = np.logical_not(a.num)
                    return Val(
                        r.astype(np.int64) if isinstance(r, np.ndarray) else int(r),
                        a.tid,
                        a.data,
                        a.sym,
                    )
                if op == "~":
                    return Val(
                        np.invert(np.asarray(_as_int(a.num), dtype=np.int64))
                        if a.tid
                        else ~int(_as_int(a.num)),
                        a.tid,
                        a.data,
                        a.sym,
                    )
            return Val(a.num, a.tid, a.data, a.sym)
        if t == "conditional_expression":
            c = self.eval(node.child_by_field_name("condition"))
            x = self.eval(node.child_by_field_name("consequence"))
            y = self.eval(node.child_by_field_name("alternative"))
            tid = c.tid or x.tid or y.tid
            data = c.data or x.data or y.data
            sym = c.sym or x.sym or y.sym
            if c.num is None or x.num is None or y.num is None:
                return Val(None if tid else 0, tid, data, sym)
            num = np.where(np.asarray(c.num) != 0, x.num, y.num)
            if num.ndim == 0:
                num = num.item()
            poly = None
            if not tid:
                poly = Poly.sym(_short(_text(node), 40))
            elif c.known_int() is not None:
                poly = x.poly if c.known_int() else y.poly
            return Val(num, tid, data, sym, poly)
        if t == "cast_expression":
            ty = node.child_by_field_name("type")
            v = self.eval(node.child_by_field_name("value"))
            return _cast(v, self.tmap(_text(ty)))
        if t == "call_expression":
            return self._call(node)
        if t == "subscript_expression":
            return self._load_value(node)
        if t == "pointer_expression":
            op = node.children[0].type if node.children else ""
            arg = node.child_by_field_name("argument")
            if op == "*":
                ref = self.resolve_ptr(arg)
                if ref is not None:
                    return Val(None if ref.offset.tid else 0, ref.offset.tid, True, True)
            return Val(0, sym=True)
        if t == "sizeof_expression":
            ty = node.child_by_field_name("type")
            if ty is not None:
                b = type_bytes(self.tmap(_text(ty)))
                if b:
                    return Val.const(b)
            val = node.child_by_field_name("value")
            if val is not None:
                ct = self.ctype(val)
                if ct and type_bytes(ct):
                    return Val.const(type_bytes(ct))  # type: ignore[arg-type]
            return Val(4, sym=True)
        if t == "char_literal":
            txt = _text(node).strip("'")
            return Val.const(ord(txt[-1]) if txt else 0)
        if t in ("true", "false"):
            return Val.const(int(t == "true"))
        if t in ("null", "nullptr"):
            return Val.const(0)
        if t == "assignment_expression":
            return self.eval(node.child_by_field_name("right"))
        if t == "update_expression":
            return self.eval(node.child_by_field_name("argument"))
        if t == "comma_expression":
            return self.eval(node.child_by_field_name("right"))
        if t in ("string_literal", "concatenated_string"):
            return Val(0)
        if t == "template_function" or t == "qualified_identifier":
            name = _text(node).split("::")[-1]
            return self.ident(name)
        return Val(None, tid=True, data=True, sym=True)

    def _field(self, node) -> Val:
        arg = node.child_by_field_name("argument")
        fld = _text(node.child_by_field_name("field"))
        base = _text(arg)
        env = self.env
        comp = {"x": 0, "y": 1, "z": 2}.get(fld)
        if base in _THREAD_BUILTINS and comp is not None and not self.host:
            name = f"{base}.{fld}"
            if base == "threadIdx":
                arr = (env.tx, env.ty, env.tz)[comp]
                if env.block[comp] == 1:
                    return Val.const(0)
                return Val(arr, tid=True, poly=Poly.sym(name))
            if base == "blockIdx":
                return Val(env.block_idx[comp], sym=not env.block_idx_exact, poly=Poly.sym(name))
            if base == "blockDim":
                return Val(env.block[comp], sym=env.block_assumed, poly=Poly.sym(name))
            if base == "gridDim":
                if env.grid is not None:
                    return Val(env.grid[comp], poly=Poly.sym(name))
                return Val(DEFAULT_GRID_DIM, sym=True, poly=Poly.sym(name))
        if (
            arg is not None
            and arg.type == "identifier"
            and base in self.dim3_vars
            and comp is not None
        ):
            d3 = self.dim3(arg)
            if d3 is not None:
                return d3[comp]
        v = self.eval(arg)
        if v.tid or v.data:
            return Val(None if v.tid else 0, v.tid, True, v.sym)
        return Val(
            v.num if v.num is not None else 0,
            False,
            v.data,
            True,
            Poly.sym(_short(_text(node), 40)),
        )

    def _binop(self, op: str, a: Val, b: Val, node) -> Val:
        tid, data, sym = a.tid or b.tid, a.data or b.data, a.sym or b.sym
        if a.num is None or b.num is None:
            return Val(None if tid else 0, tid, data or tid, sym)
        try:
            num = _num_binop(op, a.num, b.num)
        except (ValueError, TypeError, OverflowError):
            return Val(None if tid else 0, tid, True, sym)
        poly = None
        if a.poly is not None and b.poly is not None:
            try:
                if op == "+":
                    poly = a.poly + b.poly
                elif op == "-":
                    poly = a.poly - b.poly
                elif op == "*":
                    poly = a.poly * b.poly
                elif op == "<<" and b.known_int() is not None and 0 <= b.known_int() < 32:  # type: ignore[operator]
                    poly = a.poly.scale(Fraction(2 ** b.known_int()))  # type: ignore[operator]
            except OverflowError:
                poly = None
        if poly is None and not tid and op in ("+", "-", "*", "/", "%", "<<", ">>", "&", "|", "^"):
            poly = Poly.sym(_short(_text(node), 40))
        return Val(num, tid, data, sym, poly)

    def _call(self, node) -> Val:
        fn_node = node.child_by_field_name("function")
        args_node = node.child_by_field_name("arguments")
        args = args_node.named_children if args_node is not None else []
        name = _text(fn_node)
        if fn_node is not None and fn_node.type == "template_function":
            inner = fn_node.child_by_field_name("name")
            name = _text(inner)
            if name in ("static_cast", "reinterpret_cast", "const_cast") and args:
                targs = fn_node.child_by_field_name("arguments")
                return _cast(self.eval(args[0]), self.tmap(_text(targs).strip("<>")))
        name = name.split("::")[-1]
        vals = None
        if (
            name
            in (
                "min",
                "max",
                "umin",
                "umax",
                "imin",
                "imax",
                "fminf",
                "fmaxf",
                "fmin",
                "fmax",
                "llmin",
                "llmax",
                "ullmin",
                "ullmax",
            )
            and len(args) == 2
        ):
            vals = [self.eval(a) for a in args]
            a, b = vals
            tid, data, sym = a.tid or b.tid, a.data or b.data, a.sym or b.sym
            if a.num is None or b.num is None:
                return Val(None if tid else 0, tid, data or tid, sym)
            f = np.minimum if "min" in name else np.maximum
            num = f(a.num, b.num)
            if isinstance(num, np.ndarray) and num.ndim == 0:
                num = num.item()
            return Val(num, tid, data, sym, None if tid else Poly.sym(_short(_text(node), 40)))
        if name in ("__mul24", "__umul24") and len(args) == 2:
            return self._binop("*", self.eval(args[0]), self.eval(args[1]), node)
        if (
            name
            in (
                "abs",
                "fabs",
                "fabsf",
                "llabs",
                "sqrt",
                "sqrtf",
                "floor",
                "floorf",
                "ceil",
                "ceilf",
                "exp",
                "expf",
                "log",
                "logf",
                "sin",
                "sinf",
                "cos",
                "cosf",
                "round",
                "roundf",
                "trunc",
                "truncf",
                "log2",
                "log2f",
            )
            and len(args) == 1
        ):
            a = self.eval(args[0])
            if a.num is None:
                return Val(None if a.tid else 0, a.tid, a.data or a.tid, a.sym)
            base = name.rstrip("f") if name not in ("abs",) else "abs"
            f = _NUMPY_MATH.get(base, np.abs)
            with np.errstate(all="ignore"):
                num = f(np.asarray(a.num, dtype=np.float64) if base != "abs" else a.num)
            if isinstance(num, np.ndarray) and num.ndim == 0:
                num = num.item()
            return Val(num, a.tid, a.data, a.sym)
        if name in _LOAD_INTRINSICS and args:
            ref = self.resolve_ptr(args[0])
            tid = ref.offset.tid if ref is not None else True
            return Val(None if tid else 0, tid, True, True)
        if name == "dim3":
            return self.eval(args[0]) if args else Val.const(1)
        if name in self.sf.macro_fns:
            params, body = self.sf.macro_fns[name]
            expanded = expand_macro(params, body, [_text(a) for a in args])
            enode = _parse_expression(expanded)
            if enode is not None and self.foreign < 8:
                self.foreign += 1
                try:
                    return self.eval(enode)
                finally:
                    self.foreign -= 1
        fi = self.sf.functions_by_name.get(name)
        if fi is not None and fi.body is not None and not fi.is_kernel and self.depth < 4:
            ret = _single_return(fi.body)
            if ret is not None:
                vals = [self.eval(a) for a in args]
                binds = {p.name: v for p, v in zip(fi.params, vals) if not p.pointer}
                pbinds: dict[str, PtrRef] = {}
                for p, a in zip(fi.params, args):
                    if p.pointer:
                        r = self.resolve_ptr(a)
                        if r is not None:
                            pbinds[p.name] = r
                sub = FuncCtx(
                    self.sf,
                    fi,
                    self.env,
                    bindings=binds,
                    ptr_bindings=pbinds,
                    template_bind=self.template_bind,
                    host=self.host,
                    depth=self.depth + 1,
                )
                v = sub.eval(ret)
                self.assumed |= sub.assumed
                return v
        if fi is not None and not fi.is_kernel and self.sf.touches_memory(fi):
            self.device_calls.add(name)
        vals = vals or [self.eval(a) for a in args]
        tid = any(v.tid for v in vals) or name.startswith("__shfl") or name.startswith("__ballot")
        sym = any(v.sym for v in vals)
        return Val(None if tid else 0, tid, True, sym or True)

    def _load_value(self, node) -> Val:
        acc = self.subscript_target(node)
        if acc is None:
            idx = [self.eval(i) for i in _subscript_indices(node)]
            tid = any(v.tid for v in idx)
            return Val(None if tid else 0, tid, True, True)
        ref, offset = acc
        tid = offset.tid
        if ref.array.space == "local":
            # register/local array: value unknown, thread-dependent if the array is filled
            # per thread (assume so)
            return Val(None, True, True, True)
        return Val(None if tid else 0, tid, True, True)

    # -- pointers ------------------------------------------------------------------------
    def resolve_ptr(self, node) -> PtrRef | None:
        """Resolve a pointer-valued expression to (array, byte offset, element type)."""
        node = _strip_parens(node)
        if node is None:
            return None
        t = node.type
        if t == "identifier":
            name = _text(node)
            if name in self.ptr_bindings:
                return self.ptr_bindings[name]
            if name in self.arrays:
                a = self.arrays[name]
                return PtrRef(a, Val.const(0), a.ctype, a.elem_bytes, a.dims)
            if name in self.alias_nodes:
                key = (name, self._version)
                if key in self._ptr_memo:
                    return self._ptr_memo[key]
                if name in self._resolving:
                    return None
                self._resolving.add(name)
                try:
                    r = self.resolve_ptr(self.alias_nodes[name])
                    if r is not None:
                        ct = self.var_types.get(name)
                        if ct and ct != r.ctype and type_bytes(ct):
                            r = PtrRef(r.array, r.offset, ct, type_bytes(ct), ())  # type: ignore[arg-type]
                        # pointer bumped later (p += stride): keep first value, merge flags
                        for d in self.defs.get(name, []):
                            if d.kind == "compound" and d.rhs is not None:
                                rv = self.eval(d.rhs)
                                if rv.tid:
                                    r = PtrRef(
                                        r.array,
                                        Val(
                                            r.offset.num, True, r.offset.data or rv.data, True, None
                                        ),
                                        r.ctype,
                                        r.elem_bytes,
                                        r.dims,
                                    )
                finally:
                    self._resolving.discard(name)
                self._ptr_memo[key] = r
                return r
            if name in self.sf.file_arrays:
                a = self.sf.file_arrays[name]
                return PtrRef(a, Val.const(0), a.ctype, a.elem_bytes, a.dims)
            return None
        if t == "cast_expression":
            ty = _text(node.child_by_field_name("type"))
            inner = self.resolve_ptr(node.child_by_field_name("value"))
            return _retype(inner, self.tmap(ty))
        if t == "call_expression":
            fn_node = node.child_by_field_name("function")
            args_node = node.child_by_field_name("arguments")
            args = args_node.named_children if args_node is not None else []
            if fn_node is not None and fn_node.type == "template_function" and args:
                nm = _text(fn_node.child_by_field_name("name"))
                if nm in ("reinterpret_cast", "static_cast", "const_cast"):
                    ty = _text(fn_node.child_by_field_name("arguments")).strip("<>")
                    return _retype(self.resolve_ptr(args[0]), self.tmap(ty))
            # SharedMemory<T>()-style helper returning the extern shared buffer
            fname = _text(
                fn_node.child_by_field_name("name")
                if fn_node is not None and fn_node.type == "template_function"
                else fn_node
            )
            if fname.split("::")[-1] in self.sf.shared_structs:
                key = "__extern_shared__"
                arr = self.arrays.get(key)
                if arr is None:
                    arr = ArrayInfo(key, "shared", "int", 4, (), extern=True)
                    self.arrays[key] = arr
                    self.uses_dynamic_shared = True
                return PtrRef(arr, Val.const(0), "int", 4, ())
            return None
        if t == "binary_expression":
            op = _text(node.child_by_field_name("operator"))
            if op not in ("+", "-"):
                return None
            left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
            lp = self.resolve_ptr(left)
            if lp is not None:
                off = self.eval(right)
            elif op == "+":
                lp = self.resolve_ptr(right)
                if lp is None:
                    return None
                off = self.eval(left)
            else:
                return None
            scaled = self._binop("*", off, Val.const(lp.elem_bytes), node)
            new = self._binop(op, lp.offset, scaled, node)
            return PtrRef(lp.array, new, lp.ctype, lp.elem_bytes, ())
        if t == "pointer_expression":
            op = node.children[0].type if node.children else ""
            arg = node.child_by_field_name("argument")
            if op == "&" and arg is not None:
                arg = _strip_parens(arg)
                if arg.type == "subscript_expression":
                    tgt = self.subscript_target(arg)
                    if tgt is not None:
                        ref, off = tgt
                        return PtrRef(ref.array, off, ref.ctype, ref.elem_bytes, ())
                return self.resolve_ptr(arg)
            return None
        if t == "conditional_expression":
            a = self.resolve_ptr(node.child_by_field_name("consequence"))
            return a
        return None

    def subscript_target(self, node) -> tuple[PtrRef, Val] | None:
        """(pointer, byte offset) of ``base[i][j]...``; ``None`` if the base is unknown."""
        chain = []
        cur = node
        while cur is not None and cur.type == "subscript_expression":
            chain.append(cur)
            cur = _strip_parens(cur.child_by_field_name("argument"))
        ref = self.resolve_ptr(cur)
        if ref is None:
            return None
        indices = []
        for sub in reversed(chain):
            indices.extend(_subscript_indices(sub))
        dims = list(ref.dims)
        lin: Val | None = None
        for k, ix in enumerate(indices):
            v = self.eval(ix)
            if lin is None:
                lin = v
            else:
                dim = dims[k - 1] if k - 1 < len(dims) else None
                if dim is None:
                    # pointer-to-pointer or unknown extent: treat as data-dependent
                    lin = Val(None if (lin.tid or v.tid) else 0, lin.tid or v.tid, True, True)
                    continue
                lin = self._binop("+", self._binop("*", lin, Val.const(dim), ix), v, ix)
        # remaining (unsubscripted) dimensions multiply the element
        rest = 1
        for d in dims[len(indices) - 1 :] if indices else dims:
            rest *= d or 1
        if lin is None:
            lin = Val.const(0)
        step = ref.elem_bytes * (rest if len(indices) <= len(dims) else 1)
        off = self._binop("+", ref.offset, self._binop("*", lin, Val.const(step), node), node)
        # keep the element-index polynomial for stride printing
        off.poly = lin.poly
        return ref, off

    # -- dim3 ------------------------------------------------------------------------------
    def dim3(self, node) -> tuple[Val, Val, Val] | None:
        """Components of a dim3-valued expression (``dim3(a,b)``, ``{a,b}``, a local)."""
        node = _strip_parens(node)
        if node is None:
            return None
        one = Val.const(1)
        t = node.type
        if t == "call_expression":
            fn = _text(node.child_by_field_name("function"))
            if fn == "dim3":
                args = node.child_by_field_name("arguments").named_children
                vals = [self.eval(a) for a in args][:3]
                return tuple(vals + [one] * (3 - len(vals)))  # type: ignore[return-value]
        if t in ("initializer_list", "argument_list"):
            vals = [self.eval(a) for a in node.named_children][:3]
            return tuple(vals + [one] * (3 - len(vals)))  # type: ignore[return-value]
        if t == "compound_literal_expression":
            val = node.child_by_field_name("value")
            return self.dim3(val)
        if t == "identifier" and _text(node) in self.dim3_vars:
            init = self.dim3_vars[_text(node)]
            if init is None:
                return None
            if isinstance(init, tuple):  # (argument texts, position)
                texts, pos = init
                vals = []
                self.foreign += 1
                saved, self.stmt_pos = self.stmt_pos, pos
                try:
                    for txt in texts[:3]:
                        enode = _parse_expression(txt)
                        vals.append(self.eval(enode) if enode is not None else Val(1, sym=True))
                finally:
                    self.foreign -= 1
                    self.stmt_pos = saved
                return tuple(vals + [one] * (3 - len(vals)))  # type: ignore[return-value]
            return self.dim3(init)
        v = self.eval(node)
        return (v, one, one)

    # -- types ----------------------------------------------------------------------------
    def ctype(self, node) -> str | None:
        """Static C type of an expression (``double``/``float``/``half``/``int``...)."""
        key = node.id
        if key in self.type_cache:
            return self.type_cache[key]
        r = self._ctype(node)
        self.type_cache[key] = r
        return r

    def _ctype(self, node) -> str | None:
        t = node.type
        if t == "number_literal":
            txt = _text(node).lower()
            if txt.startswith("0x"):
                return "int"
            if "." in txt or "e" in txt:
                return "float" if txt.endswith("f") else "double"
            return "int"
        if t == "identifier":
            name = _text(node)
            ct = self.var_types.get(name)
            if ct is not None:
                return ct
            v = self.sf.define_value(name)
            if v is not None and isinstance(v.num, float):
                text = self.sf.defines.get(name, "").lower()
                return "float" if text.rstrip(")").endswith("f") else "double"
            return "int"
        if t == "parenthesized_expression":
            inner = node.named_children
            return self.ctype(inner[-1]) if inner else None
        if t == "subscript_expression":
            tgt = None
            try:
                cur = node
                while cur is not None and cur.type == "subscript_expression":
                    cur = _strip_parens(cur.child_by_field_name("argument"))
                ref = self.resolve_ptr(cur)
                if ref is not None:
                    return ref.ctype
                tgt = self.var_types.get(_text(cur)) if cur is not None else None
            except Exception:  # pragma: no cover - defensive
                return None
            return tgt
        if t == "field_expression":
            arg = node.child_by_field_name("argument")
            if _text(arg) in _THREAD_BUILTINS:
                return "int"
            at = self.ctype(arg) if arg is not None else None
            if at is not None and norm_type(at) in VECTOR_COMPONENT:
                return VECTOR_COMPONENT[norm_type(at)]
            return None
        if t == "pointer_expression":
            op = node.children[0].type if node.children else ""
            if op == "*":
                ref = self.resolve_ptr(node.child_by_field_name("argument"))
                return ref.ctype if ref is not None else None
            return None
        if t == "cast_expression":
            return self.tmap(_text(node.child_by_field_name("type")))
        if t == "call_expression":
            fn_node = node.child_by_field_name("function")
            if fn_node is not None and fn_node.type == "template_function":
                nm = _text(fn_node.child_by_field_name("name"))
                if nm.endswith("_cast"):
                    return self.tmap(_text(fn_node.child_by_field_name("arguments")).strip("<>"))
            name = _text(fn_node).split("::")[-1]
            args_node = node.child_by_field_name("arguments")
            args = args_node.named_children if args_node is not None else []
            if name.startswith("__h") or name.startswith("h") and name in ("hsqrt", "hexp", "hlog"):
                return "half"
            if name.startswith("__f") or (name.endswith("f") and _math_base(name)):
                return "float"
            if name.startswith("__d"):
                return "double"
            base = _math_base(name)
            if base is not None or name in ("min", "max", "abs"):
                kinds = [self.ctype(a) for a in args]
                return _promote_types(kinds)
            if name in _LOAD_INTRINSICS and args:
                ref = self.resolve_ptr(args[0])
                return ref.ctype if ref is not None else None
            if name.startswith("__shfl") and len(args) >= 2:
                return self.ctype(args[1])
            if _ATOMIC_RE.match(name) and len(args) >= 2:
                return self.ctype(args[1])
            fi = self.sf.functions_by_name.get(name)
            if fi is not None:
                return fi.return_type or None
            return None
        if t == "binary_expression":
            op = _text(node.child_by_field_name("operator"))
            if op in ("<", "<=", ">", ">=", "==", "!=", "&&", "||"):
                return "int"
            return _promote_types(
                [
                    self.ctype(node.child_by_field_name("left")),
                    self.ctype(node.child_by_field_name("right")),
                ]
            )
        if t == "conditional_expression":
            return _promote_types(
                [
                    self.ctype(node.child_by_field_name("consequence")),
                    self.ctype(node.child_by_field_name("alternative")),
                ]
            )
        if t in ("unary_expression", "update_expression"):
            arg = node.child_by_field_name("argument")
            return self.ctype(arg) if arg is not None else None
        if t == "assignment_expression":
            return self.ctype(node.child_by_field_name("left"))
        return None


def _promote_types(kinds: list[str | None]) -> str | None:
    best: str | None = None
    rank = -1
    for k in kinds:
        sk = scalar_kind(k)
        r = _TYPE_RANK.get(sk, 0) if sk else 0
        if k is not None and r > rank:
            best, rank = k, r
    return best


def _number(text: str) -> Val:
    t = text.lower().replace("'", "")
    try:
        if t.startswith("0x"):
            return Val.const(int(t.rstrip("ul"), 16))
        if t.startswith("0b"):
            return Val.const(int(t[2:].rstrip("ul"), 2))
        if any(ch in t for ch in ".e") and not t.startswith("0x"):
            return Val(float(t.rstrip("fl")))
        s = t.rstrip("ul")
        if len(s) > 1 and s.startswith("0") and s.isdigit():
            return Val.const(int(s, 8))
        return Val.const(int(s))
    except ValueError:
        return Val(0, sym=True)


def _cast(v: Val, type_text: str) -> Val:
    t = norm_type(type_text)
    if v.num is None:
        return v
    if t in FLOAT_DTYPE:
        num = v.num.astype(np.float64) if isinstance(v.num, np.ndarray) else float(v.num)
        return Val(num, v.tid, v.data, v.sym, v.poly)
    if t in TYPE_BYTES:
        return Val(_as_int(v.num), v.tid, v.data, v.sym, v.poly)
    return v


def _retype(ref: PtrRef | None, type_text: str) -> PtrRef | None:
    if ref is None:
        return None
    t = norm_type(type_text)
    b = type_bytes(t)
    if b is None:
        return ref
    return PtrRef(ref.array, ref.offset, t, b, ())


def _subscript_indices(node) -> list:
    idx = node.child_by_field_name("indices")
    if idx is None:
        idx = node.child_by_field_name("index")
        return [idx] if idx is not None else []
    return list(idx.named_children)


def _single_return(body):
    """The return expression of a function whose body is ``{ [decls;] return expr; }``."""
    stmts = [c for c in body.named_children if c.type != "comment"]
    if not stmts or stmts[-1].type != "return_statement":
        return None
    if any(s.type not in ("declaration", "return_statement") for s in stmts):
        return None
    expr = [c for c in stmts[-1].named_children]
    return expr[0] if expr else None


def _tx_coeff_str(poly: Poly | None) -> str | None:
    if poly is None:
        return None
    c = poly.coefficient_of("threadIdx.x")
    return str(c) if c is not None else None


# ---------------------------------------------------------------------------------------
# Per-warp memory statistics
# ---------------------------------------------------------------------------------------


def _fill_inactive(a: np.ndarray, m: np.ndarray) -> np.ndarray:
    first = a[np.arange(a.shape[0]), m.argmax(1)]
    return np.where(m, a, first[:, None])


def _unique_per_row(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    s = np.sort(a, axis=1)
    first = np.ones_like(s, dtype=bool)
    first[:, 1:] = s[:, 1:] != s[:, :-1]
    return s, first


def sector_stats(
    addr: np.ndarray, size: int, mask: np.ndarray, group: np.ndarray | None = None
) -> tuple[float, float, float] | None:
    """Mean 32-byte sectors per warp request, the ideal sectors, and active lanes, over the
    warps with an active lane (``addr`` in bytes, one per thread of the padded block).

    The ideal is ``ceil(distinct bytes / 32)``.  When a warp spans several rows of the
    block (``blockDim.x < 32``; ``group`` = row id per thread), rows are packed separately:
    the ideal is the sum over rows of ``ceil(distinct bytes of the row / 32)``, capped by
    the actual count (rows reading the same addresses share sectors) and never below the
    packed ideal.  So ``A[row * n + k]`` in a 16x16 block (two rows, one element each) is
    ideal at 2 sectors, and only the dependence on ``threadIdx.x`` is judged.
    """
    nw = addr.size // 32
    a = addr.reshape(nw, 32)
    m = mask.reshape(nw, 32)
    act = m.any(1)
    if not act.any():
        return None
    a, m = a[act], m[act]
    a = _fill_inactive(a, m)
    firsts = a // 32
    lasts = (a + size - 1) // 32
    both = np.concatenate([firsts, lasts], axis=1)
    _, fs = _unique_per_row(both)
    sectors = fs.sum(1).astype(np.float64)
    if size > 64:
        sectors += (size // 32 - 1) * 32
    _, fe = _unique_per_row(a)
    ideal = np.ceil(fe.sum(1) * size / 32.0)
    if group is not None:
        g = group.reshape(nw, 32)[act]
        g = g - g[:, :1]
        if g.max() > 0:
            lo = a.min()
            key = g * (int(a.max() - lo) + 1) + (a - lo)
            key = np.where(m, key, key[np.arange(key.shape[0]), m.argmax(1)][:, None])
            sk, first = _unique_per_row(key)
            span = int(a.max() - lo) + 1
            gid = sk // span
            counts = np.zeros((a.shape[0], 33), dtype=np.int64)
            rows = np.broadcast_to(np.arange(a.shape[0])[:, None], sk.shape)
            np.add.at(counts, (rows[first], np.minimum(gid[first], 32)), 1)
            per_row = np.ceil(counts * size / 32.0).sum(1)
            ideal = np.maximum(ideal, np.minimum(per_row, sectors))
    return float(sectors.mean()), float(ideal.mean()), float(m.sum(1).mean())


def bank_stats(addr: np.ndarray, size: int, mask: np.ndarray) -> tuple[float, float] | None:
    """Mean shared-memory wavefronts per warp request and the ideal (``addr`` in bytes).

    32 banks of 4-byte words; a wider element occupies consecutive words; threads reading
    the same word are served together (broadcast).  Wavefronts = the largest number of
    distinct words mapped to one bank; ideal = distinct words / 32 rounded up.
    """
    nw = addr.size // 32
    a = addr.reshape(nw, 32)
    m = mask.reshape(nw, 32)
    act = m.any(1)
    if not act.any():
        return None
    a, m = a[act], m[act]
    a = _fill_inactive(a, m)
    k = max(1, size // 4)
    words = (a // 4)[:, :, None] + np.arange(k)[None, None, :]
    words = words.reshape(a.shape[0], 32 * k)
    s, first = _unique_per_row(words)
    banks = s % 32
    counts = np.zeros((a.shape[0], 32), dtype=np.int64)
    rows = np.broadcast_to(np.arange(a.shape[0])[:, None], s.shape)
    np.add.at(counts, (rows[first], banks[first]), 1)
    wave = counts.max(1).astype(np.float64)
    ideal = np.ceil(first.sum(1) / 32.0)
    return float(wave.mean()), float(ideal.mean())


# ---------------------------------------------------------------------------------------
# The kernel walker
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _WCtx:
    depth: int = 0
    w: float = 1.0  # LOOP_WEIGHT ** depth
    trip: float = 1.0  # product of trip estimates
    sw: float = 1.0  # sample weight (1 / product of sample counts)
    eff: float = 1.0  # product of data-dependent branch efficiency factors
    guards: tuple = ()  # (line, text) of enclosing thread-dependent conditions
    budget: int = SAMPLE_BUDGET


class _AccAgg:
    __slots__ = (
        "info",
        "w",
        "sectors",
        "ideal",
        "wave",
        "iwave",
        "lanes",
        "executed",
        "stride",
        "stride_elems",
        "pattern_votes",
    )

    def __init__(self, info: dict):
        self.info = info
        self.w = 0.0
        self.sectors = 0.0
        self.ideal = 0.0
        self.wave = 0.0
        self.iwave = 0.0
        self.lanes = 0.0
        self.executed = False
        self.stride = ""
        self.stride_elems: float | None = None
        self.pattern_votes: dict[str, float] = {}


class KernelWalker:
    """Walks one kernel body; fills a :class:`KernelFacts`."""

    def __init__(
        self,
        sf: SourceFile,
        fn: FuncInfo,
        env: ThreadEnv,
        *,
        template_bind: Mapping[str, int] | None = None,
        stats: bool = True,
        param_values: Mapping[str, int | float] | None = None,
    ):
        self.sf = sf
        self.fn = fn
        self.env = env
        self.stats = stats
        binds = {k: Val(v, poly=Poly.sym(k)) for k, v in (param_values or {}).items()}
        self.ctx = FuncCtx(sf, fn, env, template_bind=template_bind, bindings=binds)
        self.accs: dict[tuple[int, str], _AccAgg] = {}
        self.branches: list[Branch] = []
        self._branch_map: dict[int, Branch] = {}
        self.barriers: list[Barrier] = []
        self.atomics: list[Atomic] = []
        self.flops: dict[str, float] = {}
        self.global_bytes = 0.0
        self.sector_bytes = 0.0
        self.simt_w = 0.0
        self.simt_e = 0.0
        self.fp64_promotions: list[int] = []
        self.exits: list[tuple[int, int, str]] = []  # (byte, line, text) thread-dependent returns
        self.global_mask = env.empty_mask()
        self.guard_sym = False
        self.guard_sym_loop = False  # the thread-dependent bound is a loop's (grid-stride)
        self.errors: list[int] = []
        self.notes: list[str] = []
        self._counted_nodes: set[int] = set()
        self._warp_lanes = env.valid.reshape(-1, 32).sum(1).astype(np.float64)

    # -- entry ---------------------------------------------------------------------------
    def run(self) -> None:
        """Walk the kernel body with all threads of the block active."""
        mask = self.env.full_mask()
        self.walk(self.fn.body, mask, _WCtx())

    # -- statements -----------------------------------------------------------------------
    def walk(self, node, mask: np.ndarray, c: _WCtx) -> np.ndarray:  # noqa: C901
        """Walk a statement under ``mask``; returns the mask of threads that continue after it."""
        t = node.type
        if t == "compound_statement" or t in (
            "preproc_if",
            "preproc_ifdef",
            "preproc_else",
            "preproc_elif",
            "declaration_list",
        ):
            for ch in node.named_children:
                mask = self.walk(ch, mask, c)
            return mask
        if t == "if_statement":
            return self._if(node, mask, c)
        if t in ("for_statement", "for_range_loop", "while_statement", "do_statement"):
            return self._loop(node, mask, c)
        if t == "switch_statement":
            return self._switch(node, mask, c)
        if t == "return_statement":
            self._stmt(node, mask, c)
            if c.guards:
                g = c.guards[-1]
                self.exits.append((node.start_byte, _line(node), g[1]))
            return self.env.empty_mask()
        if t in ("expression_statement", "declaration"):
            self._stmt(node, mask, c)
            return mask
        if t in ("labeled_statement", "case_statement"):
            for ch in node.named_children:
                if ch.type.endswith("statement") or ch.type == "declaration":
                    mask = self.walk(ch, mask, c)
            return mask
        if t in (
            "break_statement",
            "continue_statement",
            "goto_statement",
            "comment",
            "preproc_call",
            "preproc_def",
            "preproc_include",
            "type_definition",
            "preproc_function_def",
        ):
            return mask
        if t == "ERROR":
            self.errors.append(_line(node))
            return mask
        if t == "asm_statement":
            self.ctx.asm = True
            return mask
        self._stmt(node, mask, c)
        return mask

    def _cond_node(self, node):
        cond = node.child_by_field_name("condition")
        if cond is not None and cond.type == "condition_clause":
            val = cond.child_by_field_name("value")
            if val is None:
                named = cond.named_children
                val = named[-1] if named else None
            cond = val
        if cond is not None and cond.type == "declaration":
            # if (int x = ...) : the value is the initializer
            for d in cond.children_by_field_name("declarator"):
                v = d.child_by_field_name("value")
                if v is not None:
                    return v
        return cond

    def _classify(
        self, cv: Val, cond_node, mask: np.ndarray
    ) -> tuple[str, float, np.ndarray | None]:
        """(kind, split fraction of active warps, boolean per-thread outcome or None)."""
        if not cv.tid:
            return "uniform", 0.0, None
        if cv.num is None:
            return "data-dependent", 1.0, None
        outcome = np.broadcast_to(np.asarray(cv.num) != 0, mask.shape)
        m = mask.reshape(-1, 32)
        o = outcome.reshape(-1, 32)
        act = m.any(1)
        if not act.any():
            return "warp-uniform", 0.0, outcome
        any_t = (o & m).any(1)
        any_f = (~o & m).any(1)
        split = (any_t & any_f & act).sum() / act.sum()
        if split > 0:
            return "divergent", float(split), outcome
        if _is_bounds_check(cond_node, self.ctx):
            return "tail-only", 0.0, outcome
        return "warp-uniform", 0.0, outcome

    def _if(self, node, mask: np.ndarray, c: _WCtx) -> np.ndarray:
        cond = self._cond_node(node)
        self._scan(cond, mask, c)
        cv = self.ctx.eval(cond) if cond is not None else Val(1)
        kind, split, outcome = self._classify(cv, cond, mask)
        cons = node.child_by_field_name("consequence")
        alt = node.child_by_field_name("alternative")
        if alt is not None and alt.type == "else_clause":
            named = alt.named_children
            alt = named[0] if named else None
        guards = c.guards
        if cv.tid:
            guards = guards + ((_line(node), _short(_text(cond), 50)),)
            if cv.sym:
                self.guard_sym = True
        c2 = replace(c, guards=guards)
        loss_before = self._loss()
        if outcome is not None:
            tmask = mask & outcome
            fmask = mask & ~outcome
        else:
            tmask = fmask = mask
            if kind == "data-dependent":
                c2 = replace(c2, eff=c2.eff * DATA_BRANCH_EFFICIENCY)
        # constant-false / constant-true uniform conditions prune dead code
        k = cv.known_int() if not cv.tid else None
        empty = self.env.empty_mask()
        if cons is None or k == 0:
            t_after = empty
        else:
            t_after = self.walk(cons, tmask, c2)
        if k is not None and k != 0:
            f_after = empty
        elif alt is not None:
            f_after = self.walk(alt, fmask, c2)
        else:
            f_after = fmask
        loss = self._loss() - loss_before
        self._branch(node, "if", cond, kind, split, c, loss)
        return t_after | f_after

    def _branch(
        self, node, stmt: str, cond, kind: str, split: float, c: _WCtx, loss: float
    ) -> None:
        """Record a branch, merging the visits of one node (loop samples)."""
        w = c.w * c.sw
        b = self._branch_map.get(node.id)
        if b is None:
            b = Branch(_line(node), stmt, _short(_text(cond), 60), kind, split, c.depth, w, loss)
            self._branch_map[node.id] = b
            self.branches.append(b)
            return
        tot = b.weight + w
        b.split_fraction = (b.split_fraction * b.weight + split * w) / tot if tot else split
        b.weight = tot
        b.loss += loss
        if _KIND_RANK[kind] > _KIND_RANK[b.kind]:
            b.kind = kind

    def _loss(self) -> float:
        return self.simt_w - self.simt_e

    def _loop(self, node, mask: np.ndarray, c: _WCtx) -> np.ndarray:
        t = node.type
        init = node.child_by_field_name("initializer") if t == "for_statement" else None
        update = node.child_by_field_name("update") if t == "for_statement" else None
        cond = self._cond_node(node) if t != "for_range_loop" else None
        body = node.child_by_field_name("body")
        if init is not None:
            self._scan(init, mask, c)
        var, samples, trips, known = (None, [None], None, False)
        if t == "for_statement":
            var, samples, trips, known = self._simulate(init, cond, update, c)
        trip_est = float(trips) if (known and trips is not None) else float(DEFAULT_TRIP)
        n_s = len(samples)
        c_body = replace(
            c,
            depth=c.depth + 1,
            w=c.w * LOOP_WEIGHT,
            trip=c.trip * trip_est,
            sw=c.sw / n_s,
            budget=max(1, c.budget // n_s),
        )
        loss_before = self._loss()
        kinds: list[tuple[str, float]] = []
        for s in samples:
            if var is not None and s is not None:
                self.ctx.set_override(var, Val(s, sym=not known))
            bmask = mask
            c_it = c_body
            if cond is not None:
                self._scan(cond, mask, c_body)
                cv = self.ctx.eval(cond)
                kind, split, outcome = self._classify(cv, cond, mask)
                kinds.append((kind, split))
                if cv.tid:
                    c_it = replace(
                        c_it, guards=c_it.guards + ((_line(node), _short(_text(cond), 50)),)
                    )
                    if cv.sym:
                        self.guard_sym = True
                        self.guard_sym_loop = True
                if outcome is not None:
                    bmask = mask & outcome
                elif kind == "data-dependent":
                    c_it = replace(c_it, eff=c_it.eff * DATA_BRANCH_EFFICIENCY)
            if body is not None:
                self.walk(body, bmask if bmask.any() else mask, c_it)
            if update is not None:
                self._scan(update, bmask, c_it)
        if var is not None:
            self.ctx.set_override(var, None)
        if cond is not None and kinds:
            kind = max(kinds, key=lambda k: (_KIND_RANK[k[0]], k[1]))[0]
            split = sum(k[1] for k in kinds) / len(kinds)
            self._branch(
                node, t.replace("_statement", ""), cond, kind, split, c, self._loss() - loss_before
            )
        return mask

    def _simulate(self, init, cond, update, c: _WCtx):
        """(var, sample values, trip count or None, trip known) of a counted for loop."""
        none = (None, [None], None, False)
        if init is None or cond is None or update is None:
            return none
        var, init_node = None, None
        if init.type == "declaration":
            decls = init.children_by_field_name("declarator")
            if len(decls) == 1 and decls[0].type == "init_declarator":
                var = _text(decls[0].child_by_field_name("declarator"))
                init_node = decls[0].child_by_field_name("value")
        elif init.type == "assignment_expression":
            left = init.child_by_field_name("left")
            if left is not None and left.type == "identifier":
                var = _text(left)
                init_node = init.child_by_field_name("right")
        if var is None or init_node is None:
            return none
        ctx = self.ctx
        iv = ctx.eval(init_node)
        if iv.tid or iv.num is None:
            return none
        start = iv.scalar()
        if start is None:
            return none
        # step
        step: float | None = None
        step_sym = False
        if update.type == "update_expression":
            step = 1 if "++" in _text(update) else -1
        elif update.type == "assignment_expression":
            op = _text(update.child_by_field_name("operator"))
            left = update.child_by_field_name("left")
            if _text(left) == var and op in ("+=", "-="):
                sv = ctx.eval(update.child_by_field_name("right"))
                if sv.tid or sv.scalar() is None:
                    return none
                step = sv.scalar() * (1 if op == "+=" else -1)  # type: ignore[operator]
                step_sym = sv.sym
        cond = _strip_parens(cond)
        bound_known = False
        values: list[float] = []
        trips: int | None = None
        if step is not None and step != 0 and cond.type == "binary_expression":
            op = _text(cond.child_by_field_name("operator"))
            left, right = cond.child_by_field_name("left"), cond.child_by_field_name("right")
            if _text(left) == var:
                bv = ctx.eval(right)
            elif _text(right) == var:
                bv = ctx.eval(left)
                op = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}.get(op, op)
            else:
                bv = None
            if (
                bv is not None
                and not bv.tid
                and bv.scalar() is not None
                and op in ("<", "<=", ">", ">=", "!=")
            ):
                b = float(bv.scalar())  # type: ignore[arg-type]
                span = {
                    "<": b - start,
                    "<=": b - start + (1 if step > 0 else -1),
                    ">": b - start,
                    ">=": b - start + (1 if step > 0 else -1),
                    "!=": b - start,
                }[op]
                n = math.ceil(span / step) if (span / step) > 0 else 0
                trips = int(n)
                bound_known = not bv.sym
        if trips is None:
            # simulate (multiplicative / shift updates)
            v = start
            seq = []
            saved = dict(ctx.overrides)
            try:
                for _ in range(MAX_SIMULATED_ITERATIONS + 1):
                    ctx.set_override(var, Val(v))
                    cv = ctx.eval(cond)
                    if cv.tid or cv.scalar() is None:
                        return none
                    if not cv.scalar():
                        break
                    seq.append(v)
                    if update.type == "update_expression":
                        v = v + (1 if "++" in _text(update) else -1)
                    elif update.type == "assignment_expression":
                        op = _text(update.child_by_field_name("operator"))
                        rv = ctx.eval(update.child_by_field_name("right"))
                        r = rv.scalar()
                        if r is None or rv.tid:
                            return none
                        if op == "=":
                            v = r
                        else:
                            v = _num_binop(op[:-1], v, r)
                        step_sym |= rv.sym
                    else:
                        return none
                else:
                    seq = seq[:MAX_SIMULATED_ITERATIONS]
                    trips = None
                    values = seq
                    return (var, _pick(values, min(MAX_SAMPLES_PER_LOOP, c.budget)), None, False)
            finally:
                ctx.overrides = saved
                ctx._version += 1
            trips = len(seq)
            values = seq
            bound_known = not _expr_sym(ctx, cond, var, values[0] if values else start)
            known = bound_known and not iv.sym and not step_sym
            return (
                var,
                _pick(values, min(MAX_SAMPLES_PER_LOOP, c.budget)) or [start],
                trips,
                known,
            )
        known = bound_known and not iv.sym and not step_sym
        s_count = min(MAX_SAMPLES_PER_LOOP, c.budget, max(trips, 1))
        if trips <= 0:
            return (var, [start], 0, known)
        ks = sorted(set(int(round(x)) for x in np.linspace(0, trips - 1, s_count)))
        values = [start + step * k for k in ks]
        values = [int(v) if float(v).is_integer() else v for v in values]
        return (var, values, trips, known)

    def _switch(self, node, mask: np.ndarray, c: _WCtx) -> np.ndarray:
        cond = self._cond_node(node)
        self._scan(cond, mask, c)
        cv = self.ctx.eval(cond) if cond is not None else Val(0)
        kind, split = "uniform", 0.0
        c2 = c
        if cv.tid:
            c2 = replace(c, guards=c.guards + ((_line(node), _short(_text(cond), 50)),))
            if cv.num is None:
                kind, split = "data-dependent", 1.0
                c2 = replace(c2, eff=c2.eff * DATA_BRANCH_EFFICIENCY)
            else:
                vals = np.broadcast_to(np.asarray(cv.num), mask.shape).reshape(-1, 32)
                m = mask.reshape(-1, 32)
                distinct = []
                for row, mr in zip(vals, m):
                    if mr.any():
                        distinct.append(len(np.unique(row[mr])))
                avg = float(np.mean(distinct)) if distinct else 1.0
                if avg > 1:
                    kind, split = "divergent", float(np.mean([d > 1 for d in distinct]))
                    c2 = replace(c2, eff=c2.eff / avg)
                else:
                    kind = "warp-uniform"
        before = self._loss()
        body = node.child_by_field_name("body")
        if body is not None:
            self.walk(body, mask, c2)
        self._branch(node, "switch", cond, kind, split, c, self._loss() - before)
        return mask

    # -- simple statements ----------------------------------------------------------------
    def _stmt(self, node, mask: np.ndarray, c: _WCtx) -> None:
        # SIMT efficiency: weight by the fraction of warps executing the statement
        m = mask.reshape(-1, 32)
        act = m.any(1)
        n_act = int(act.sum())
        if n_act:
            # lanes of a partial warp (block not a multiple of 32) are not divergence
            lanes = float(self._warp_lanes[act].sum())
            eff = float(m.sum()) / lanes * c.eff
            frac = n_act / self.env.nwarps
            w = c.w * c.sw * frac
            self.simt_w += w
            self.simt_e += w * eff
        self._scan(node, mask, c)

    def _scan(self, root, mask: np.ndarray, c: _WCtx, _depth: int = 0) -> None:  # noqa: C901
        if root is None:
            return
        ctx = self.ctx
        stack = [root]
        while stack:
            node = stack.pop()
            t = node.type
            if t == "subscript_expression":
                kinds = _access_kinds(node)
                if kinds:
                    tgt = ctx.subscript_target(node)
                    if tgt is not None:
                        for k in kinds:
                            self._record_access(node, tgt, k, mask, c)
                        stack.extend(_index_children(node))
                        continue
                stack.extend(reversed(node.named_children))
                continue
            if t == "pointer_expression":
                op = node.children[0].type if node.children else ""
                arg = node.child_by_field_name("argument")
                if op == "*":
                    kinds = _access_kinds(node)
                    ref = ctx.resolve_ptr(arg)
                    if ref is not None and kinds:
                        for k in kinds:
                            self._record_access(node, (ref, ref.offset), k, mask, c)
                elif op == "&" and arg is not None:
                    a = _strip_parens(arg)
                    if a.type == "subscript_expression":
                        stack.extend(_index_children(a))
                        continue
                if arg is not None:
                    stack.append(arg)
                continue
            if t == "call_expression":
                if self._call(node, mask, c, stack, _depth):
                    continue
                stack.extend(reversed(node.named_children))
                continue
            if t == "binary_expression":
                op = _text(node.child_by_field_name("operator"))
                if op in ("+", "-", "*", "/"):
                    self._flop(node, 1, c)
            elif t == "assignment_expression":
                op = _text(node.child_by_field_name("operator"))
                if op in ("+=", "-=", "*=", "/="):
                    self._flop(node, 1, c, node.child_by_field_name("left"))
            elif t == "update_expression":
                self._flop(node, 1, c, node.child_by_field_name("argument"))
            elif t == "identifier":
                name = _text(node)
                fa = self.sf.file_arrays.get(name)
                if fa is not None and fa.scalar and name not in ctx.var_types:
                    for k in _access_kinds(node):
                        self._record_access(
                            node,
                            (PtrRef(fa, Val.const(0), fa.ctype, fa.elem_bytes), Val.const(0)),
                            k,
                            mask,
                            c,
                        )
                continue
            elif t == "lambda_expression":
                continue
            elif t in ("gnu_asm_expression",):
                ctx.asm = True
                continue
            elif t == "ERROR":
                self.errors.append(_line(node))
            stack.extend(reversed(node.named_children))

    def _flop(self, node, n: int, c: _WCtx, typed=None) -> None:
        if not self.stats:
            return
        ct = self.ctx.ctype(typed if typed is not None else node)
        kind = scalar_kind(ct)
        if kind is None:
            return
        self.flops[kind] = self.flops.get(kind, 0.0) + n * c.trip * c.sw
        if kind == "fp64" and node.type == "binary_expression":
            lt = self.ctx.ctype(node.child_by_field_name("left"))
            rt = self.ctx.ctype(node.child_by_field_name("right"))
            ln, rn = node.child_by_field_name("left"), node.child_by_field_name("right")
            for a_t, b_t, b_n in ((lt, rt, rn), (rt, lt, ln)):
                if (
                    scalar_kind(a_t) == "fp32"
                    and b_n is not None
                    and b_n.type == "number_literal"
                    and b_t == "double"
                ):
                    if _line(node) not in self.fp64_promotions:
                        self.fp64_promotions.append(_line(node))

    def _call(self, node, mask, c: _WCtx, stack, depth) -> bool:
        """Handle a call; True when its arguments were pushed already."""
        fn_node = node.child_by_field_name("function")
        args_node = node.child_by_field_name("arguments")
        args = args_node.named_children if args_node is not None else []
        name = _text(fn_node)
        if fn_node is not None and fn_node.type == "field_expression":
            fld = _text(fn_node.child_by_field_name("field"))
            if fld == "sync":
                obj = _text(fn_node.child_by_field_name("argument"))
                scope = "grid" if "grid" in obj.lower() else "block"
                if "warp" in obj.lower() or "tile" in obj.lower():
                    scope = "warp"
                self._barrier(node, f"{obj}.sync()", scope, c)
                return False
        if fn_node is not None and fn_node.type == "template_function":
            name = _text(fn_node.child_by_field_name("name"))
        short = name.split("::")[-1]
        if short in _BARRIER_CALLS:
            self._barrier(node, short, _BARRIER_CALLS[short], c)
            return False
        if short == "sync" and args:
            obj = _text(args[0])
            scope = "grid" if "grid" in obj.lower() else "block"
            self._barrier(node, f"sync({obj})", scope, c)
            return False
        if _ATOMIC_RE.match(short) and args:
            ref = self.ctx.resolve_ptr(args[0])
            if ref is not None:
                self._atomic(node, short, ref, mask, c)
                # its address is an access too: a scattered atomicAdd(&bins[data[i]]) costs
                # sectors (global) or bank conflicts (shared) like a scattered store
                self._record_access(node, (ref, ref.offset), "atomic", mask, c)
                a0 = _strip_parens(args[0])
                if a0.type == "pointer_expression":
                    inner = _strip_parens(a0.child_by_field_name("argument"))
                    if inner is not None and inner.type == "subscript_expression":
                        stack.extend(_index_children(inner))
                for a in args[1:]:
                    stack.append(a)
                return True
        if (short in _LOAD_INTRINSICS or short in _STORE_INTRINSICS) and args:
            a0 = _strip_parens(args[0])
            ref = self.ctx.resolve_ptr(a0)
            if ref is not None:
                kind = "load" if short in _LOAD_INTRINSICS else "store"
                self._record_access(node, (ref, ref.offset), kind, mask, c)
                if a0.type == "pointer_expression":
                    inner = _strip_parens(a0.child_by_field_name("argument"))
                    if inner is not None and inner.type == "subscript_expression":
                        stack.extend(_index_children(inner))
                for a in args[1:]:
                    stack.append(a)
                return True
        base = _math_base(short)
        if base is not None:
            n = 2 if short in _MATH_2FLOP else 1
            if short in ("__hadd2", "__hmul2"):
                n = 2
            if short == "__hfma2":
                n = 4
            if self.stats:
                kinds = [self.ctx.ctype(a) for a in args]
                ct = (
                    "half"
                    if short.startswith("__h")
                    else self.ctx.ctype(node) or _promote_types(kinds)
                )
                kind = scalar_kind(ct)
                if kind is not None:
                    self.flops[kind] = self.flops.get(kind, 0.0) + n * c.trip * c.sw
            return False
        if short in self.sf.macro_fns and depth < 4:
            params, body = self.sf.macro_fns[short]
            expanded = expand_macro(params, body, [_text(a) for a in args])
            enode = _parse_expression(expanded)
            if enode is not None:
                # a macro expansion is another tree: positions refer to the call site
                self.ctx.foreign += 1
                self.ctx.stmt_pos = node.start_byte
                try:
                    self._scan(enode, mask, c, depth + 1)
                finally:
                    self.ctx.foreign -= 1
                return True
        fi = self.sf.functions_by_name.get(short)
        if (
            fi is not None
            and not fi.is_kernel
            and fi.body is not None
            and self.sf.touches_memory(fi)
        ):
            self.ctx.device_calls.add(short)
        return False

    def _barrier(self, node, call: str, scope: str, c: _WCtx) -> None:
        hazard = None
        severity = 0.0
        if scope != "warp":
            if c.guards:
                line, text = c.guards[-1]
                hazard = f"{call} inside a thread-dependent branch (line {line}: {text})"
                severity = 1.0
            else:
                prior = [e for e in self.exits if e[0] < node.start_byte]
                if prior:
                    hazard = (
                        f"{call} after a thread-dependent early return (line {prior[0][1]}: "
                        f"{prior[0][2]}): exited threads never arrive"
                    )
                    severity = 0.5
        for b in self.barriers:
            if b.line == _line(node) and b.call == call:
                b.weight += c.w * c.sw
                return
        self.barriers.append(
            Barrier(_line(node), call, scope, c.depth, c.w * c.sw, hazard, severity)
        )

    def _atomic(self, node, call: str, ref: PtrRef, mask, c: _WCtx) -> None:
        distinct = 32.0
        off = ref.offset
        if off.num is not None:
            addr = np.broadcast_to(np.asarray(off.num, dtype=np.int64), mask.shape)
            st = sector_stats(addr, ref.elem_bytes, mask if mask.any() else self.env.full_mask())
            if st is not None:
                m = mask if mask.any() else self.env.full_mask()
                a = addr.reshape(-1, 32)
                mm = m.reshape(-1, 32)
                act = mm.any(1)
                a, mm = a[act], mm[act]
                a = _fill_inactive(a, mm)
                _, f = _unique_per_row(a)
                distinct = float(f.sum(1).mean())
        for a in self.atomics:
            if a.line == _line(node) and a.call == call:
                a.weight += c.w * c.sw
                return
        self.atomics.append(
            Atomic(_line(node), call, ref.array.space, c.depth, c.w * c.sw, distinct)
        )
        if self.stats and ref.array.space == "global":
            self.global_bytes += ref.elem_bytes * c.trip * c.sw

    def _record_access(self, node, tgt: tuple[PtrRef, Val], kind: str, mask, c: _WCtx) -> None:
        ref, off = tgt
        space = ref.array.space
        if space == "local":
            return
        key = (node.id, kind)
        agg = self.accs.get(key)
        if agg is None:
            agg = _AccAgg(
                {
                    "array": ref.array.name,
                    "space": space,
                    "kind": kind,
                    "line": _line(node),
                    "text": _short(_text(node), 70),
                    "elem_bytes": ref.elem_bytes,
                    "ctype": ref.ctype,
                    "depth": c.depth,
                }
            )
            self.accs[key] = agg
        w = c.w * c.sw
        executed = bool(mask.any())
        m = mask if executed else self.env.full_mask()
        if executed and space == "global":
            self.global_mask |= mask
        if not self.stats:
            return
        agg.w += w
        agg.executed |= executed
        size = ref.elem_bytes
        if off.num is None:
            lanes = float(m.reshape(-1, 32).sum(1)[m.reshape(-1, 32).any(1)].mean())
            sectors, ideal = lanes, math.ceil(lanes * size / 32.0)
            waves, iwaves = lanes, 1.0
            pattern = "data-dependent"
            stride = "data-dependent"
            stride_elems = None
        else:
            addr = np.broadcast_to(np.asarray(_as_int(off.num), dtype=np.int64), m.shape)
            st = sector_stats(addr, size, m, self.env.row if self.env.block[0] < 32 else None)
            if st is None:
                return
            sectors, ideal, lanes = st
            waves = iwaves = 0.0
            if space == "shared":
                bs = bank_stats(addr, size, m)
                if bs is not None:
                    waves, iwaves = bs
            stride_elems = self._stride(addr, size, m)
            stride = _stride_text(off.poly, stride_elems)
            pattern = _pattern(stride_elems, sectors, ideal, off)
        agg.sectors += w * sectors
        agg.ideal += w * ideal
        agg.wave += w * waves
        agg.iwave += w * iwaves
        agg.lanes += w * lanes
        agg.pattern_votes[pattern] = agg.pattern_votes.get(pattern, 0.0) + w
        if not agg.stride or (agg.stride_elems is None and stride_elems is not None):
            agg.stride, agg.stride_elems = stride, stride_elems
        if space == "global":
            self.global_bytes += size * c.trip * c.sw
            if lanes:
                self.sector_bytes += sectors * 32.0 / lanes * c.trip * c.sw

    def _stride(self, addr: np.ndarray, size: int, m: np.ndarray) -> float | None:
        """Element stride along threadIdx.x in the first active warp (None: irregular)."""
        bx = self.env.block[0]
        if bx < 2:
            return 0.0
        a = addr.reshape(-1, 32)
        mm = m.reshape(-1, 32)
        rows = np.nonzero(mm.any(1))[0]
        if not len(rows):
            return None
        r = rows[0]
        lanes = np.nonzero(mm[r])[0]
        row = a[r]
        width = min(bx, 32)
        # consecutive lanes with the same threadIdx.y/z: first `width` lanes of the warp
        seg = [ln for ln in lanes if ln < width]
        if len(seg) < 2:
            seg = list(lanes[:2])
            if len(seg) < 2:
                return 0.0
        vals = row[seg]
        idx = np.asarray(seg)
        d = np.diff(vals) / np.diff(idx)
        if np.allclose(d, d[0]):
            return float(d[0]) / size
        if np.all(vals == vals[0]):
            return 0.0
        return None

    # -- results ---------------------------------------------------------------------------
    def accesses(self) -> list[Access]:
        """The memory accesses found, aggregated over loop samples, in source order."""
        out = []
        for agg in self.accs.values():
            if agg.w <= 0:
                continue
            info = agg.info
            w = agg.w
            pattern = (
                max(agg.pattern_votes.items(), key=lambda kv: kv[1])[0]
                if agg.pattern_votes
                else "unknown"
            )
            out.append(
                Access(
                    array=info["array"],
                    space=info["space"],
                    kind=info["kind"],
                    line=info["line"],
                    text=info["text"],
                    elem_bytes=info["elem_bytes"],
                    ctype=info["ctype"],
                    depth=info["depth"],
                    weight=w,
                    stride=agg.stride or "?",
                    stride_elems=agg.stride_elems,
                    pattern=pattern,
                    sectors=agg.sectors / w,
                    ideal_sectors=agg.ideal / w,
                    wavefronts=agg.wave / w,
                    ideal_wavefronts=agg.iwave / w,
                    active_lanes=agg.lanes / w,
                    executed=agg.executed,
                )
            )
        out.sort(key=lambda a: (a.line, a.text))
        return out


_KIND_RANK = {"uniform": 0, "tail-only": 1, "warp-uniform": 2, "data-dependent": 3, "divergent": 4}


def _pick(values: list, n: int) -> list:
    if not values:
        return []
    if len(values) <= n:
        return list(values)
    idx = sorted(set(int(round(x)) for x in np.linspace(0, len(values) - 1, n)))
    return [values[i] for i in idx]


def _expr_sym(ctx: FuncCtx, cond, var: str, value) -> bool:
    saved = ctx.overrides.get(var)
    ctx.set_override(var, Val(value))
    try:
        return ctx.eval(cond).sym
    finally:
        ctx.set_override(var, saved)


def _access_kinds(node) -> list[str]:
    """Access kinds of a subscript/deref node from its syntactic context."""
    cur = node
    parent = cur.parent
    while parent is not None and (
        parent.type == "parenthesized_expression"
        or (parent.type == "field_expression" and parent.child_by_field_name("argument") == cur)
    ):
        cur, parent = parent, parent.parent
    if parent is None:
        return ["load"]
    pt = parent.type
    if pt == "pointer_expression" and parent.children and parent.children[0].type == "&":
        return []
    if pt == "subscript_expression" and parent.child_by_field_name("argument") == cur:
        return []  # inner part of a multi-dimensional chain
    if pt == "assignment_expression" and parent.child_by_field_name("left") == cur:
        op = _text(parent.child_by_field_name("operator"))
        return ["store"] if op == "=" else ["load", "store"]
    if pt == "update_expression":
        return ["load", "store"]
    return ["load"]


def _index_children(sub) -> list:
    """Index expressions of every level of a subscript chain (to scan nested loads)."""
    out = []
    cur = sub
    while cur is not None and cur.type == "subscript_expression":
        out.extend(_subscript_indices(cur))
        nxt = _strip_parens(cur.child_by_field_name("argument"))
        if nxt is not None and nxt.type != "subscript_expression" and nxt.type != "identifier":
            out.append(nxt)
        cur = nxt
    return out


def _stride_text(poly: Poly | None, stride_elems: float | None) -> str:
    if poly is not None:
        c = poly.coefficient_of("threadIdx.x")
        if c is not None:
            s = str(c)
            if stride_elems is not None and s != _fmt_num(stride_elems) and not c.is_zero():
                return f"{s} (={_fmt_num(stride_elems)})"
            return s
    if stride_elems is None:
        return "irregular"
    return _fmt_num(stride_elems)


def _fmt_num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:.3g}"


def _pattern(stride: float | None, sectors: float, ideal: float, off: Val) -> str:
    if stride is None:
        return "irregular" if sectors > ideal + 1e-9 else "coalesced"
    if sectors <= ideal + 1e-9:
        return "broadcast" if stride == 0 else "coalesced"
    if abs(stride) == 1 or stride == 0:
        return "misaligned"
    return "strided"


def _is_bounds_check(cond, ctx: FuncCtx) -> bool:
    """A relational comparison of a thread-dependent index against a uniform bound that is
    not a compile-time constant (``i < n``), possibly combined with ``&&``."""
    cond = _strip_parens(cond)
    if cond is None:
        return False
    if cond.type == "binary_expression":
        op = _text(cond.child_by_field_name("operator"))
        left, right = cond.child_by_field_name("left"), cond.child_by_field_name("right")
        if op in ("&&", "||"):
            parts = [p for p in (left, right) if ctx.eval(p).tid]
            return bool(parts) and all(_is_bounds_check(p, ctx) for p in parts)
        if op in ("<", "<=", ">", ">="):
            lv, rv = ctx.eval(left), ctx.eval(right)
            if lv.tid == rv.tid:
                return False
            idx, bound = (lv, rv) if lv.tid else (rv, lv)
            # the index must involve blockIdx (a global index), the bound a size
            idx_node = left if lv.tid else right
            text = _text(idx_node)
            uses_block = "blockIdx" in text or _mentions_global_index(idx_node, ctx)
            return uses_block and (
                bound.sym or bound.known_int() is None or bound.known_int() > 1024
            )
    return False


def _mentions_global_index(node, ctx: FuncCtx) -> bool:
    v = ctx.eval(node)
    if v.poly is None:
        return False
    return any(any(s.startswith("blockIdx") for s in m) for m in v.poly.terms)


# ---------------------------------------------------------------------------------------
# Host code
# ---------------------------------------------------------------------------------------


def analyze_host(sf: SourceFile) -> HostFacts:
    """Find kernel launches (with constant-folded configurations) and host syncs."""
    facts = HostFacts()
    kernel_names = {f.name for f in sf.kernels}
    dummy_env = ThreadEnv((32, 1, 1))
    for fn in sf.functions:
        if fn.is_kernel or fn.body is None or (fn.is_device and "__host__" not in fn.qualifiers):
            continue
        ctx: FuncCtx | None = None
        events: list[tuple[int, str, Any, int, list]] = []  # (byte, kind, node, depth, loops)
        stack: list[tuple[Any, int, tuple]] = [(fn.body, 0, ())]
        while stack:
            node, depth, loops = stack.pop()
            t = node.type
            if t == "call_expression":
                kc = None
                for ch in node.children:
                    if ch.type == "kernel_call_syntax":
                        kc = ch
                if kc is not None:
                    events.append((node.start_byte, "launch", node, depth, list(loops)))
                else:
                    name = _text(node.child_by_field_name("function")).split("::")[-1]
                    if name in _HOST_SYNCS:
                        if name == "cudaMemcpy" or name in ("cudaMemcpy2D", "cudaMemcpy3D"):
                            args = node.child_by_field_name("arguments")
                            if args is not None and "DeviceToDevice" in _text(args):
                                pass
                        events.append((node.start_byte, "sync", node, depth, list(loops)))
            nd, nl = depth, loops
            if t in ("for_statement", "while_statement", "do_statement", "for_range_loop"):
                nd, nl = depth + 1, loops + (node.id,)
            for ch in reversed(node.named_children):
                stack.append((ch, nd, nl))
        events.sort(key=lambda e: e[0])
        launches = [e for e in events if e[1] == "launch"]
        if not launches:
            continue
        ctx = FuncCtx(sf, fn, dummy_env, host=True)
        for _, _, node, depth, _ in launches:
            facts.launches.append(_launch(node, ctx, fn.name, depth))
        # syncs between launches
        names = [(_launch_name(e[2]), e) for e in launches]
        for _i, e in enumerate(events):
            if e[1] != "sync":
                continue
            call = _text(e[2].child_by_field_name("function")).split("::")[-1]
            if call in ("cudaMalloc",):
                continue
            before = [n for n, ev in names if ev[0] < e[0]]
            after = [n for n, ev in names if ev[0] > e[0]]
            # loops containing this sync and a launch make it paid every iteration
            in_loop = False
            nxt = after[0] if after else None
            for loop_id in e[4]:
                in_loop_launches = [n for n, ev in names if loop_id in ev[4]]
                if in_loop_launches:
                    in_loop = True
                    if nxt is None:
                        nxt = in_loop_launches[0]
                    if not before:
                        before = in_loop_launches[-1:]
            if before and nxt is not None:
                if call == "cudaFree" and not in_loop:
                    continue
                facts.syncs.append((_line(e[2]), call, before[-1], nxt, in_loop))
    del kernel_names
    return facts


def _launch_name(node) -> str:
    fn = node.child_by_field_name("function")
    if fn is not None and fn.type == "template_function":
        fn = fn.child_by_field_name("name")
    return _text(fn).split("::")[-1]


def _launch(node, ctx: FuncCtx, fname: str, depth: int) -> Launch:
    fn = node.child_by_field_name("function")
    targs: tuple = ()
    if fn is not None and fn.type == "template_function":
        ta = fn.child_by_field_name("arguments")
        vals: list = []
        for a in ta.named_children if ta is not None else []:
            if a.type == "type_descriptor":
                rt = ctx.tmap(_text(a))
                if type_bytes(rt):
                    vals.append(rt)
                    continue
                a = a.named_children[0] if a.named_children else a
            v = ctx.eval(a)
            vals.append(v.known_int())
        targs = tuple(vals)
    kc = next(ch for ch in node.children if ch.type == "kernel_call_syntax")
    cfg = kc.named_children
    grid = block = None
    smem = 0
    gtext = _text(cfg[0]) if cfg else ""
    btext = _text(cfg[1]) if len(cfg) > 1 else ""

    def known3(d3):
        if d3 is None:
            return None
        vals = [v.known_int() for v in d3]
        if any(v is None or v <= 0 for v in vals):
            return None
        return tuple(vals)

    if cfg:
        grid = known3(ctx.dim3(cfg[0]))
    if len(cfg) > 1:
        block = known3(ctx.dim3(cfg[1]))
    if len(cfg) > 2:
        sv = ctx.eval(cfg[2])
        smem = sv.known_int()
    args: list = []
    argl = node.child_by_field_name("arguments")
    for a in argl.named_children if argl is not None else []:
        v = ctx.eval(a)
        if v.sym or v.data or v.tid or v.scalar() is None:
            args.append(None)
        else:
            args.append(v.scalar())
    return Launch(
        _launch_name(node),
        _line(node),
        fname,
        grid,
        block,
        smem,
        gtext,
        btext,
        depth,
        targs,
        tuple(args),
    )


# ---------------------------------------------------------------------------------------
# Kernel analysis entry point
# ---------------------------------------------------------------------------------------


def _launch_bounds(
    sf: SourceFile, fn: FuncInfo, template_bind: Mapping[str, int] | None = None
) -> tuple[int | None, int | None] | None:
    if fn.launch_bounds is None:
        return None
    ctx = FuncCtx(
        sf, replace(fn, body=None), ThreadEnv((32, 1, 1)), host=True, template_bind=template_bind
    )
    vals = [ctx.eval(a).known_int() for a in fn.launch_bounds]
    vals += [None] * (2 - len(vals))
    return (vals[0], vals[1])


def default_block(uses_ty: bool, uses_tz: bool, bound: int | None) -> tuple[int, int, int]:
    """Block assumed when the launch is unknown (documented; ``--launch`` overrides)."""
    if uses_tz:
        return (8, 8, 4) if not bound else (8, 8, max(1, bound // 64))
    if uses_ty:
        if bound:
            x = 32 if bound >= 64 else max(1, bound // 2)
            return (x, max(1, bound // x), 1)
        return (16, 16, 1)
    return (bound or 256, 1, 1)


def analyze_kernel(
    sf: SourceFile,
    fn: FuncInfo,
    *,
    block: tuple[int, int, int] | None,
    grid: tuple[int, int, int] | None,
    template_args: tuple = (),
    param_values: Mapping[str, int | float] | None = None,
) -> KernelFacts:
    """Walk one kernel with a representative block and return its :class:`KernelFacts`.

    ``param_values`` binds scalar kernel parameters to known values (constant launch
    arguments)."""
    probe = FuncCtx(sf, replace(fn, body=None), ThreadEnv((32, 1, 1)))
    probe._collect(fn.body)
    tbind = {}
    for name, v in zip(fn.template_params, template_args):
        if v is not None:
            tbind[name] = v
    lb = _launch_bounds(sf, fn, tbind)
    assumed = block is None
    if block is None:
        block = default_block(probe.uses_ty, probe.uses_tz, lb[0] if lb else None)
    # representative block: the middle of a known grid (away from the first rows of
    # triangular loops and from the tail), else blockIdx = 1; if no thread of it reaches a
    # global access (a bounds check against an assumed size), try the next candidate.
    cands: list[tuple[int, int, int]] = []
    if grid is not None:
        cands.append(tuple(g // 2 for g in grid))  # type: ignore[arg-type]
        cands.append(tuple(min(DEFAULT_BLOCK_IDX, g - 1) for g in grid))  # type: ignore[arg-type]
    else:
        cands.append((DEFAULT_BLOCK_IDX,) * 3)
    cands.append((0, 0, 0))
    seen: list[tuple[int, int, int]] = []
    for bidx in cands:
        if bidx in seen:
            continue
        seen.append(bidx)
        env = ThreadEnv(block, block_idx=bidx, grid=grid, block_assumed=assumed)
        w = KernelWalker(sf, fn, env, template_bind=tbind, param_values=param_values)
        w.run()
        if w.global_mask.any() or not any(a.info["space"] == "global" for a in w.accs.values()):
            break
    ctx = w.ctx
    facts = KernelFacts(
        name=fn.name,
        line=fn.line,
        params=fn.params,
        launch_bounds=lb,
        block=env.block,
        block_assumed=assumed,
        uses_ty=ctx.uses_ty,
        uses_tz=ctx.uses_tz,
        shared_static_bytes=ctx.shared_static_bytes,
        shared_arrays=ctx.shared_arrays,
        uses_dynamic_shared=ctx.uses_dynamic_shared,
        accesses=w.accesses(),
        branches=w.branches,
        barriers=w.barriers,
        atomics=w.atomics,
        flops=w.flops,
        global_bytes=w.global_bytes,
        global_sector_bytes=w.sector_bytes,
        fp64_promotions=sorted(w.fp64_promotions),
        simt_weight=w.simt_w,
        simt_eff_weighted=w.simt_e,
        error_lines=sorted(set(w.errors)),
    )
    notes = facts.notes
    if env.block_idx != (DEFAULT_BLOCK_IDX,) * 3:
        notes.append("representative block blockIdx = (" + ", ".join(map(str, env.block_idx)) + ")")
    if assumed:
        notes.append(
            f"block size unknown: analysed with an assumed block "
            f"{'x'.join(map(str, env.block))} (pass --launch)"
        )
    if ctx.assumed:
        names = sorted(n for n in ctx.assumed if not n.startswith("__"))
        if names:
            notes.append(
                "representative values assumed for: "
                + ", ".join(names[:8])
                + (" ..." if len(names) > 8 else "")
                + f" (sizes {DEFAULT_SIZE}, floats 1.5; pass sizes to refine)"
            )
    if ctx.device_calls:
        notes.append(
            "calls device function(s) "
            + ", ".join(sorted(ctx.device_calls))
            + ": memory accesses inside them are not attributed to this kernel"
        )
    if ctx.asm:
        notes.append("inline PTX (asm) is not analysed")
    if ctx.lambdas:
        notes.append("lambdas inside the kernel are not analysed")
    return facts


def idle_fraction(
    sf: SourceFile,
    fn: FuncInfo,
    block: tuple[int, int, int],
    grid: tuple[int, int, int],
    template_args: tuple = (),
    param_values: Mapping[str, int | float] | None = None,
) -> tuple[float | None, str]:
    """Fraction of launched threads that never touch global memory (bounds-check idle
    threads), from the last block along each grid dimension; ``None`` when the guard
    depends on an unknown size."""
    tbind = {n: v for n, v in zip(fn.template_params, template_args) if v is not None}
    total_active = 1.0
    for dim in range(3):
        if grid[dim] <= 1 and dim > 0:
            continue
        bidx = [min(1, grid[d] - 1) for d in range(3)]
        bidx[dim] = grid[dim] - 1
        env = ThreadEnv(block, block_idx=tuple(bidx), grid=grid, block_idx_exact=True)
        w = KernelWalker(sf, fn, env, template_bind=tbind, stats=False, param_values=param_values)
        w.run()
        if w.guard_sym and w.guard_sym_loop:
            return None, ("a loop's bound decides which threads work in its last iteration "
                          "(a grid-stride loop): not computed statically")
        if w.guard_sym:
            return None, "the bounds check compares against a size that is not known statically"
        frac_last = float(w.global_mask.sum()) / env.threads
        total_active *= ((grid[dim] - 1) + frac_last) / grid[dim]
    return max(0.0, 1.0 - total_active), ""


__all__ = [
    "Access",
    "Atomic",
    "Barrier",
    "Branch",
    "HostFacts",
    "KernelFacts",
    "Launch",
    "SourceFile",
    "ThreadEnv",
    "analyze_host",
    "analyze_kernel",
    "bank_stats",
    "idle_fraction",
    "parse",
    "sector_stats",
]
