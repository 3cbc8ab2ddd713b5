"""Static guards on a PyTorch candidate: reward hacks refused before anything runs.

A candidate for a PyTorch problem is a Python file defining ``class ModelNew(nn.Module)``
whose ``forward`` calls custom CUDA kernels, built either with
``torch.utils.cpp_extension.load_inline`` (KernelBench format) or loaded with
``cudaperf_cli.torch_runtime.load_cuda("kernel.cu")`` (the fast format).  This module
reads the candidate's source with :mod:`ast` (never runs it) and the CUDA/C++ strings
embedded in it (or given separately) with regular expressions, and reports
:class:`GuardViolation` s.  See ``docs/pytorch-problems.md`` for the user-facing rules.

Guard ids (stable; :data:`GUARD_IDS`):

``syntax``               the source does not parse.
``no_modelnew``          no ``class ModelNew``.
``inherits_model``       ModelNew derives from the reference ``Model`` (or an alias of it),
                         or the file creates ``Model(...)`` / calls ``Model.forward``.
``try_except_fallback``  ``try``/``except`` (or ``contextlib.suppress``) in ModelNew or on its
                         forward path, or around a kernel build anywhere in the file.
``patching``             assignments, ``setattr``/``delattr`` or ``mock.patch`` on ``torch``
                         (timers, streams, functions the reference uses), ``time``,
                         ``sys`` (``sys.modules``), ``builtins``, ``cudaperf_cli``, the
                         reference ``Model``; ``sys.settrace``/``setprofile``; imports of
                         ``cudaperf_cli`` other than ``cudaperf_cli.torch_runtime``;
                         profiler events written by C++ (``RECORD_FUNCTION``, NVTX
                         ranges), which would forge the op names the dynamic guards read.
``lower_precision``      ``.half()``, ``.bfloat16()``, ``torch.float16``/``bfloat16``/
                         ``float8_*``, ``autocast``, ``allow_tf32 = True``,
                         ``set_float32_matmul_precision`` other than ``"highest"``,
                         ``fp32_precision`` other than ``"ieee"``; in CUDA strings
                         ``__half``, ``half2``, ``half`` as a type, ``__nv_bfloat16``, fp8 types, half
                         intrinsics, TF32, PTX
                         ``.f16``/``.bf16``/``.tf32``, ``at::Half``/``kHalf``...
``torch_fallback``       PyTorch does the work on the forward path: a ``torch.*`` / ``F.*`` /
                         tensor-method call outside :data:`ALLOWED_TORCH_FUNCTIONS` /
                         :data:`ALLOWED_TENSOR_METHODS`, arithmetic or comparison operators
                         on tensors, indexed assignment into a tensor, calling an ``nn``
                         layer (``self.conv(x)``), ``torch.compile``/``torch.jit``, or
                         ``torch::``/``at::`` compute ops in the C++ strings.  Library
                         operators (cuBLAS/cuDNN: ``matmul``, ``linear``, ``conv2d``...)
                         pass only when named in ``allow_torch_ops``.
``result_cache``         results kept between calls: ``id()``/``hash()``, ``data_ptr()``
                         used as a key or compared, stores on ``self`` or module globals
                         in forward (other than a kernel handle or an empty buffer),
                         mutating ``self``/module containers, returning ``self.<attr>``,
                         ``functools.lru_cache``/``cache`` on the forward path.
``dynamic_code``         ``exec``/``eval``/``compile``/``__import__``/
                         ``importlib.import_module``/``pickle``/``marshal`` or ``getattr``
                         with a computed name on a module: code the guards cannot read.
``file_access``          CUDA/C++ text that makes the compiler read a file outside the
                         toolkit and the candidate's include path (:func:`check_includes`):
                         an ``#include`` of an absolute path or one with ``..``, a computed
                         ``#include MACRO``, ``#embed``, ``.incbin``; load_inline flags
                         with an absolute path, ``-include``/``-imacros`` or ``@file``.
                         Compiler errors quote what they read, and they go back to the
                         model: ``#include "/etc/passwd"`` put that file in the next request
                         to the model server.

What static checks miss (decoy kernels, side streams, output aliasing, caching through
means not written in the source, shape specialisation) is left to the dynamic guards of
the evaluation worker.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Mapping

if TYPE_CHECKING:  # pragma: no cover
    from cudaperf_cli.problems.pytorch import TorchProblem

__all__ = [
    "ALLOWED_TENSOR_METHODS",
    "ALLOWED_TORCH_FUNCTIONS",
    "GUARD_DESCRIPTIONS",
    "GUARD_IDS",
    "GuardViolation",
    "LIBRARY_OPS",
    "check_candidate_source",
    "check_cuda_source",
    "check_includes",
]

GUARD_IDS: tuple[str, ...] = (
    "syntax",
    "no_modelnew",
    "inherits_model",
    "try_except_fallback",
    "patching",
    "lower_precision",
    "torch_fallback",
    "result_cache",
    "dynamic_code",
    "file_access",
)

GUARD_DESCRIPTIONS: dict[str, str] = {
    "syntax": "the candidate's Python source does not parse",
    "no_modelnew": "the candidate defines no class ModelNew",
    "inherits_model": "ModelNew reuses the reference Model (inherits from it, creates it, calls its forward)",
    "try_except_fallback": "try/except or contextlib.suppress that could hide a failing kernel behind a fallback",
    "patching": "the candidate rebinds timers, streams, torch functions, sys.modules, builtins or cudaperf",
    "lower_precision": "the candidate computes in a precision lower than the problem's float32",
    "torch_fallback": "PyTorch operators, not the candidate's kernels, do the work in forward",
    "result_cache": "results or inputs are kept between calls (caching by address or identity)",
    "dynamic_code": "code built at run time (exec, eval, __import__, computed getattr) the guards cannot read",
    "file_access": "the compiler is made to read a file outside the toolkit and the include path",
}


@dataclass(frozen=True)
class GuardViolation:
    """One refused pattern in a candidate.

    Attributes:
        guard: a stable id from :data:`GUARD_IDS` (``"torch_fallback"``...).
        line: 1-based line in the checked source (the Python file, or ``file``).
        message: one line, written for the model and the user (what was found, why it is
            refused, what to do instead).
        file: ``None`` for the candidate's Python source; the name of a separate CUDA
            source (``"kernel.cu"``) checked with :func:`check_cuda_source`.
    """

    guard: str
    line: int
    message: str
    file: str | None = None

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.file else f"line {self.line}"
        return f"[{self.guard}] {where}: {self.message}"

    def to_json(self) -> dict[str, Any]:
        """``{"guard", "line", "message", "file"}`` (for run logs and the model's feedback)."""
        return {"guard": self.guard, "line": self.line, "message": self.message, "file": self.file}


# ---------------------------------------------------------------------------------------
# Allowlists
# ---------------------------------------------------------------------------------------

#: ``torch.<name>`` functions that may appear on the forward path.  Allocation (the
#: candidate's kernels fill the result): ``empty``, ``empty_like``, ``empty_strided``,
#: ``zeros``, ``zeros_like``, ``ones``, ``ones_like``, ``full``, ``full_like``, ``arange``.
#: ``zeros``/``ones``/``full`` launch a fill kernel; they are allowed because atomic
#: reductions need a zeroed output, and because a loaded problem's outputs depend on its
#: inputs, a filled buffer alone cannot pass verification.  Views and metadata:
#: ``reshape`` (a copy when the input is not viewable), ``flatten``, ``unflatten``,
#: ``unsqueeze``, ``squeeze``, ``permute``, ``transpose``, ``t``, ``narrow``, ``select``,
#: ``chunk``, ``split``, ``unbind``, ``movedim``, ``as_strided``, ``numel``, ``is_tensor``,
#: ``is_floating_point``, ``get_default_dtype``, ``device``, ``Size``, ``finfo``, ``iinfo``,
#: ``no_grad``, ``inference_mode``, ``is_grad_enabled``, ``set_grad_enabled``.
#: Namespaces allowed whole: ``torch.cuda`` (streams, devices, synchronize),
#: ``torch.utils.cpp_extension`` (builds), ``torch.library``, ``torch.backends`` (settings;
#: TF32 settings are ``lower_precision``), ``torch.ops.<your_namespace>`` (custom ops; not
#: ``aten``/``prims``/``quantized``/``_*``).
ALLOWED_TORCH_FUNCTIONS: frozenset[str] = frozenset(
    {
        # allocation
        "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like",
        "full", "full_like", "arange",
        # views
        "reshape", "flatten", "unflatten", "unsqueeze", "squeeze", "permute", "transpose", "t",
        "narrow", "select", "chunk", "split", "unbind", "movedim", "as_strided",
        # metadata / context
        "numel", "is_tensor", "is_floating_point", "get_default_dtype", "device", "Size",
        "finfo", "iinfo", "no_grad", "inference_mode", "is_grad_enabled", "set_grad_enabled",
        "manual_seed", "dtype",
    }
)

#: Tensor methods that may appear on the forward path: views/metadata (``view``,
#: ``view_as``, ``reshape``, ``reshape_as``, ``contiguous`` (a copy when the tensor is not
#: contiguous), ``size``, ``stride``, ``dim``, ``ndimension``, ``numel``, ``nelement``,
#: ``flatten``, ``unflatten``, ``unsqueeze``, ``squeeze``, ``permute``, ``transpose``,
#: ``t``, ``expand``, ``expand_as``, ``narrow``, ``select``, ``chunk``, ``split``,
#: ``unbind``, ``movedim``, ``detach``, ``data_ptr``, ``const_data_ptr``,
#: ``is_contiguous``, ``element_size``, ``get_device``, ``storage_offset``,
#: ``is_floating_point``, ``item``), device moves (``to(device)`` -- ``to(dtype)`` is a
#: conversion kernel and refused, ``cuda``), ``float`` (a no-op on the float32 tensors of a
#: problem), allocation (``new_empty``, ``new_empty_strided``, ``new_zeros``, ``new_ones``,
#: ``new_full``) and fills of the candidate's own buffers (``zero_``, ``fill_``).
ALLOWED_TENSOR_METHODS: frozenset[str] = frozenset(
    {
        "view", "view_as", "reshape", "reshape_as", "contiguous", "size", "stride", "dim",
        "ndimension", "numel", "nelement", "flatten", "unflatten", "unsqueeze", "squeeze",
        "permute", "transpose", "t", "expand", "expand_as", "narrow", "select", "chunk",
        "split", "unbind", "movedim", "detach", "data_ptr", "const_data_ptr", "is_contiguous",
        "element_size", "get_device", "storage_offset", "is_floating_point", "item", "to",
        "cuda", "float", "new_empty", "new_empty_strided", "new_zeros", "new_ones", "new_full",
        "zero_", "fill_", "requires_grad_",
    }
)

#: Library operators (cuBLAS/cuDNN) a caller may allow through ``allow_torch_ops``
#: (a problem whose point is an epilogue around a GEMM, for instance).
LIBRARY_OPS: frozenset[str] = frozenset(
    {
        "matmul", "mm", "bmm", "addmm", "baddbmm", "addmv", "mv", "linear",
        "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
    }
)

#: Methods returning plain numbers/metadata, not tensors.
_META_METHODS = frozenset(
    {"size", "stride", "dim", "ndimension", "numel", "nelement", "data_ptr", "const_data_ptr",
     "is_contiguous", "element_size", "get_device", "storage_offset", "is_floating_point", "item"}
)
_TENSOR_META_ATTRS = frozenset(
    {"shape", "device", "dtype", "ndim", "is_cuda", "layout", "requires_grad", "grad_fn",
     "names", "is_leaf", "itemsize", "nbytes", "is_sparse", "is_quantized"}
)
_TENSOR_VIEW_ATTRS = frozenset({"T", "mT", "H", "mH", "real", "imag", "data", "grad"})

# torch.Tensor's public methods (torch 2.13), the names a call on a tensor may do work with.
_TENSOR_METHOD_NAMES = frozenset(
    """
abs abs_ absolute absolute_ acos acos_ acosh acosh_ add add_ addbmm addbmm_ addcdiv addcdiv_
addcmul addcmul_ addmm addmm_ addmv addmv_ addr addr_ adjoint all allclose amax amin aminmax
angle any apply_ arccos arccos_ arccosh arccosh_ arcsin arcsin_ arcsinh arcsinh_ arctan arctan2
arctan2_ arctan_ arctanh arctanh_ argmax argmin argsort argwhere as_strided as_strided_
as_strided_scatter as_subclass asin asin_ asinh asinh_ atan atan2 atan2_ atan_ atanh atanh_
backward baddbmm baddbmm_ bernoulli bernoulli_ bfloat16 bincount bitwise_and bitwise_and_
bitwise_left_shift bitwise_left_shift_ bitwise_not bitwise_not_ bitwise_or bitwise_or_
bitwise_right_shift bitwise_right_shift_ bitwise_xor bitwise_xor_ bmm bool broadcast_to byte
cauchy_ ccol_indices cdouble ceil ceil_ cfloat chalf char cholesky cholesky_inverse
cholesky_solve chunk clamp clamp_ clamp_max clamp_max_ clamp_min clamp_min_ clip clip_ clone
coalesce col_indices conj conj_physical conj_physical_ const_data_ptr contiguous copy_ copysign
copysign_ corrcoef cos cos_ cosh cosh_ count_nonzero cov cpu cross crow_indices cuda cummax
cummin cumprod cumprod_ cumsum cumsum_ data_ptr deg2rad deg2rad_ dense_dim dequantize det detach
detach_ diag diag_embed diagflat diagonal diagonal_scatter diff digamma digamma_ dim dim_order
dist div div_ divide divide_ dot double dsplit eig element_size eq eq_ equal erf erf_ erfc erfc_
erfinv erfinv_ exp exp2 exp2_ exp_ expand expand_as expm1 expm1_ exponential_ fill_
fill_diagonal_ fix fix_ flatten flip fliplr flipud float float_power float_power_ floor floor_
floor_divide floor_divide_ fmax fmin fmod fmod_ frac frac_ frexp gather gcd gcd_ ge ge_
geometric_ geqrf ger get_device greater greater_ greater_equal greater_equal_ gt gt_ half
hardshrink hash_tensor heaviside heaviside_ histc histogram hsplit hypot hypot_ i0 i0_ igamma
igamma_ igammac igammac_ index index_add index_add_ index_copy index_copy_ index_fill
index_fill_ index_put index_put_ index_reduce index_reduce_ index_select indices inner int
int_repr inverse ipu is_coalesced is_complex is_conj is_contiguous is_distributed
is_floating_point is_inference is_neg is_nonzero is_pinned is_same_size is_set_to is_shared
is_signed isclose isfinite isinf isnan isneginf isposinf isreal istft item kron kthvalue lcm
lcm_ ldexp ldexp_ le le_ lerp lerp_ less less_ less_equal less_equal_ lgamma lgamma_ log log10
log10_ log1p log1p_ log2 log2_ log_ log_normal_ log_softmax logaddexp logaddexp2 logcumsumexp
logdet logical_and logical_and_ logical_not logical_not_ logical_or logical_or_ logical_xor
logical_xor_ logit logit_ logsumexp long lstsq lt lt_ lu lu_solve map2_ map_ masked_fill
masked_fill_ masked_scatter masked_scatter_ masked_select matmul matrix_exp matrix_power max
maximum mean median min minimum mm mode module_load moveaxis movedim msort mtia mul mul_
multinomial multiply multiply_ mv mvlgamma mvlgamma_ nan_to_num nan_to_num_ nanmean nanmedian
nanquantile nansum narrow narrow_copy ndimension ne ne_ neg neg_ negative negative_ nelement new
new_empty new_empty_strided new_full new_ones new_tensor new_zeros nextafter nextafter_ nonzero
nonzero_static norm normal_ not_equal not_equal_ numel numpy orgqr ormqr outer permute
pin_memory pinverse polygamma polygamma_ positive pow pow_ prelu prod put put_
q_per_channel_axis q_per_channel_scales q_per_channel_zero_points q_scale q_zero_point qr
qscheme quantile rad2deg rad2deg_ random_ ravel reciprocal reciprocal_ record_stream
register_hook register_post_accumulate_grad_hook reinforce relu relu_ remainder remainder_
renorm renorm_ repeat repeat_interleave requires_grad_ reshape reshape_as resize resize_
resize_as resize_as_ resize_as_sparse_ resolve_conj resolve_neg retain_grad roll rot90 round
round_ row_indices rsqrt rsqrt_ scatter scatter_ scatter_add scatter_add_ scatter_reduce
scatter_reduce_ select select_scatter set_ sgn sgn_ share_memory_ short sigmoid sigmoid_ sign
sign_ signbit sin sin_ sinc sinc_ sinh sinh_ size slice_inverse slice_scatter slogdet smm
softmax solve sort sparse_dim sparse_mask sparse_resize_ sparse_resize_and_clear_ split
split_with_sizes sqrt sqrt_ square square_ squeeze squeeze_ sspaddmm std stft storage
storage_offset storage_type stride sub sub_ subtract subtract_ sum sum_to_size svd swapaxes
swapaxes_ swapdims swapdims_ symeig t t_ take take_along_dim tan tan_ tanh tanh_ tensor_split
tile to to_dense to_mkldnn to_padded_tensor to_sparse to_sparse_bsc to_sparse_bsr
to_sparse_coo to_sparse_csc to_sparse_csr tolist topk trace transpose transpose_
triangular_solve tril tril_ triu triu_ true_divide true_divide_ trunc trunc_ type type_as unbind
unflatten unfold uniform_ unique unique_consecutive unsafe_chunk unsafe_split
unsafe_split_with_sizes unsqueeze unsqueeze_ untyped_storage values var vdot view view_as
vsplit where xlogy xlogy_ xpu zero_
""".split()
)
#: Tensor methods that do work (refused on the forward path unless in ``allow_torch_ops``).
_TENSOR_WORK_METHODS = _TENSOR_METHOD_NAMES - ALLOWED_TENSOR_METHODS
#: Method names also common on Python containers/strings: not refused on receivers whose
#: type the guard cannot tell (they are on known tensors).
_PY_METHOD_NAMES = frozenset(
    {"index", "values", "sort", "copy", "count", "pop", "append", "extend", "insert", "remove",
     "reverse", "update", "get", "items", "keys", "join", "format", "replace", "strip", "add",
     "clear", "discard", "apply_", "map_", "new", "type", "bool", "int", "all", "any"}
)
#: Container mutators (result_cache when applied to self.<attr> or a module global).
_MUTATORS = frozenset(
    {"append", "extend", "insert", "update", "setdefault", "add", "__setitem__", "put",
     "appendleft", "push", "store"}
)

_BUILD_SUFFIXES_TORCH = ("cpp_extension.load_inline", "cpp_extension.load")
_BUILD_SUFFIXES_C = (
    "torch_runtime.load_cuda",
    "ctypes.CDLL",
    "ctypes.cdll.LoadLibrary",
    "ctypes.PyDLL",
    "ctypes.CDLL.LoadLibrary",
    "cupy.RawModule",
    "cupy.RawKernel",
)
_BUILD_BARE = {"load_inline": "LT", "load_cuda": "LC", "CDLL": "LC"}
#: Arguments of a torch extension build that name files or pass compiler flags.
_BUILD_PATH_ARGS = frozenset({"extra_cflags", "extra_cuda_cflags", "extra_include_paths",
                              "extra_ldflags", "sources", "build_directory"})

_LOWER_DTYPES = frozenset(
    {"float16", "half", "bfloat16", "complex32", "chalf", "HalfTensor", "BFloat16Tensor",
     "qint8", "quint8", "qint32", "quint4x2", "quint2x4", "float4_e2m1fn_x2"}
)
_HIGHER_OR_OTHER_DTYPES = frozenset(
    {"float64", "double", "int8", "uint8", "int16", "short", "int32", "int", "int64", "long",
     "bool", "complex64", "cfloat", "complex128", "cdouble", "uint16", "uint32", "uint64"}
)
_PROTECTED_ROOTS = frozenset(
    {"torch", "time", "sys", "builtins", "__builtins__", "cudaperf_cli", "timeit", "importlib",
     "gc", "threading"}
)
_ALLOWED_CUDAPERF_IMPORTS = ("cudaperf_cli.torch_runtime",)
_NN_OP_NAMES = {
    "Linear": "linear", "Bilinear": "bilinear", "LazyLinear": "linear",
    "Conv1d": "conv1d", "Conv2d": "conv2d", "Conv3d": "conv3d",
    "ConvTranspose1d": "conv_transpose1d", "ConvTranspose2d": "conv_transpose2d",
    "ConvTranspose3d": "conv_transpose3d",
}
_NN_HOLDERS = frozenset(
    {"Parameter", "ParameterList", "ParameterDict", "Module", "ModuleList", "ModuleDict",
     "Buffer", "Identity"}
)


def _v(guard: str, line: int, message: str, file: str | None = None) -> GuardViolation:
    return GuardViolation(guard, int(line or 1), message, file)


# ---------------------------------------------------------------------------------------
# CUDA / C++ strings
# ---------------------------------------------------------------------------------------

_LP_CUDA_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"\b__half2?\b"), "__half"),
    (re.compile(r"\bhalf2\b"), "half2"),
    (re.compile(r"\b__nv_bfloat162?\b|\bnv_bfloat162?\b"), "__nv_bfloat16"),
    (re.compile(r"\b__nv_fp8\w*|\b__nv_fp4\w*"), "fp8/fp4 types"),
    (re.compile(r"\b__float2half\w*|\b__half2float\b|\b__half22float2\b|\b__float22half2\w*|\b__halves2half2\b"), "half conversions"),
    (re.compile(r"\b__float2bfloat16\w*|\b__bfloat162float\b|\b__float22bfloat162\w*"), "bfloat16 conversions"),
    (re.compile(r"\b__h(?:add|sub|mul|div|fma|neg|max|min|exp|log|sqrt)2?(?:_rn|_sat)?\b"), "half intrinsics"),
    (re.compile(r"\b(?:at|c10|torch)::(?:Half|BFloat16|kHalf|kFloat16|kBFloat16|Float8_\w+|kFloat8_\w+)\b"), "half/bfloat16 tensor types"),
    (re.compile(r"\btf32\b|__float_to_tf32|\bprecision::tf32\b"), "TF32"),
    (re.compile(r"\.(?:f16|bf16|f16x2|bf16x2|e4m3|e5m2|tf32)\b"), "PTX half/bf16/fp8/tf32 types"),
]
_HALF_WORD = re.compile(r"\bhalf\b")
#: Profiler events written by the candidate's C++ (``RECORD_FUNCTION("aten::mm", {})``): the
#: dynamic guards read the profiler's op names, which such an event would forge.
_CPP_PROFILER_EVENT = re.compile(
    r"\b(RECORD_FUNCTION\w*|RECORD_USER_SCOPE\w*|RECORD_EDGE_SCOPE\w*|RecordFunction\w*|"
    r"record_function\w*|profiler\s*::|pushRange|popRange|nvtxRange\w*|nvtxMark\w*)"
)
_CPP_TORCH_CALL = re.compile(r"\b(torch|at)::((?:\w+::)*)(\w+)\s*(?:<[^<>;]*>)?\s*\(")
_CPP_TENSOR_DECL = re.compile(
    r"\b(?:torch|at)::Tensor\s*(?:const\s*)?&?\s*([A-Za-z_]\w*)|\bauto\s*&?\s*([A-Za-z_]\w*)\s*=\s*(?:torch|at)::"
)
_CPP_NAMESPACE_OK = ("cuda::", "native::cuda", "indexing::", "detail::", "autograd::", "Tag::")
_CPP_OPS_OK = ALLOWED_TORCH_FUNCTIONS | {
    "from_blob", "empty_cuda", "device_of", "globalContext", "getCurrentCUDAStream", "get_device",
    "scalarTypeToTypeMeta", "kCUDA", "tensor_options",
}
_CPP_METHODS_OK = ALLOWED_TENSOR_METHODS | {
    "sizes", "strides", "options", "device", "scalar_type", "dtype", "is_cuda", "defined",
    "mutable_data_ptr", "const_data_ptr", "nbytes", "layout", "type", "is_same",
    "suggest_memory_format", "itemsize", "sym_size", "sym_numel",
}


def _strip_c_comments(text: str) -> str:
    """Blank out // and /* */ comments, keeping newlines (line numbers stay right)."""

    def blank(m: re.Match[str]) -> str:
        return re.sub(r"[^\n]", " ", m.group(0))

    return re.sub(r"//[^\n]*|/\*.*?\*/", blank, text, flags=re.S)


def _half_type_uses(code: str) -> list[int]:
    """Offsets of ``half`` used as a type (``half *p``, ``const half x``, ``(half)v``),
    not as a variable (``int half = n / 2``)."""
    out = []
    for m in _HALF_WORD.finditer(code):
        before = code[: m.start()].rstrip()
        prev_word = re.search(r"([A-Za-z_]\w*)$", before)
        prev_char = before[-1:] if before else ""
        after = code[m.end() :].lstrip()
        nxt = after[:1]
        type_context = prev_char in ("", "(", ",", ";", "{", "}", "<", "\n") or (
            prev_word is not None
            and prev_word.group(1) in ("const", "volatile", "static", "__shared__", "extern", "inline", "__device__", "__restrict__", "typename")
        )
        if type_context and (nxt in ("*", "&", ">", ")") or re.match(r"[A-Za-z_]", nxt or "")):
            out.append(m.start())
    return out


_INCLUDE = re.compile(r"^[ \t\f\v]*#[ \t\f\v]*(include|include_next|import|embed)\b[ \t\f\v]*(.*)$", re.M)
#: ``#line 12 "file"`` and the linemarker ``# 12 "file"``: the compiler then reports (and
#: quotes) lines of that file.
_LINE_FILE = re.compile(r'^[ \t\f\v]*#[ \t\f\v]*(?:line[ \t\f\v]+)?\d+[ \t\f\v]+"', re.M)
#: Assembler directives that read a file (``.incbin``, ``.include``), however the string
#: is spelled: adjacent literals joined, ``\x2e``/``\056`` for the dot, any case.
_ASM_FILE = re.compile(r"(?:\.|\\x2e|\\056)\s*(?:incbin|include)\b|\bincbin\b", re.I)
#: Existence and age tests of a file (``__has_include("/etc/x")``, ``#pragma GCC
#: dependency``): one bit each, but about any file.
_FILE_PROBE = re.compile(r'__has_include(?:_next)?\s*\(\s*["<]\s*(?:/|~|[^">]*\.\.)|'
                         r'\bGCC\s+dependency\b|\bGCC\\?"?\s*dependency')
#: C and C++ tokens that hide text from a comment stripper: string and character literals
#: (raw strings included), and the comments themselves.
_C_TOKENS = re.compile(r'R"([^()\\\s]{0,16})\((?:.|\n)*?\)\1"|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|'
                       r"//[^\n]*|/\*(?:.|\n)*?\*/")


def _translation_phases(text: str) -> str:
    """What the preprocessor sees before it reads directives: line ends normalised (a lone
    CR ends a line for gcc), ``??=`` and ``%:`` as ``#``, backslash-newline splices
    removed, comments blanked (not inside string or character literals)."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = text.replace("??=", "#").replace("%:", "#")
    text = re.sub(r"\\[ \t]*\n", "", text)

    def blank(m: re.Match[str]) -> str:
        tok = m.group(0)
        return re.sub(r"[^\n]", " ", tok) if tok.startswith("/") else tok

    return _C_TOKENS.sub(blank, text)


def _bad_path(path: str) -> str | None:
    """Why a path a compiler would read is refused, or None."""
    if path.startswith(("/", "~")) or re.match(r"[A-Za-z]:[\\/]", path):
        return "an absolute path"
    if ".." in re.split(r"[\\/]", path):
        return "a path with '..'"
    return None


def check_includes(text: str, *, file: str | None = "kernel.cu", line_offset: int = 0) -> list[GuardViolation]:
    """``file_access`` violations in CUDA/C++ text: an ``#include`` (``#include_next``,
    ``#import``, ``#embed``) of an absolute path or a path with ``..``, a computed include
    (``#include NAME``: a macro can spell any path), ``#embed`` at all, ``#line`` naming a
    file, an assembler ``.incbin``/``.include``.  The text is read as the preprocessor
    reads it (:func:`_translation_phases`: digraphs, trigraphs, splices, lone CRs, comments
    outside literals).  Relative includes (``"helper.h"``, ``<cuda_runtime.h>``) pass: they
    resolve in the toolkit, the system and the ``-I`` folders the user gave.  A static
    check has limits (a macro that pastes ``.incbin`` together); nvcc's diagnostics located
    in other files are withheld from the model as well (``build.nvcc.confine_diagnostics``).

    Args:
        text: the source.
        file: reported in each violation (``None``: a string inside the Python source).
        line_offset: added to line numbers.
    """
    code = _translation_phases(text)
    out: list[GuardViolation] = []

    def line_of(offset: int) -> int:
        return code.count("\n", 0, offset) + 1 + line_offset

    for m in _LINE_FILE.finditer(code):
        out.append(_v("file_access", line_of(m.start()),
                      "#line (or a line marker) naming a file: the compiler then quotes that file; "
                      "not allowed", file))
    for m in _INCLUDE.finditer(code):
        kind, rest = m.group(1), m.group(2).strip()
        target = re.match(r'"([^"]*)"|<([^>]*)>', rest)
        if kind == "embed":
            why = "#embed reads a file into the program"
        elif target is None:
            why = f"a computed #{kind} ({rest[:40]!r}): a macro can name any file"
        else:
            bad = _bad_path(target.group(1) if target.group(1) is not None else target.group(2))
            why = f"#{kind} of {bad}" if bad else None
        if why:
            out.append(_v("file_access", line_of(m.start()),
                          f"{why}; include only headers of the CUDA toolkit, the C++ library and "
                          "the problem's own include path, by a relative name", file))
    for m in _FILE_PROBE.finditer(code):
        out.append(_v("file_access", line_of(m.start()),
                      f"{m.group(0).strip()[:40]!r} tests a file outside the include path; not allowed", file))
    joined = re.sub(r'"\s*"', "", code)  # ".inc" "bin" is ".incbin" to the assembler
    seen: set[int] = set()
    for m in _ASM_FILE.finditer(joined):
        line = joined.count("\n", 0, m.start()) + 1 + line_offset
        if line not in seen:
            seen.add(line)
            out.append(_v("file_access", line,
                          f"an assembler directive that reads a file ({m.group(0).strip()!r}); not allowed", file))
    return out


def check_build_flags(flags: Iterable[str]) -> str | None:
    """Why compiler flags a candidate passes (load_inline's ``extra_cflags``,
    ``extra_cuda_cflags``, ``extra_include_paths``, ``extra_ldflags``) are refused, or None:
    an absolute path or ``..`` anywhere, ``-include``/``-imacros``/``--pre-include``
    (read a file first), ``@file`` (a response file)."""
    for flag in flags:
        f = str(flag)
        if f.startswith("@"):
            return f"flag {f!r} reads its arguments from a file"
        if re.match(r"-(include|imacros)\b|--pre-include\b|-FI", f):
            return f"flag {f!r} makes the compiler read a file first"
        for part in re.split(r"[=,\s]", f):
            part = re.sub(r"^-[A-Za-z]+", "", part) if part.startswith("-") else part
            bad = _bad_path(part) if part else None
            if bad:
                return f"flag {f!r} names {bad}"
    return None


def _looks_like_code(text: str) -> bool:
    return any(
        tok in text
        for tok in ("__global__", "#include", "torch::", "at::", 'extern "C"', "__device__", "<<<", "Tensor")
    )


def check_cuda_source(
    cuda_source: str,
    *,
    allow_torch_ops: frozenset[str] = frozenset(),
    allow_lower_precision: bool = False,
    file: str | None = "kernel.cu",
    line_offset: int = 0,
) -> list[GuardViolation]:
    """Check CUDA/C++ text (a ``.cu`` file of the fast format, or a string embedded in the
    Python source) for lower precision and for PyTorch C++ operators doing the work.

    Args:
        cuda_source: the text.
        allow_torch_ops: op names allowed although they do work (see :data:`LIBRARY_OPS`).
        allow_lower_precision: do not report ``lower_precision``.
        file: reported in each violation's ``file`` (``None`` for a string of the Python
            source, whose line numbers are then the Python file's).
        line_offset: added to line numbers (the Python line where an embedded string starts,
            minus one).

    Returns:
        ``file_access`` (:func:`check_includes`), ``lower_precision``, ``torch_fallback``
        and ``patching`` (profiler events written by the C++: ``RECORD_FUNCTION``, NVTX
        ranges) violations, by line.
    """
    code = _strip_c_comments(cuda_source)
    out: list[GuardViolation] = check_includes(cuda_source, file=file, line_offset=line_offset)

    def line_of(offset: int) -> int:
        return code.count("\n", 0, offset) + 1 + line_offset

    if not allow_lower_precision:
        for pat, what in _LP_CUDA_PATTERNS:
            for m in pat.finditer(code):
                out.append(
                    _v(
                        "lower_precision",
                        line_of(m.start()),
                        f"CUDA code uses {m.group(0).strip()} ({what}): the problem is float32; "
                        "compute and accumulate in float (no fp16/bf16/fp8/TF32)",
                        file,
                    )
                )
        for off in _half_type_uses(code):
            out.append(
                _v(
                    "lower_precision",
                    line_of(off),
                    "CUDA code uses the half type: the problem is float32; compute in float",
                    file,
                )
            )
    for m in _CPP_PROFILER_EVENT.finditer(code):
        out.append(
            _v(
                "patching",
                line_of(m.start()),
                f"C++ code writes profiler events ({m.group(1).strip()}): the evaluator reads the "
                "profiler to see which kernels and operators ran; do not annotate it",
                file,
            )
        )
    for m in _CPP_TORCH_CALL.finditer(code):
        ns, path, name = m.group(1), m.group(2), m.group(3)
        if any(path.startswith(p) for p in _CPP_NAMESPACE_OK) or name[:1].isupper():
            continue
        if name in _CPP_OPS_OK or name in allow_torch_ops or name.startswith("k"):
            continue
        out.append(
            _v(
                "torch_fallback",
                line_of(m.start()),
                f"C++ code calls {ns}::{path}{name}: a PyTorch operator does the work; compute it "
                "in your own kernel (allowed: allocation such as torch::empty, views, metadata)",
                file,
            )
        )
    tensors = {a or b for a, b in _CPP_TENSOR_DECL.findall(code)}
    if tensors:
        meth = re.compile(
            r"\b(" + "|".join(re.escape(t) for t in sorted(tensors)) + r")\s*\.\s*(\w+)\s*(?:<[^<>;]*>)?\s*\("
        )
        for m in meth.finditer(code):
            name = m.group(2)
            if name in _CPP_METHODS_OK or name in allow_torch_ops or name not in _TENSOR_METHOD_NAMES:
                continue
            out.append(
                _v(
                    "torch_fallback",
                    line_of(m.start()),
                    f"C++ code calls {m.group(1)}.{name}(): a PyTorch operator does the work on the "
                    "tensor; compute it in your own kernel",
                    file,
                )
            )
    return out


# ---------------------------------------------------------------------------------------
# Python source
# ---------------------------------------------------------------------------------------

_T, _O, _U, _S, _TS, _LT, _LC, _M, _SELF, _METHOD = (
    "T", "O", "U", "S", "TS", "LT", "LC", "M", "SELF", "METHOD"
)


def _is_nn(kind: str) -> bool:
    return kind.startswith("NN:")


def _is_tf(kind: str) -> bool:
    return kind.startswith("TF:")


def _dotted(node: ast.AST) -> str | None:
    """``a.b.c`` for a Name/Attribute chain, else None."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _root_name(node: ast.AST) -> ast.Name | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node if isinstance(node, ast.Name) else None


class _Checker:
    def __init__(
        self,
        tree: ast.Module,
        source: str,
        problem: "TorchProblem | None",
        allow_ops: frozenset[str],
        allow_lp: bool,
    ):
        self.tree = tree
        self.source = source
        self.problem = problem
        self.allow_ops = frozenset(allow_ops)
        self.allow_lp = allow_lp
        self.out: list[GuardViolation] = []
        self.imports: dict[str, str] = {}
        self.module_funcs: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
        self.classes: dict[str, ast.ClassDef] = {}
        self.module_env: dict[str, str] = {}
        self.model_names: set[str] = {"Model"}
        self.modelnew: ast.ClassDef | None = None
        self.attr_kinds: dict[str, str] = {}
        self.methods: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
        self.visited: set[tuple[int, tuple[str, ...]]] = set()
        self.path_funcs: set[int] = set()
        self.ref_modules: set[str] = set()
        if problem is not None:
            self.ref_modules.add(problem.name)

    # -- reporting --------------------------------------------------------------------

    def add(self, guard: str, node: ast.AST | int, message: str) -> None:
        line = node if isinstance(node, int) else getattr(node, "lineno", 1)
        self.out.append(_v(guard, line, message))

    # -- names ------------------------------------------------------------------------

    def collect_imports(self) -> None:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname:
                        self.imports[a.asname] = a.name
                    else:
                        root = a.name.split(".")[0]
                        self.imports[root] = root
            elif isinstance(node, ast.ImportFrom):
                mod = ("." * node.level) + (node.module or "")
                for a in node.names:
                    if a.name == "*":
                        continue
                    self.imports[a.asname or a.name] = f"{mod}.{a.name}" if mod else a.name

    def resolve(self, node: ast.AST) -> str | None:
        """Dotted module path of an expression built from imports (``F.gelu`` ->
        ``torch.nn.functional.gelu``), else None."""
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr":
            if len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
                base = self.resolve(node.args[0])
                return f"{base}.{node.args[1].value}" if base else None
            return None
        d = _dotted(node)
        if d is None:
            return None
        head, _, rest = d.partition(".")
        if head in self.imports:
            full = self.imports[head]
            return f"{full}.{rest}" if rest else full
        if head in ("torch", "builtins", "__builtins__") and head not in self.module_env:
            return d
        return None

    def is_model_ref(self, node: ast.AST) -> bool:
        """The reference Model (a name bound to it, or ``<module>.Model``)."""
        if isinstance(node, ast.Name):
            return node.id in self.model_names
        if isinstance(node, ast.Attribute) and node.attr == "Model":
            return True
        return False

    # -- setup ------------------------------------------------------------------------

    def collect_module(self) -> None:
        for node in self.tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.module_funcs[node.name] = node
            elif isinstance(node, ast.ClassDef):
                self.classes[node.name] = node
        for name, full in self.imports.items():
            if full.endswith(".Model") or (full.split(".")[0] in self.ref_modules and full.endswith("Model")):
                self.model_names.add(name)
        # aliases of Model, module-level kinds (kernel handles, torch function refs)
        changed = True
        while changed:
            changed = False
            for node in self.tree.body:
                if isinstance(node, ast.Assign):
                    for t in node.targets:
                        if isinstance(t, ast.Name) and self.is_model_ref(node.value) and t.id not in self.model_names:
                            self.model_names.add(t.id)
                            changed = True
        env: dict[str, str] = {}
        for node in self.tree.body:
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                kind = self.static_kind(node.value, env)
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    for name in _target_names(t):
                        env[name] = kind if isinstance(t, ast.Name) else (_T if kind in (_T, _LT) else _U)
        self.module_env = env

    def static_kind(self, node: ast.AST, env: Mapping[str, str]) -> str:
        """Kind of an expression without reporting (module level, class attributes)."""
        if isinstance(node, ast.Constant):
            return _O
        if isinstance(node, (ast.List, ast.Tuple, ast.Dict, ast.Set)):
            return _S
        if isinstance(node, ast.Name):
            if node.id in env:
                return env[node.id]
            if node.id in self.module_env:
                return self.module_env[node.id]
            r = self.resolve(node)
            if r and r.startswith("torch.") and not r.startswith("torch.nn.Module"):
                return "TF:" + r
            return _U
        if isinstance(node, ast.Attribute):
            r = self.resolve(node)
            if r is not None:
                if r.startswith("torch."):
                    return "TF:" + r
                return _M
            base = self.static_kind(node.value, env)
            if base in (_LT, _LC):
                return base
            if _is_nn(base):
                return _T if _weight_like(node.attr) else _O
            if base == _SELF:
                return self.attr_kinds.get(node.attr, _U)
            return _U
        if isinstance(node, ast.Call):
            kind = self.build_kind(node)
            if kind:
                return kind
            r = self.resolve(node.func)
            if r:
                if r.startswith("torch.nn.") and r.split(".")[-1][:1].isupper():
                    cls = r.split(".")[-1]
                    if cls in ("Parameter", "Buffer"):
                        return _T
                    if cls in _NN_HOLDERS:
                        return _S
                    return "NN:" + _NN_OP_NAMES.get(cls, cls.lower())
                if r.startswith("torch."):
                    return _T
            if isinstance(node.func, ast.Attribute):
                base = self.static_kind(node.func.value, env)
                if base in (_LT, _LC):
                    return _T if base == _LT else _U
            if isinstance(node.func, ast.Name) and node.func.id in self.module_funcs:
                fk = self._returns_build(self.module_funcs[node.func.id])
                if fk:
                    return fk
            return _U
        return _U

    def _returns_build(self, func: ast.AST) -> str | None:
        for n in ast.walk(func):
            if isinstance(n, ast.Return) and isinstance(n.value, ast.Call):
                k = self.build_kind(n.value)
                if k:
                    return k
        for n in ast.walk(func):
            if isinstance(n, ast.Call):
                k = self.build_kind(n)
                if k:
                    return k
        return None

    def build_kind(self, call: ast.Call) -> str | None:
        """``LT`` for load_inline/load (torch extension), ``LC`` for load_cuda/ctypes."""
        r = self.resolve(call.func) or _dotted(call.func) or ""
        if any(r.endswith(s) for s in _BUILD_SUFFIXES_TORCH):
            return _LT
        if any(r.endswith(s) for s in _BUILD_SUFFIXES_C):
            return _LC
        if isinstance(call.func, ast.Name) and call.func.id in _BUILD_BARE:
            return _BUILD_BARE[call.func.id]
        if isinstance(call.func, ast.Attribute) and call.func.attr == "LoadLibrary":
            return _LC
        return None

    def contains_build(self, nodes: Iterable[ast.AST]) -> bool:
        for top in nodes:
            for n in ast.walk(top):
                if isinstance(n, ast.Call) and self.build_kind(n):
                    return True
                if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in self.module_funcs:
                    if self._returns_build(self.module_funcs[n.func.id]):
                        return True
        return False

    # -- class ModelNew -----------------------------------------------------------------

    def find_modelnew(self) -> None:
        for node in _module_level(self.tree):
            if isinstance(node, ast.ClassDef) and node.name == "ModelNew":
                self.modelnew = node
        if self.modelnew is None:
            for node in _module_level(self.tree):
                if isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "ModelNew" for t in node.targets
                ):
                    if self.is_model_ref(node.value):
                        self.add(
                            "inherits_model",
                            node,
                            "ModelNew is the reference Model itself: write ModelNew(nn.Module) with a forward "
                            "that calls your CUDA kernels",
                        )
                        return
                    if isinstance(node.value, ast.Name) and node.value.id in self.classes:
                        self.modelnew = self.classes[node.value.id]
        if self.modelnew is None:
            self.add(
                "no_modelnew",
                1,
                "no class ModelNew: define class ModelNew(nn.Module) with the same constructor "
                "arguments as Model and a forward that calls your CUDA kernels",
            )

    def class_chain(self, cls: ast.ClassDef, seen: set[str] | None = None) -> list[ast.ClassDef]:
        """The class and its bases defined in this file (method resolution order, roughly)."""
        seen = seen if seen is not None else set()
        if cls.name in seen:
            return []
        seen.add(cls.name)
        out = [cls]
        for b in cls.bases:
            if isinstance(b, ast.Name) and b.id in self.classes and b.id not in self.model_names:
                out += self.class_chain(self.classes[b.id], seen)
        return out

    def check_inheritance(self) -> None:
        assert self.modelnew is not None
        for cls in self.class_chain(self.modelnew):
            for b in cls.bases:
                if self.is_model_ref(b) or (isinstance(b, ast.Name) and b.id == "Model"):
                    via = "" if cls is self.modelnew else f" (through {cls.name})"
                    self.add(
                        "inherits_model",
                        b,
                        f"ModelNew inherits from the reference Model{via}: derive from nn.Module and "
                        "write forward with your own kernels",
                    )
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Call) and self.is_model_ref(node.func):
                self.add(
                    "inherits_model",
                    node,
                    "the candidate creates the reference Model(...): the reference must not run inside "
                    "the candidate; compute the result with your kernels",
                )
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and self.is_model_ref(node.value) and node.attr in (
                "forward", "__call__", "__init__", "__dict__",
            ):
                self.add(
                    "inherits_model",
                    node,
                    f"the candidate uses Model.{node.attr}: the reference's code must not run inside "
                    "the candidate",
                )
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "super"
                and node.args
                and self.is_model_ref(node.args[0])
            ):
                self.add("inherits_model", node, "super(Model, ...) reaches the reference Model's code")

    def collect_attrs(self) -> None:
        assert self.modelnew is not None
        for cls in reversed(self.class_chain(self.modelnew)):
            for item in cls.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    self.methods[item.name] = item
                elif isinstance(item, ast.Assign):
                    kind = self.static_kind(item.value, {})
                    for t in item.targets:
                        if isinstance(t, ast.Name):
                            self.attr_kinds[t.id] = kind
        for name in self.methods:
            self.attr_kinds.setdefault(name, _METHOD)
        for _ in range(2):  # attributes assigned from other attributes
            for func in self.methods.values():
                env: dict[str, str] = {"self": _SELF}
                for node in ast.walk(func):
                    if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                        kind = self.static_kind(node.value, env)
                        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                        for t in targets:
                            if isinstance(t, ast.Name):
                                env[t.id] = kind
                            elif isinstance(t, ast.Attribute) and _is_self(t.value):
                                if self.attr_kinds.get(t.attr) in (None, _U):
                                    self.attr_kinds[t.attr] = kind
                    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and _is_self(node.func.value):
                        if node.func.attr in ("register_buffer", "register_parameter") and node.args:
                            a0 = node.args[0]
                            if isinstance(a0, ast.Constant) and isinstance(a0.value, str):
                                self.attr_kinds[a0.value] = _T
                    elif (
                        isinstance(node, ast.Call)
                        and isinstance(node.func, ast.Name)
                        and node.func.id == "setattr"
                        and len(node.args) == 3
                        and _is_self(node.args[0])
                        and isinstance(node.args[1], ast.Constant)
                        and isinstance(node.args[1].value, str)
                    ):
                        self.attr_kinds[node.args[1].value] = self.static_kind(node.args[2], env)

    # -- forward path -------------------------------------------------------------------

    def check_modelnew(self) -> None:
        assert self.modelnew is not None
        chain = self.class_chain(self.modelnew)
        for cls in chain:
            for item in cls.body:
                if isinstance(item, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id in ("forward", "__call__") for t in item.targets
                ):
                    value = item.value
                    while (
                        isinstance(value, ast.Call)
                        and isinstance(value.func, ast.Name)
                        and value.func.id in ("staticmethod", "classmethod")
                        and value.args
                    ):
                        value = value.args[0]
                    r = self.resolve(value)
                    if r and r.startswith("torch."):
                        self.torch_op(item, r.split(".")[-1], f"forward is {r}")
                    elif self.is_model_ref(getattr(value, "value", value)):
                        self.add("inherits_model", item, "ModelNew.forward is the reference Model's forward")
            for func in cls.body:
                if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    self.check_try(func, f"{cls.name}.{func.name}")
        entry = [self.methods[n] for n in ("forward", "__call__") if n in self.methods]
        assigned = any(
            isinstance(item, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id in ("forward", "__call__") for t in item.targets)
            for cls in chain
            for item in cls.body
        )
        external_base = any(
            not (isinstance(b, ast.Name) and b.id in self.classes)
            and (self.resolve(b) or "") not in ("torch.nn.Module", "torch.nn.modules.module.Module")
            for cls in chain
            for b in cls.bases
        )
        if not entry and not assigned and not external_base:
            self.add(
                "no_modelnew",
                self.modelnew,
                "ModelNew defines no forward: write forward(self, ...) calling your CUDA kernels",
            )
        for func in entry:
            kinds = self.param_kinds(func, is_forward=True)
            self.analyze(func, kinds, is_method=True)

    def param_kinds(self, func: ast.FunctionDef | ast.AsyncFunctionDef, *, is_forward: bool) -> list[str]:
        args = func.args.posonlyargs + func.args.args
        kinds = []
        specs = list(self.problem.inputs) if (self.problem is not None and is_forward) else None
        for i, a in enumerate(args[1:]):
            if specs is not None and i < len(specs) and specs[i].kind != "tensor":
                kinds.append(_O)
            else:
                kinds.append(_T if is_forward else _U)
        return kinds

    def check_try(self, func: ast.AST, where: str) -> None:
        for n in ast.walk(func):
            if isinstance(n, ast.Try) and n.handlers or (
                hasattr(ast, "TryStar") and isinstance(n, ast.TryStar) and n.handlers  # type: ignore[attr-defined]
            ):
                self.add(
                    "try_except_fallback",
                    n,
                    f"try/except in {where}: a fallback could hide a kernel that fails; let errors "
                    "propagate (no try/except around the custom path)",
                )
            elif isinstance(n, (ast.With, ast.AsyncWith)):
                for item in n.items:
                    if self.is_suppress(item.context_expr):
                        self.add(
                            "try_except_fallback",
                            n,
                            f"contextlib.suppress in {where}: errors of the custom path must propagate",
                        )

    def is_suppress(self, node: ast.AST) -> bool:
        f = node.func if isinstance(node, ast.Call) else node
        r = self.resolve(f) or _dotted(f) or ""
        return r.endswith("suppress")

    def analyze(
        self,
        func: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda,
        arg_kinds: list[str],
        *,
        is_method: bool,
    ) -> str:
        """Walk a forward-path function; report; return the kind of its return values."""
        key = (id(func), tuple(arg_kinds))
        if key in self.visited or len(self.visited) > 200:
            return _U
        self.visited.add(key)
        self.path_funcs.add(id(func))
        name = getattr(func, "name", "<lambda>")
        if not isinstance(func, ast.Lambda):
            self.check_decorators(func)
            if not (is_method and self.modelnew is not None and func in self.modelnew.body):
                self.check_try(func, f"{name} (called from forward)")
        fw = _Walker(self, func, is_method)
        args = func.args.posonlyargs + func.args.args
        params = args[1:] if is_method else args
        for i, a in enumerate(params):
            fw.env[a.arg] = arg_kinds[i] if i < len(arg_kinds) else _U
        if is_method and args:
            fw.env[args[0].arg] = _SELF
        if func.args.vararg is not None:
            fw.env[func.args.vararg.arg] = _TS if name == "forward" else _U
        if isinstance(func, ast.Lambda):
            return fw.expr(func.body)
        fw.block(func.body)
        fw.check_cache_keys()
        return fw.return_kind

    def check_decorators(self, func: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for d in func.decorator_list:
            f = d.func if isinstance(d, ast.Call) else d
            r = self.resolve(f) or _dotted(f) or ""
            last = r.split(".")[-1]
            if last in ("lru_cache", "cache", "cached_property", "memoize"):
                self.add(
                    "result_cache",
                    d,
                    f"@{last} on {func.name}: results must be computed on every call, not cached",
                )
            elif r.startswith("torch.") and last not in ("no_grad", "inference_mode", "custom_fwd", "custom_bwd"):
                self.torch_op(d, last, f"@{r} on {func.name}")

    def torch_op(self, node: ast.AST, op: str, what: str) -> None:
        if op in self.allow_ops:
            return
        self.add(
            "torch_fallback",
            node,
            f"{what}: PyTorch does the work, not your kernel; compute it in CUDA (on the forward "
            "path only allocation, views and metadata are allowed: see docs/pytorch-problems.md)",
        )

    # -- whole-file passes ----------------------------------------------------------------

    def check_global(self) -> None:
        for node in ast.walk(self.tree):
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
                targets: list[ast.expr]
                if isinstance(node, ast.Assign):
                    targets = list(node.targets)
                elif isinstance(node, ast.Delete):
                    targets = list(node.targets)
                else:
                    targets = [node.target]
                value = getattr(node, "value", None)
                for t in targets:
                    for sub in _flatten_targets(t):
                        self.check_store(node, sub, value)
            elif isinstance(node, ast.Call):
                self.check_call_global(node)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                self.check_import(node)
            elif isinstance(node, ast.Attribute):
                self.check_lp_attr(node)
            elif isinstance(node, ast.Try) and node.handlers and self.contains_build(node.body):
                self.add(
                    "try_except_fallback",
                    node,
                    "try/except around the kernel build: a failed build must be an error, not a "
                    "silent fallback",
                )
            elif isinstance(node, (ast.With, ast.AsyncWith)) and any(
                self.is_suppress(i.context_expr) for i in node.items
            ) and self.contains_build(node.body):
                self.add(
                    "try_except_fallback",
                    node,
                    "contextlib.suppress around the kernel build: a failed build must be an error",
                )
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                self.check_string(node.value, node.lineno)
            elif isinstance(node, ast.JoinedStr):
                for part in node.values:
                    if isinstance(part, ast.Constant) and isinstance(part.value, str):
                        self.check_string(part.value, node.lineno, joined=True)

    def check_string(self, text: str, lineno: int, joined: bool = False) -> None:
        if not (_looks_like_code(text) or any(p.search(text) for p, _ in _LP_CUDA_PATTERNS[:6])):
            if "#" in text or "incbin" in text:  # a bare include line, a flag list's piece
                self.out += [GuardViolation(v.guard, lineno, v.message, None)
                             for v in check_includes(text, file=None)]
            return
        start_line = lineno
        for v in check_cuda_source(
            text,
            allow_torch_ops=self.allow_ops,
            allow_lower_precision=self.allow_lp,
            file=None,
            line_offset=start_line - 1,
        ):
            if joined:
                v = GuardViolation(v.guard, lineno, v.message, None)
            self.out.append(v)

    def check_store(self, stmt: ast.AST, target: ast.AST, value: ast.AST | None) -> None:
        if not isinstance(target, (ast.Attribute, ast.Subscript)):
            return
        # lower precision settings
        if isinstance(target, ast.Attribute) and value is not None and not self.allow_lp:
            if target.attr in (
                "allow_tf32", "allow_fp16_reduced_precision_reduction",
                "allow_bf16_reduced_precision_reduction", "allow_fp16_accumulation",
            ):
                if not (isinstance(value, ast.Constant) and value.value is False):
                    self.add(
                        "lower_precision",
                        stmt,
                        f"sets {target.attr}: float32 problems must not use TF32/reduced-precision "
                        "math; leave it False",
                    )
            elif target.attr == "fp32_precision":
                if not (isinstance(value, ast.Constant) and value.value in ("ieee", "none")):
                    self.add(
                        "lower_precision",
                        stmt,
                        "sets fp32_precision to something other than 'ieee': float32 problems must "
                        "not use TF32",
                    )
        root = _root_name(target)
        if root is None:
            return
        base = target.value if isinstance(target, ast.Subscript) else target
        chain = self.resolve(base) or ""
        head = chain.split(".")[0] if chain else ""
        is_model = root.id in self.model_names
        globals_store = (
            isinstance(target, ast.Subscript)
            and isinstance(target.value, ast.Call)
            and isinstance(target.value.func, ast.Name)
            and target.value.func.id in ("globals", "vars")
        )
        if head.startswith("torch.backends") or chain.startswith("torch.backends"):
            return
        if chain.startswith("os.environ"):
            return
        if head in _PROTECTED_ROOTS or is_model or globals_store:
            shown = _dotted(target) or (chain + "[...]" if chain else "a protected name")
            what = shown if not isinstance(target, ast.Subscript) else f"{_dotted(target.value) or chain}[...]"
            self.add(
                "patching",
                stmt,
                f"assigns {what}: patching torch (timers, streams, functions), time, sys.modules, "
                "builtins, cudaperf or the reference Model is not allowed",
            )

    def check_build_paths(self, node: ast.Call) -> None:
        """``file_access`` on a torch extension build: flags, include paths, source files
        and the build folder must be literal, relative and free of ``..``
        (:func:`check_build_flags`)."""
        for kw in node.keywords:
            if kw.arg not in _BUILD_PATH_ARGS:
                continue
            parts = [n for n in ast.walk(kw.value) if not isinstance(n, (ast.List, ast.Tuple, ast.Load))]
            if not all(isinstance(n, ast.Constant) and isinstance(n.value, (str, bool, type(None)))
                       for n in parts):
                self.add("file_access", node,
                         f"{kw.arg} of the extension build is computed: write the flags and paths "
                         "literally (strings in a list) so that the guards can read them")
                continue
            why = check_build_flags(n.value for n in parts if isinstance(n.value, str))
            if why:
                self.add("file_access", node, f"{kw.arg} of the extension build: {why}; the build "
                         "may read only the toolkit and relative paths")

    def check_call_global(self, node: ast.Call) -> None:
        f = node.func
        name = f.id if isinstance(f, ast.Name) else None
        r = self.resolve(f) or _dotted(f) or ""
        if self.build_kind(node) == _LT:
            self.check_build_paths(node)
        # setattr / delattr on protected objects
        if name in ("setattr", "delattr") or r.endswith("__setattr__") or r.endswith("__delattr__"):
            target = node.args[0] if node.args else None
            if target is not None:
                tr = self.resolve(target) or ""
                troot = _root_name(target)
                if tr.split(".")[0] in _PROTECTED_ROOTS and not tr.startswith("torch.backends") or (
                    troot is not None and troot.id in self.model_names
                ):
                    self.add(
                        "patching",
                        node,
                        f"{name or r.split('.')[-1]} on {tr or troot.id if troot else 'a module'}: patching "
                        "torch, time, sys, builtins, cudaperf or the reference Model is not allowed",
                    )
                elif (
                    not self.allow_lp
                    and len(node.args) >= 3
                    and isinstance(node.args[1], ast.Constant)
                    and node.args[1].value in ("allow_tf32",)
                ):
                    self.add("lower_precision", node, "enables TF32 through setattr: not allowed for float32 problems")
        # sys.modules / builtins mutation through methods
        if isinstance(f, ast.Attribute) and f.attr in (
            "update", "pop", "setdefault", "clear", "__setitem__", "__delitem__", "popitem",
        ):
            base = self.resolve(f.value) or _dotted(f.value) or ""
            if base in ("sys.modules", "builtins.__dict__", "__builtins__") or (
                isinstance(f.value, ast.Call) and isinstance(f.value.func, ast.Name) and f.value.func.id in ("globals", "vars")
            ):
                self.add("patching", node, f"{base or 'globals()'}.{f.attr}(...): rebinding modules or names is not allowed")
        if r in ("sys.settrace", "sys.setprofile", "threading.settrace", "threading.setprofile"):
            self.add("patching", node, f"{r}: tracing hooks could alter how the evaluation runs; not allowed")
        if r.split(".")[-1] in ("patch", "object") and ("mock" in r or r.endswith("patch")):
            self.add("patching", node, f"{r}(...): monkeypatching is not allowed")
        # dynamic code
        if name in ("exec", "eval", "compile", "__import__") and name not in self.module_funcs:
            self.add(
                "dynamic_code",
                node,
                f"{name}(): code built at run time cannot be checked; write it out in the file",
            )
        elif r in ("importlib.import_module", "importlib.__import__", "builtins.exec", "builtins.eval") or r.startswith(
            ("pickle.load", "marshal.load", "dill.load")
        ):
            self.add("dynamic_code", node, f"{r}(): code or data loaded at run time cannot be checked")
        elif name == "getattr" and len(node.args) >= 2 and not isinstance(node.args[1], ast.Constant):
            base = self.resolve(node.args[0]) or ""
            if base.split(".")[0] in ("torch", "builtins", "time", "sys") or (
                isinstance(node.args[0], ast.Name) and node.args[0].id in self.model_names
            ):
                self.add(
                    "dynamic_code",
                    node,
                    f"getattr({base or 'Model'}, <computed name>): name the function you call",
                )
        # lower precision calls
        if not self.allow_lp:
            if isinstance(f, ast.Attribute) and f.attr in ("half", "bfloat16") and not node.args:
                self.add(
                    "lower_precision",
                    node,
                    f".{f.attr}() converts to a lower precision: the problem is float32; compute in float32",
                )
            if r.endswith("set_float32_matmul_precision"):
                arg = node.args[0] if node.args else None
                if not (isinstance(arg, ast.Constant) and arg.value == "highest"):
                    self.add(
                        "lower_precision",
                        node,
                        "set_float32_matmul_precision other than 'highest' enables TF32/bf16 matmuls: "
                        "not allowed for float32 problems",
                    )
            if isinstance(f, ast.Attribute) and f.attr in ("to", "type", "view") or r.endswith(("empty", "zeros", "tensor")):
                for a in list(node.args) + [k.value for k in node.keywords]:
                    if isinstance(a, ast.Constant) and a.value in ("float16", "half", "bfloat16", "torch.float16", "torch.bfloat16", "torch.half"):
                        self.add("lower_precision", node, f"dtype '{a.value}' is lower than the problem's float32")
        # torch.compile / jit anywhere: PyTorch generates the kernels
        if r in ("torch.compile", "torch.jit.script", "torch.jit.trace", "torch.jit.trace_module") or r.startswith(
            ("torch._dynamo.", "torch._inductor.", "torch.compiler.")
        ):
            self.torch_op(node, r.split(".")[-1], f"{r}(...)")

    def check_import(self, node: ast.Import | ast.ImportFrom) -> None:
        mods: list[str] = []
        if isinstance(node, ast.Import):
            mods = [a.name for a in node.names]
        else:
            base = node.module or ""
            mods = [base] + [f"{base}.{a.name}" for a in node.names]
            if node.level:
                mods = []
        for m in mods:
            if m == "cudaperf_cli" or m.startswith("cudaperf_cli."):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(_ALLOWED_CUDAPERF_IMPORTS):
                    continue
                if any(m == a or m.startswith(a + ".") for a in _ALLOWED_CUDAPERF_IMPORTS):
                    continue
                if isinstance(node, ast.ImportFrom) and node.module == "cudaperf_cli" and all(
                    a.name == "torch_runtime" for a in node.names
                ):
                    continue
                self.add(
                    "patching",
                    node,
                    f"imports {m}: a candidate may only import cudaperf_cli.torch_runtime from cudaperf",
                )
                break
            if m in ("unittest.mock", "mock") or m.startswith("unittest.mock."):
                self.add("patching", node, f"imports {m}: monkeypatching is not allowed")
                break

    def check_lp_attr(self, node: ast.Attribute) -> None:
        if self.allow_lp:
            return
        r = self.resolve(node)
        if r is None:
            return
        parts = r.split(".")
        last = parts[-1]
        if parts[0] != "torch":
            return
        if last in _LOWER_DTYPES or last.startswith(("float8_", "float4_")):
            self.add(
                "lower_precision",
                node,
                f"uses {r}: the problem is float32; compute in float32 (lower precision is not allowed)",
            )
        elif last == "autocast" or ".amp." in r and last in ("autocast", "custom_fwd"):
            self.add(
                "lower_precision",
                node,
                f"uses {r}: autocast runs float32 operators in lower precision; not allowed",
            )

    # -- run --------------------------------------------------------------------------------

    def run(self) -> list[GuardViolation]:
        self.collect_imports()
        self.collect_module()
        self.check_global()
        self.find_modelnew()
        if self.modelnew is not None:
            self.check_inheritance()
            self.collect_attrs()
            self.check_modelnew()
        seen: set[tuple[str, int, str]] = set()
        out = []
        for v in sorted(self.out, key=lambda v: (v.line, GUARD_IDS.index(v.guard) if v.guard in GUARD_IDS else 99)):
            key = (v.guard, v.line, v.message)
            if key not in seen:
                seen.add(key)
                out.append(v)
        return out


def _weight_like(attr: str) -> bool:
    return "weight" in attr or "bias" in attr or attr.startswith("running_") or attr == "in_proj"


def _is_self(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id == "self"


def _target_names(t: ast.AST) -> list[str]:
    if isinstance(t, ast.Name):
        return [t.id]
    if isinstance(t, (ast.Tuple, ast.List)):
        out: list[str] = []
        for e in t.elts:
            out += _target_names(e.value if isinstance(e, ast.Starred) else e)
        return out
    return []


def _flatten_targets(t: ast.AST) -> list[ast.AST]:
    if isinstance(t, (ast.Tuple, ast.List)):
        out: list[ast.AST] = []
        for e in t.elts:
            out += _flatten_targets(e.value if isinstance(e, ast.Starred) else e)
        return out
    return [t]


def _module_level(tree: ast.Module) -> list[ast.stmt]:
    """Top-level statements, including those inside top-level if/try blocks."""
    out: list[ast.stmt] = []
    stack = list(tree.body)
    while stack:
        n = stack.pop(0)
        out.append(n)
        if isinstance(n, ast.If):
            stack += n.body + n.orelse
        elif isinstance(n, ast.Try):
            stack += n.body + n.orelse + n.finalbody
            for h in n.handlers:
                stack += h.body
    return out


_BUILTIN_WORK = frozenset({"abs", "sum", "max", "min", "pow", "round", "divmod", "sorted"})
_BINOP_SYMBOL = {
    ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
    ast.Pow: "**", ast.MatMult: "@", ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^",
    ast.LShift: "<<", ast.RShift: ">>",
}
_ALLOC_TORCH = frozenset(
    {"empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like", "arange"}
)
_ALLOC_METHODS = frozenset({"new_empty", "new_empty_strided", "new_zeros", "new_ones", "new_full"})


class _Walker:
    """Walks one forward-path function in statement order, tracking value kinds."""

    def __init__(self, chk: _Checker, func: ast.AST, is_method: bool):
        self.chk = chk
        self.func = func
        self.is_method = is_method
        self.env: dict[str, str] = {}
        self.globals: set[str] = set()
        self.locals: set[str] = _assigned_names(func)
        self.return_kind = _U
        self.ptr_names: set[str] = set()

    # -- statements ---------------------------------------------------------------------

    def block(self, stmts: Iterable[ast.stmt]) -> None:
        for s in stmts:
            self.stmt(s)

    def stmt(self, s: ast.stmt) -> None:
        chk = self.chk
        if isinstance(s, (ast.Assign, ast.AnnAssign)):
            if s.value is None:
                return
            kind = self.expr(s.value)
            targets = s.targets if isinstance(s, ast.Assign) else [s.target]
            for t in targets:
                self.bind(t, kind, s.value, s)
        elif isinstance(s, ast.AugAssign):
            kind = self.expr(s.value)
            tk = self.expr_quiet(s.target)
            if tk == _T or kind == _T and tk not in (_O, _S):
                sym = _BINOP_SYMBOL.get(type(s.op), "op")
                if tk == _T or kind == _T:
                    chk.torch_op(s, "matmul" if sym == "@" else f"op{sym}", f"'{sym}=' on a tensor")
            self.store_check(s.target, kind, s.value, s)
        elif isinstance(s, ast.Expr):
            self.expr(s.value)
        elif isinstance(s, ast.Return):
            if s.value is not None:
                k = self.expr(s.value)
                if k == _T or self.return_kind == _U:
                    self.return_kind = k
                for n in _returned_elements(s.value):
                    if isinstance(n, ast.Attribute) and _is_self(n.value) and chk.attr_kinds.get(n.attr) not in (_METHOD,):
                        chk.add(
                            "result_cache",
                            s,
                            f"forward returns self.{n.attr}: a result kept between calls; return a "
                            "tensor your kernel wrote in this call",
                        )
        elif isinstance(s, (ast.If, ast.While)):
            self.expr(s.test)
            self.block(s.body)
            self.block(s.orelse)
        elif isinstance(s, (ast.For, ast.AsyncFor)):
            k = self.expr(s.iter)
            self.bind(s.target, _T if k in (_T, _TS) else _U, None, s)
            self.block(s.body)
            self.block(s.orelse)
        elif isinstance(s, (ast.With, ast.AsyncWith)):
            for item in s.items:
                self.expr(item.context_expr)
                if item.optional_vars is not None:
                    self.bind(item.optional_vars, _U, None, s)
            self.block(s.body)
        elif isinstance(s, ast.Try) or type(s).__name__ == "TryStar":
            self.block(s.body)  # type: ignore[attr-defined]
            for h in s.handlers:  # type: ignore[attr-defined]
                self.block(h.body)
            self.block(s.orelse)  # type: ignore[attr-defined]
            self.block(s.finalbody)  # type: ignore[attr-defined]
        elif isinstance(s, ast.Global):
            self.globals.update(s.names)
        elif isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self.env[s.name] = _U
            inner = _Walker(chk, s, False)
            inner.env.update(self.env)
            for a in s.args.args:
                inner.env[a.arg] = _U
            inner.block(s.body)
            inner.check_cache_keys()
        elif isinstance(s, (ast.Raise, ast.Assert)):
            for n in ast.iter_child_nodes(s):
                if isinstance(n, ast.expr):
                    self.expr(n)
        elif isinstance(s, ast.Delete):
            for t in s.targets:
                self.expr_quiet(t)
        elif isinstance(s, ast.Match):  # pragma: no cover - rare
            self.expr(s.subject)
            for case in s.cases:
                self.block(case.body)

    def bind(self, target: ast.AST, kind: str, value: ast.AST | None, stmt: ast.stmt) -> None:
        if isinstance(target, ast.Name):
            self.env[target.id] = kind
            if value is not None and _is_ptr_expr(value, self.ptr_names):
                self.ptr_names.add(target.id)
            if target.id in self.globals:
                self.global_store(target.id, kind, value, stmt)
        elif isinstance(target, (ast.Tuple, ast.List)):
            elem = _T if kind in (_T, _TS, _LT) else (_O if kind == _O else _U)
            if value is not None and isinstance(value, ast.Attribute) and value.attr == "shape":
                elem = _O
            if value is not None and isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in ("size", "stride"):
                elem = _O
            if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts):
                for t, v in zip(target.elts, value.elts):
                    self.bind(t, self.expr_quiet(v), v, stmt)
                return
            for t in target.elts:
                self.bind(t.value if isinstance(t, ast.Starred) else t, elem, None, stmt)
        else:
            self.store_check(target, kind, value, stmt)

    def global_store(self, name: str, kind: str, value: ast.AST | None, stmt: ast.stmt) -> None:
        if kind in (_LT, _LC):
            return
        self.chk.add(
            "result_cache",
            stmt,
            f"forward assigns the module global '{name}': state kept between calls could "
            "cache results; compute on every call",
        )

    def store_check(self, target: ast.AST, kind: str, value: ast.AST | None, stmt: ast.stmt) -> None:
        chk = self.chk
        if isinstance(target, ast.Attribute) and _is_self(target.value):
            if kind in (_LT, _LC) or (value is not None and _is_alloc(chk, value)):
                return
            chk.add(
                "result_cache",
                stmt,
                f"forward stores self.{target.attr}: state kept between calls could cache inputs or "
                "results; compute everything on every call (a kernel handle or an empty buffer may be kept)",
            )
        elif isinstance(target, ast.Subscript):
            base = target.value
            bk = self.expr_quiet(base)
            if isinstance(base, ast.Attribute) and _is_self(base.value):
                chk.add(
                    "result_cache",
                    stmt,
                    f"forward stores into self.{base.attr}[...]: a cache kept between calls; compute on every call",
                )
            elif isinstance(base, ast.Name) and base.id not in self.locals and base.id in chk.module_env:
                chk.add(
                    "result_cache",
                    stmt,
                    f"forward stores into the module global {base.id}[...]: a cache kept between calls",
                )
            elif bk in (_T, _TS):
                chk.torch_op(stmt, "index_put", "indexed assignment into a tensor (a PyTorch copy/fill kernel)")
            self.expr(target.slice)
        elif isinstance(target, ast.Attribute):
            self.expr_quiet(target.value)

    # -- expressions --------------------------------------------------------------------

    def expr_quiet(self, node: ast.AST) -> str:
        """Kind without reporting (already-visited or store contexts)."""
        saved = self.chk.out
        self.chk.out = []
        try:
            return self.expr(node)
        finally:
            self.chk.out = saved

    def expr(self, node: ast.AST) -> str:
        chk = self.chk
        if isinstance(node, ast.Constant):
            return _O
        if isinstance(node, ast.Name):
            if node.id in self.env:
                return self.env[node.id]
            if node.id in chk.module_env:
                return chk.module_env[node.id]
            if node.id in chk.imports:
                r = chk.imports[node.id]
                return "TF:" + r if r.startswith("torch.") else _M
            return _U
        if isinstance(node, ast.Attribute):
            r = chk.resolve(node)
            if r is not None and not (isinstance(node.value, ast.Name) and node.value.id in self.env):
                return "TF:" + r if r.startswith("torch.") else _M
            base = self.expr(node.value)
            if base == _SELF:
                return chk.attr_kinds.get(node.attr, _U)
            if base in (_T,):
                if node.attr in _TENSOR_META_ATTRS:
                    return _O
                if node.attr in _TENSOR_VIEW_ATTRS:
                    return _T
                return _U
            if base in (_LT, _LC):
                return base
            if _is_nn(base):
                return _T if _weight_like(node.attr) else _O
            if base == _O:
                return _O
            return _U
        if isinstance(node, ast.Subscript):
            base = self.expr(node.value)
            self.expr(node.slice)
            if base in (_T, _TS):
                return _T
            if base == _O:
                return _O
            if isinstance(node.value, ast.Attribute) and node.value.attr in ("shape", "stride"):
                return _O
            return _U
        if isinstance(node, ast.Call):
            return self.call(node)
        if isinstance(node, ast.BinOp):
            kl, kr = self.expr(node.left), self.expr(node.right)
            sym = _BINOP_SYMBOL.get(type(node.op), "op")
            if isinstance(node.op, ast.MatMult):
                chk.torch_op(node, "matmul", "'@' (torch.matmul)")
                return _T
            if kl == _T or kr == _T:
                chk.torch_op(node, f"op{sym}", f"'{sym}' on tensors (a PyTorch elementwise kernel)")
                return _T
            return _O if (kl == _O and kr == _O) else _U
        if isinstance(node, ast.UnaryOp):
            k = self.expr(node.operand)
            if k == _T and not isinstance(node.op, ast.Not):
                chk.torch_op(node, "neg", "a unary operator on a tensor (a PyTorch kernel)")
                return _T
            return _O if isinstance(node.op, ast.Not) else k
        if isinstance(node, ast.Compare):
            kinds = [self.expr(node.left)] + [self.expr(c) for c in node.comparators]
            if _T in kinds and not all(isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn)) for op in node.ops):
                chk.torch_op(node, "compare", "a comparison of tensors (a PyTorch kernel)")
                return _T
            return _O
        if isinstance(node, ast.BoolOp):
            for v in node.values:
                self.expr(v)
            return _U
        if isinstance(node, ast.IfExp):
            self.expr(node.test)
            a, b = self.expr(node.body), self.expr(node.orelse)
            return a if a == b else (_T if _T in (a, b) else _U)
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            kinds = [self.expr(e) for e in node.elts]
            return _TS if kinds and all(k == _T for k in kinds) else _S
        if isinstance(node, ast.Dict):
            for k in node.keys:
                if k is not None:
                    self.expr(k)
            for v in node.values:
                self.expr(v)
            return _S
        if isinstance(node, ast.Starred):
            return self.expr(node.value)
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            for gen in node.generators:
                k = self.expr(gen.iter)
                self.bind(gen.target, _T if k in (_T, _TS) else _U, None, ast.Pass())  # type: ignore[arg-type]
                for cond in gen.ifs:
                    self.expr(cond)
            if isinstance(node, ast.DictComp):
                self.expr(node.key)
                self.expr(node.value)
            else:
                elt = self.expr(node.elt)
                return _TS if elt == _T else _S
            return _S
        if isinstance(node, ast.NamedExpr):
            k = self.expr(node.value)
            self.env[node.target.id] = k
            return k
        if isinstance(node, ast.JoinedStr):
            return _O
        if isinstance(node, ast.Lambda):
            return _U
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                self.expr(child)
        return _U

    def call(self, node: ast.Call) -> str:
        chk = self.chk
        f = node.func
        arg_kinds = [self.expr(a) for a in node.args]
        for k in node.keywords:
            self.expr(k.value)

        bk = chk.build_kind(node)
        if bk:
            return bk
        # a name bound in this function (kernel function, nn layer, torch function ref)
        if isinstance(f, ast.Name) and f.id in self.env:
            k = self.env[f.id]
            return self._call_kind(node, k, f.id, arg_kinds)
        r = None
        if not (isinstance(f, ast.Attribute) and isinstance(_root_name(f), ast.Name) and _root_name(f).id in self.env):  # type: ignore[union-attr]
            r = chk.resolve(f)
        if r is not None:
            return self.resolved_call(node, r, arg_kinds)
        if isinstance(f, ast.Name):
            name = f.id
            if name in ("id", "hash"):
                chk.add(
                    "result_cache",
                    node,
                    f"{name}() in forward: object identity/hash is how results get cached by input; "
                    "compute on every call",
                )
                return _O
            if name in _BUILTIN_WORK and _T in arg_kinds:
                chk.torch_op(node, name, f"{name}() on a tensor (PyTorch does the work)")
                return _T
            if name in chk.module_funcs:
                return chk.analyze(chk.module_funcs[name], arg_kinds, is_method=False)
            if name in chk.module_env:
                return self._call_kind(node, chk.module_env[name], name, arg_kinds)
            if name in ("len", "int", "float", "bool", "str", "range", "isinstance", "print", "min", "max", "abs", "round", "sum"):
                return _O
            if name in ("list", "tuple"):
                return _TS if arg_kinds and arg_kinds[0] in (_T, _TS) else _S
            return _U
        if isinstance(f, ast.Attribute):
            # super().forward(...) and friends: inheritance is checked elsewhere
            base_node = f.value
            if isinstance(base_node, ast.Call) and isinstance(base_node.func, ast.Name) and base_node.func.id == "super":
                return _U
            if chk.is_model_ref(base_node):
                return _U  # reported by check_inheritance
            bk2 = self.expr(base_node)
            if bk2 == _SELF:
                ak = chk.attr_kinds.get(f.attr, _U)
                if ak == _METHOD and f.attr in chk.methods:
                    return chk.analyze(chk.methods[f.attr], arg_kinds, is_method=True)
                return self._call_kind(node, ak, f"self.{f.attr}", arg_kinds)
            if bk2 == _LT:
                return _T
            if bk2 == _LC:
                return _U
            if _is_nn(bk2) or _is_tf(bk2):
                return self._call_kind(node, bk2, _dotted(f) or f.attr, arg_kinds)
            if bk2 == _M:
                return _U
            if bk2 in (_T, _U, _TS):
                return self.tensor_method(node, f.attr, bk2)
            if bk2 == _S and f.attr in _MUTATORS:
                return _U
            return _U
        # calling the result of a call: nn.ReLU()(x), getattr(...)(...)
        inner = self.expr(f)
        return self._call_kind(node, inner, "a callable", arg_kinds)

    def _call_kind(self, node: ast.Call, kind: str, shown: str, arg_kinds: list[str]) -> str:
        chk = self.chk
        if kind == _LT:
            return _T
        if kind == _LC:
            return _U
        if _is_nn(kind):
            op = kind[3:]
            chk.torch_op(node, op, f"{shown}(...) runs a torch.nn layer ({op})")
            return _T
        if _is_tf(kind):
            return self.resolved_call(node, kind[3:], arg_kinds, shown=shown)
        return _U

    def resolved_call(self, node: ast.Call, r: str, arg_kinds: list[str], shown: str | None = None) -> str:
        chk = self.chk
        parts = r.split(".")
        last = parts[-1]
        shown = shown or r
        if parts[0] != "torch":
            if r.endswith("suppress"):
                return _U
            return _O if parts[0] in ("math", "ctypes", "operator") else _U
        if len(parts) >= 2 and parts[1] in ("cuda", "backends", "library", "utils", "version", "distributed"):
            if parts[1] == "cuda" and (len(parts) > 2 and parts[2] in ("amp",)):
                return _U
            return _U
        if len(parts) >= 2 and parts[1] == "ops":
            ns = parts[2] if len(parts) > 2 else ""
            if ns in ("aten", "prims", "quantized", "torchvision", "") or ns.startswith("_"):
                chk.torch_op(node, parts[3] if len(parts) > 3 else ns, f"{shown}(...)")
            return _T
        if len(parts) >= 3 and parts[1] == "nn" and last[:1].isupper():
            if last in ("Parameter", "Buffer"):
                return _T
            op = _NN_OP_NAMES.get(last, last.lower())
            chk.torch_op(node, op, f"{shown}(...) builds a torch.nn layer inside forward")
            return "NN:" + op
        if len(parts) == 2 and last in ALLOWED_TORCH_FUNCTIONS:
            return _O if last in ("numel", "is_tensor", "is_floating_point", "get_default_dtype", "is_grad_enabled", "finfo", "iinfo", "device", "Size", "dtype") else _T
        if last in ("no_grad", "inference_mode", "set_grad_enabled", "autocast"):
            return _U  # autocast is reported as lower_precision
        chk.torch_op(node, last, f"{shown}(...)")
        return _T

    def tensor_method(self, node: ast.Call, name: str, recv: str) -> str:
        chk = self.chk
        if name == "to":
            for a in list(node.args) + [k.value for k in node.keywords if k.arg in ("dtype", None)]:
                r = chk.resolve(a) or ""
                dt = r.split(".")[-1] if r.startswith("torch.") else ""
                if dt and dt not in ("float32", "float") and (dt in _HIGHER_OR_OTHER_DTYPES):
                    chk.torch_op(node, "to", f".to({r}) converts the dtype with a PyTorch kernel")
            return _T if recv != _U else _U
        if name in ALLOWED_TENSOR_METHODS:
            return _O if name in _META_METHODS else (_T if recv in (_T, _TS) or name in _ALLOC_METHODS else _U)
        if name in ("cpu", "numpy", "tolist"):
            if recv in (_T, _U):
                chk.torch_op(node, name, f".{name}() moves data to the host (the work must run in your kernel)")
            return _U
        if name in _TENSOR_WORK_METHODS and (recv in (_T, _TS) or name not in _PY_METHOD_NAMES):
            if name in ("half", "bfloat16"):
                return _T  # lower_precision reports it
            chk.torch_op(node, name, f"tensor method .{name}()")
            return _T
        return _U

    # -- cache keys ---------------------------------------------------------------------

    def check_cache_keys(self) -> None:
        """data_ptr()/_cdata/_version used as a key or compared, or container mutation on
        self/module globals, anywhere in this function."""
        chk = self.chk
        parents: dict[int, ast.AST] = {}
        for p in ast.walk(self.func):
            for c in ast.iter_child_nodes(p):
                parents[id(c)] = p
        for n in ast.walk(self.func):
            if isinstance(n, ast.Attribute) and n.attr in ("_cdata", "_version", "_base"):
                chk.add("result_cache", n, f".{n.attr} identifies a tensor between calls; compute on every call")
            is_ptr = (
                isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("data_ptr", "untyped_storage", "storage")
            ) or (isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in self.ptr_names)
            if is_ptr and _used_as_key(n, parents):
                chk.add(
                    "result_cache",
                    n,
                    "a tensor address (data_ptr) used as a key or compared: results cached by input "
                    "address are refused; compute on every call",
                )
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in _MUTATORS:
                base = n.func.value
                if isinstance(base, ast.Attribute) and _is_self(base.value):
                    chk.add(
                        "result_cache",
                        n,
                        f"forward mutates self.{base.attr} (.{n.func.attr}): a cache kept between calls",
                    )
                elif isinstance(base, ast.Name) and base.id not in self.locals and base.id in chk.module_env:
                    chk.add(
                        "result_cache",
                        n,
                        f"forward mutates the module global {base.id} (.{n.func.attr}): a cache kept between calls",
                    )


def _assigned_names(func: ast.AST) -> set[str]:
    out: set[str] = set()
    args = getattr(func, "args", None)
    if args is not None:
        for a in args.posonlyargs + args.args + args.kwonlyargs:
            out.add(a.arg)
        if args.vararg:
            out.add(args.vararg.arg)
        if args.kwarg:
            out.add(args.kwarg.arg)
    for n in ast.walk(func):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            out.add(n.id)
    return out


def _returned_elements(node: ast.AST) -> list[ast.AST]:
    if isinstance(node, (ast.Tuple, ast.List)):
        return list(node.elts)
    return [node]


def _is_alloc(chk: _Checker, value: ast.AST) -> bool:
    if not isinstance(value, ast.Call):
        return False
    r = chk.resolve(value.func) or ""
    if r.startswith("torch.") and r.split(".")[-1] in _ALLOC_TORCH and len(r.split(".")) == 2:
        return True
    return isinstance(value.func, ast.Attribute) and value.func.attr in _ALLOC_METHODS


def _is_ptr_expr(value: ast.AST, ptr_names: set[str]) -> bool:
    for n in ast.walk(value):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "data_ptr":
            # data_ptr() passed straight into a call (a kernel launch) is not a key
            return not (isinstance(value, ast.Call) and n is not value)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("id", "hash"):
            return True
        if isinstance(n, ast.Name) and n.id in ptr_names:
            return True
    return False


def _used_as_key(node: ast.AST, parents: Mapping[int, ast.AST]) -> bool:
    child = node
    p = parents.get(id(child))
    while p is not None and not isinstance(p, ast.stmt):
        if isinstance(p, ast.Compare):
            return True
        if isinstance(p, ast.Subscript) and child is p.slice:
            return True
        if isinstance(p, ast.Dict) and child in p.keys:
            return True
        if isinstance(p, (ast.Set, ast.SetComp)):
            return True
        if isinstance(p, ast.Call):
            if isinstance(p.func, ast.Attribute) and p.func.attr in (
                "get", "setdefault", "pop", "__contains__", "__getitem__", "__setitem__", "add", "append", "index", "count",
            ):
                return True
            return False  # an argument of a call (a kernel launch): fine
        child, p = p, parents.get(id(p))
    if isinstance(p, (ast.Assign, ast.AnnAssign)):
        targets = p.targets if isinstance(p, ast.Assign) else [p.target]
        return any(isinstance(t, (ast.Attribute, ast.Subscript)) for t in targets)
    return False


def check_candidate_source(
    py_source: str,
    *,
    problem: "TorchProblem | None" = None,
    allow_torch_ops: frozenset[str] = frozenset(),
    allow_lower_precision: bool = False,
    cuda_sources: Mapping[str, str] | None = None,
) -> list[GuardViolation]:
    """Static guards on a PyTorch candidate (Python source with ``class ModelNew``).

    Args:
        py_source: the candidate's Python source (never executed).
        problem: the loaded problem, when known: ``forward``'s number inputs
            (``TensorSpec.kind != "tensor"``) are then not taken for tensors, and imports
            of the problem's module name count as the reference.
        allow_torch_ops: op names allowed on the forward path although they do work --
            meant for library operators (:data:`LIBRARY_OPS`: ``matmul``, ``mm``,
            ``bmm``, ``addmm``, ``linear``, ``conv2d``...); ``"matmul"`` also allows
            ``@``.  Empty by default (strict).
        allow_lower_precision: do not report ``lower_precision``.
        cuda_sources: separate CUDA files of the candidate (the fast format's
            ``kernel.cu``), name -> text, checked with :func:`check_cuda_source`.

    Returns:
        The violations sorted by line (empty: the candidate passes the static guards).
        Each has a stable ``guard`` id from :data:`GUARD_IDS`, a ``line`` and a one-line
        ``message``.  Never raises on bad input: a syntax error is a ``syntax``
        violation.
    """
    try:
        tree = ast.parse(py_source)
    except SyntaxError as exc:
        return [
            _v(
                "syntax",
                exc.lineno or 1,
                f"the Python source does not parse: {exc.msg}",
            )
        ]
    except (ValueError, TypeError) as exc:  # null bytes and the like
        return [_v("syntax", 1, f"the Python source does not parse: {exc}")]
    out = _Checker(tree, py_source, problem, frozenset(allow_torch_ops), allow_lower_precision).run()
    for name, text in (cuda_sources or {}).items():
        out += check_cuda_source(
            text,
            allow_torch_ops=frozenset(allow_torch_ops),
            allow_lower_precision=allow_lower_precision,
            file=name,
        )
    return out
