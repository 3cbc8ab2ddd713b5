"""Static guards on PyTorch candidates (cudaperf_cli.evaluate.static_guards): CPU only, no torch.

Every guard id has a cheating candidate file in tests/data/torch_cheats/static_<guard>.py
that must be refused with that id; the clean candidates (both formats) must pass.  The
parametrised snippets below cover each pattern the module documents, and the legitimate
code a real candidate writes (shape arithmetic, lazy builds, launches with data_ptr(),
views) must not be refused.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from cudaperf_cli.evaluate.static_guards import (
    ALLOWED_TENSOR_METHODS,
    ALLOWED_TORCH_FUNCTIONS,
    GUARD_DESCRIPTIONS,
    GUARD_IDS,
    LIBRARY_OPS,
    GuardViolation,
    check_candidate_source,
    check_cuda_source,
)
from cudaperf_cli.problems.pytorch import TensorSpec, TorchProblem

DATA = Path(__file__).parent / "data" / "torch_cheats"

HEADER = """\
import contextlib
import functools
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from cudaperf_cli.torch_runtime import load_cuda

lib = load_cuda("kernel.cu")
"""


CLEAN_MODELNEW = """

class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        lib.k(x, y, x.numel())
        return y
"""


def module(body: str) -> str:
    """A candidate: the common imports, then ``body`` (dedented), then a clean ModelNew
    unless ``body`` defines one."""
    text = HEADER + "\n" + textwrap.dedent(body)
    if "class ModelNew" not in text and "ModelNew =" not in text:
        text += CLEAN_MODELNEW
    return text


def forward(body: str, init: str = "pass", extra: str = "") -> str:
    """A candidate whose ModelNew.forward(self, x) has ``body``."""
    init_block = textwrap.indent(textwrap.dedent(init), " " * 8)
    fwd_block = textwrap.indent(textwrap.dedent(body), " " * 8)
    return (
        HEADER
        + "\n"
        + textwrap.dedent(extra)
        + "\n\nclass ModelNew(nn.Module):\n"
        + "    def __init__(self, *args):\n"
        + "        super().__init__()\n"
        + init_block
        + "\n\n    def forward(self, x):\n"
        + fwd_block
        + "\n"
    )


def guards(source: str, **kw) -> set[str]:
    return {v.guard for v in check_candidate_source(source, **kw)}


# ---------------------------------------------------------------------------------------
# Files: one cheat per guard, clean candidates in both formats
# ---------------------------------------------------------------------------------------

CHEAT_FILES = sorted(DATA.glob("static_*.py"))


def test_every_guard_has_a_cheat_file():
    have = {p.stem[len("static_"):] for p in CHEAT_FILES}
    assert set(GUARD_IDS) <= have, f"missing cheat files for {set(GUARD_IDS) - have}"
    assert set(GUARD_DESCRIPTIONS) == set(GUARD_IDS)


@pytest.mark.parametrize("path", CHEAT_FILES, ids=lambda p: p.stem)
def test_cheat_file_is_refused_with_its_guard(path: Path):
    guard = path.stem[len("static_"):]
    found = check_candidate_source(path.read_text())
    assert guard in {v.guard for v in found}, found
    for v in found:
        assert v.guard in GUARD_IDS
        assert v.line >= 1
        assert "\n" not in v.message and len(v.message) < 400


def test_clean_load_inline_candidate_passes():
    assert check_candidate_source((DATA / "clean_inline.py").read_text()) == []


def test_clean_fast_format_candidate_passes_with_its_cu_file():
    found = check_candidate_source(
        (DATA / "clean_fast.py").read_text(),
        cuda_sources={"clean_fast.cu": (DATA / "clean_fast.cu").read_text()},
    )
    assert found == []


def test_violation_fields_and_text():
    [v] = check_candidate_source((DATA / "static_patching.py").read_text())
    assert isinstance(v, GuardViolation)
    assert (v.guard, v.line, v.file) == ("patching", 10, None)
    assert "torch.cuda.Event.elapsed_time" in v.message
    assert str(v).startswith("[patching] line 10: ")
    assert v.to_json()["guard"] == "patching"


# ---------------------------------------------------------------------------------------
# Patterns per guard
# ---------------------------------------------------------------------------------------

CHEATS: list[tuple[str, str, str]] = [
    # no_modelnew
    ("no_modelnew", "empty file", "import torch\n"),
    ("no_modelnew", "no forward", module("class ModelNew(nn.Module):\n    pass\n")),
    # inherits_model
    ("inherits_model", "direct base", module("from ref import Model\nclass ModelNew(Model):\n    pass\n")),
    ("inherits_model", "import alias", module("from ref import Model as R\nclass ModelNew(R):\n    def forward(self, x):\n        return super().forward(x)\n")),
    ("inherits_model", "module attribute", module("import ref\nclass ModelNew(ref.Model):\n    pass\n")),
    ("inherits_model", "through a middle class", module("class Mid(Model):\n    pass\nclass ModelNew(Mid):\n    pass\n")),
    ("inherits_model", "ModelNew = Model", module("from ref import Model\nModelNew = Model\n")),
    ("inherits_model", "creates Model", forward("return self.ref(x)", init="self.ref = Model(*args)")),
    ("inherits_model", "calls Model.forward", forward("return Model.forward(self, x)")),
    # try_except_fallback
    ("try_except_fallback", "try in forward", forward("try:\n    lib.k(x)\nexcept RuntimeError:\n    pass\nreturn x")),
    ("try_except_fallback", "suppress in forward", forward("y = torch.empty_like(x)\nwith contextlib.suppress(Exception):\n    lib.k(x, y)\nreturn y")),
    ("try_except_fallback", "try in a helper", forward("return run(x)", extra="def run(x):\n    y = torch.empty_like(x)\n    try:\n        lib.k(x, y)\n    except Exception:\n        return x\n    return y\n")),
    ("try_except_fallback", "try in __init__", forward("return x", init="try:\n    self.k = load_cuda('k.cu')\nexcept Exception:\n    self.k = None")),
    ("try_except_fallback", "module-level try around the build", module("try:\n    lib2 = load_cuda('k.cu')\nexcept Exception:\n    lib2 = None\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x\n")),
    ("try_except_fallback", "try around load_inline in a function", module("from torch.utils.cpp_extension import load_inline\ndef build():\n    try:\n        return load_inline(name='a', cpp_sources='')\n    except Exception:\n        return None\next = build()\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return ext.f(x)\n")),
    ("try_except_fallback", "suppress around the build", module("from contextlib import suppress\nwith suppress(Exception):\n    lib3 = load_cuda('k.cu')\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x\n")),
    # patching
    ("patching", "torch.cuda.synchronize", module("torch.cuda.synchronize = lambda *a: None\n")),
    ("patching", "torch.cuda.Event", module("class E: pass\ntorch.cuda.Event = E\n")),
    ("patching", "current_stream", module("torch.cuda.current_stream = lambda *a: None\n")),
    ("patching", "setattr on torch.cuda", module("setattr(torch.cuda, 'synchronize', lambda: None)\n")),
    ("patching", "time.perf_counter", module("time.perf_counter = lambda: 0.0\n")),
    ("patching", "time alias", module("import time as t\nt.time = lambda: 0.0\n")),
    ("patching", "sys.modules item", module("sys.modules['torch.nn.functional'] = object()\n")),
    ("patching", "sys.modules.update", module("sys.modules.update({'x': None})\n")),
    ("patching", "builtins", module("import builtins\nbuiltins.print = len\n")),
    ("patching", "cudaperf import", module("import cudaperf_cli.evaluate.timing as timing\n")),
    ("patching", "cudaperf from-import", module("from cudaperf_cli.evaluate import worker\n")),
    ("patching", "cudaperf attribute", module("import cudaperf_cli\ncudaperf_cli.evaluate = None\n")),
    ("patching", "F.softmax rebound", module("F.softmax = lambda x, dim: x\n")),
    ("patching", "reference forward rebound", module("from ref import Model\nModel.forward = lambda self, x: x\n")),
    ("patching", "mock.patch", module("from unittest import mock\nmock.patch('time.time', lambda: 0)\n")),
    ("patching", "settrace", module("sys.settrace(lambda *a: None)\n")),
    ("patching", "delattr", module("delattr(torch.cuda, 'Event')\n")),
    ("patching", "object.__setattr__", module("object.__setattr__(torch.cuda, 'synchronize', len)\n")),
    ("patching", "globals()", module("globals()['torch'] = None\n")),
    # lower_precision
    ("lower_precision", ".half()", forward("return lib.k(x.half())")),
    ("lower_precision", ".bfloat16()", forward("return lib.k(x.bfloat16())")),
    ("lower_precision", "torch.float16", forward("y = torch.empty(x.shape, dtype=torch.float16, device=x.device)\nlib.k(x, y)\nreturn y")),
    ("lower_precision", "torch.half", forward("return x.to(torch.half)")),
    ("lower_precision", "torch.bfloat16", module("DT = torch.bfloat16\n")),
    ("lower_precision", "float8", module("DT = torch.float8_e4m3fn\n")),
    ("lower_precision", "autocast", forward("with torch.autocast('cuda'):\n    y = lib.k(x)\nreturn y")),
    ("lower_precision", "cuda.amp.autocast", forward("with torch.cuda.amp.autocast():\n    y = lib.k(x)\nreturn y")),
    ("lower_precision", "allow_tf32 matmul", module("torch.backends.cuda.matmul.allow_tf32 = True\n")),
    ("lower_precision", "allow_tf32 cudnn", module("torch.backends.cudnn.allow_tf32 = True\n")),
    ("lower_precision", "fp32_precision", module("torch.backends.cuda.matmul.fp32_precision = 'tf32'\n")),
    ("lower_precision", "matmul precision high", module("torch.set_float32_matmul_precision('high')\n")),
    ("lower_precision", "CUDA __nv_bfloat16", module('SRC = """__global__ void k(__nv_bfloat16* x) {}"""\n')),
    ("lower_precision", "CUDA half2", module('SRC = """__global__ void k(float* x) { half2 v; }"""\n')),
    ("lower_precision", "CUDA half pointer", module('SRC = """__global__ void k(const half* x, float* y) {}"""\n')),
    ("lower_precision", "CUDA wmma tf32", module('SRC = """#include <mma.h>\nwmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> a;"""\n')),
    ("lower_precision", "PTX f16", module('SRC = """__device__ void f() { asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v)); }"""\n')),
    ("lower_precision", "C++ kHalf", module('SRC = """torch::Tensor f(torch::Tensor x) { return x.to(torch::kHalf); }"""\n')),
    # torch_fallback
    ("torch_fallback", "F.gelu", forward("return F.gelu(x)")),
    ("torch_fallback", "torch.matmul", forward("return torch.matmul(x, x)")),
    ("torch_fallback", "tensor method sum", forward("return x.sum(dim=1)")),
    ("torch_fallback", "tensor method exp", forward("y = x.exp()\nreturn y")),
    ("torch_fallback", "matmul operator", forward("return x @ x")),
    ("torch_fallback", "add after the kernel", forward("y = torch.empty_like(x)\nlib.k(x, y)\nreturn y + 1.0")),
    ("torch_fallback", "add to a parameter", forward("y = self.ext.k(x)\nreturn y * self.w", init="self.w = nn.Parameter(torch.ones(4))\nself.ext = torch.utils.cpp_extension.load_inline(name='a', cpp_sources='')")),
    ("torch_fallback", "in-place add", forward("x += 1\nreturn x")),
    ("torch_fallback", "unary minus", forward("return -x")),
    ("torch_fallback", "comparison mask", forward("y = torch.empty_like(x)\ny[x < 0] = 0\nreturn y")),
    ("torch_fallback", "nn layer call", forward("return self.conv(x)", init="self.conv = nn.Conv2d(3, 3, 3)")),
    ("torch_fallback", "nn layer built in forward", forward("return nn.ReLU()(x)")),
    ("torch_fallback", "torch function stored on self", forward("return self.act(x)", init="self.act = F.gelu")),
    ("torch_fallback", "from-import", module("from torch import sigmoid\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return sigmoid(x)\n")),
    ("torch_fallback", "aten op", forward("return torch.ops.aten.relu(x)")),
    ("torch_fallback", "host round trip", forward("return torch.from_numpy(x.cpu().numpy())")),
    ("torch_fallback", "dtype conversion", forward("return lib.k(x.to(torch.float64))")),
    ("torch_fallback", "builtin abs", forward("return abs(x)")),
    ("torch_fallback", "helper function", forward("return helper(x)", extra="def helper(t):\n    return torch.exp(t)\n")),
    ("torch_fallback", "helper method", module("class ModelNew(nn.Module):\n    def forward(self, x):\n        return self._go(x)\n    def _go(self, x):\n        return x.clamp(min=0)\n")),
    ("torch_fallback", "torch.compile", module("class ModelNew(nn.Module):\n    def forward(self, x):\n        return x\nModelNew = torch.compile(ModelNew)\n")),
    ("torch_fallback", "jit decorator", module("class ModelNew(nn.Module):\n    @torch.jit.script_method\n    def forward(self, x):\n        return x\n")),
    ("torch_fallback", "getattr constant", forward("return getattr(torch, 'relu')(x)")),
    ("torch_fallback", "forward = torch fn", module("class ModelNew(nn.Module):\n    forward = staticmethod(torch.relu)\n")),
    ("torch_fallback", "C++ torch::matmul", module('SRC = """torch::Tensor f(torch::Tensor a, torch::Tensor b) { return torch::matmul(a, b); }"""\n')),
    ("torch_fallback", "C++ at::softmax", module('SRC = """at::Tensor f(at::Tensor a) { return at::softmax(a, 1); }"""\n')),
    ("torch_fallback", "C++ tensor method", module('SRC = """torch::Tensor f(torch::Tensor a) { auto y = torch::empty_like(a); return a.sum(1); }"""\n')),
    ("torch_fallback", "varargs input", module("class ModelNew(nn.Module):\n    def forward(self, *inputs):\n        return inputs[0].relu()\n")),
    # result_cache
    ("result_cache", "id() key", forward("k = id(x)\nreturn self.c[k]")),
    ("result_cache", "data_ptr comparison", forward("if x.data_ptr() == self.ptr:\n    return self.y\ny = torch.empty_like(x)\nlib.k(x, y)\nreturn y")),
    ("result_cache", "self store of the result", forward("y = torch.empty_like(x)\nlib.k(x, y)\nself.last = y\nreturn y")),
    ("result_cache", "self store of the input", forward("self.x = x\ny = torch.empty_like(x)\nlib.k(x, y)\nreturn y")),
    ("result_cache", "call counter", forward("self.calls += 1\ny = torch.empty_like(x)\nlib.k(x, y)\nreturn y")),
    ("result_cache", "returns self attribute", forward("lib.k(x, self.out)\nreturn self.out")),
    ("result_cache", "module dict", forward("y = torch.empty_like(x)\nlib.k(x, y)\n_C[x.shape] = y\nreturn y", extra="_C = {}\n")),
    ("result_cache", "module list append", forward("y = torch.empty_like(x)\nlib.k(x, y)\n_L.append(y)\nreturn y", extra="_L = []\n")),
    ("result_cache", "global statement", forward("global _LAST\ny = torch.empty_like(x)\nlib.k(x, y)\n_LAST = y\nreturn y", extra="_LAST = None\n")),
    ("result_cache", "lru_cache helper", forward("return run(x.shape[0])", extra="@functools.lru_cache(maxsize=None)\ndef run(n):\n    return n\n")),
    ("result_cache", "self container update", forward("y = torch.empty_like(x)\nlib.k(x, y)\nself.seen.update({1: y})\nreturn y")),
    ("result_cache", "_version", forward("v = x._version\ny = torch.empty_like(x)\nlib.k(x, y)\nreturn y")),
    # dynamic_code
    ("dynamic_code", "eval", module("f = eval('lambda x: x')\n")),
    ("dynamic_code", "__import__", module("t = __import__('torch')\n")),
    ("dynamic_code", "importlib", module("import importlib\nt = importlib.import_module('torch')\n")),
    ("dynamic_code", "computed getattr on torch", forward("return getattr(torch, 're' + 'lu')(x)")),
    ("dynamic_code", "pickle", module("import pickle\nR = pickle.loads(b'')\n")),
    # file_access
    ("file_access", "include of an absolute path", module(
        'SRC = """\n#include <cuda_runtime.h>\n#include "/etc/passwd"\n__global__ void k() {}\n"""\n')),
    ("file_access", "include with ..", module('SRC = "#include \\"../../.ssh/id_rsa\\"\\n"\n')),
    ("file_access", "include path flag", module(
        "from torch.utils.cpp_extension import load_inline\n"
        "lib = load_inline(name='m', cpp_sources='', extra_include_paths=['/home'])\n")),
    ("file_access", "-include flag", module(
        "from torch.utils.cpp_extension import load_inline\n"
        "lib = load_inline(name='m', cpp_sources='', extra_cuda_cflags=['-include', '/etc/passwd'])\n")),
    # syntax
    ("syntax", "syntax error", "class ModelNew(:\n"),
]


@pytest.mark.parametrize("guard,label,source", CHEATS, ids=[f"{g}:{label}" for g, label, _ in CHEATS])
def test_pattern_is_refused(guard: str, label: str, source: str):
    found = check_candidate_source(source)
    # that guard, and nothing else (the snippets hold one pattern each)
    assert {v.guard for v in found} == {guard}, (label, found)


def test_every_guard_has_patterns():
    assert {g for g, _, _ in CHEATS} == set(GUARD_IDS)


# ---------------------------------------------------------------------------------------
# Legitimate code that must pass
# ---------------------------------------------------------------------------------------

CLEAN: list[tuple[str, str]] = [
    ("shape arithmetic", forward(
        "x = x.contiguous()\nrows, cols = x.shape\nn = x.size(0) * x.size(1)\nblocks = (n + 255) // 256\n"
        "if x.dim() != 2 or cols % 4 != 0:\n    raise ValueError('bad shape')\nassert x.shape[-1] == cols\n"
        "y = torch.empty_like(x)\nlib.k(x, y, n, blocks)\nreturn y")),
    ("data_ptr launches", forward(
        "y = x.new_empty(x.shape)\nstream = torch.cuda.current_stream().cuda_stream\n"
        "lib.k(x.data_ptr(), y.data_ptr(), x.numel(), stream)\nreturn y")),
    ("lazy build", forward(
        "if self._lib is None:\n    self._lib = load_cuda('kernel.cu')\ny = torch.empty_like(x)\nself._lib.k(x, y)\nreturn y",
        init="self._lib = None")),
    ("workspace buffer", forward(
        "self._tmp = torch.empty(x.shape[0], device=x.device)\ny = torch.zeros_like(x)\nlib.k(x, self._tmp, y)\nreturn y")),
    ("views", forward(
        "y = torch.empty_like(x)\nlib.k(x.view(-1), y.view(-1), x.numel())\n"
        "return y.reshape(x.shape[0], -1).permute(1, 0).unsqueeze(0).squeeze(0).transpose(0, 1)")),
    ("float() and to(device)", forward(
        "x = x.float().to(x.device).cuda()\ny = torch.empty_like(x)\nlib.k(x, y)\nreturn y")),
    ("weights of an nn layer passed to a kernel", forward(
        "n, c, h, w = x.shape\nho = h + 2 * self.conv.padding[0] - 2\ny = torch.empty(n, self.conv.out_channels, ho, ho, device=x.device)\n"
        "lib.conv(x, self.conv.weight, self.conv.bias, y)\nreturn y",
        init="self.conv = nn.Conv2d(3, 8, 3, padding=1)")),
    ("environment and settings", module(
        "os.environ['TORCH_CUDA_ARCH_LIST'] = '9.0'\ntorch.backends.cuda.matmul.allow_tf32 = False\n"
        "torch.backends.cudnn.allow_tf32 = False\ntorch.set_float32_matmul_precision('highest')\n"
        "try:\n    import numpy as np\nexcept ImportError:\n    np = None\n"
        "class ModelNew(nn.Module):\n    def forward(self, x):\n        y = torch.empty_like(x)\n        lib.k(x, y)\n        return y\n")),
    ("CUDA with a variable named half and comments", module(
        'SRC = r"""\n__global__ void r(const float* x, float* y, int n) {\n'
        '    // reduce the first half of the block into the second half\n'
        '    int half = blockDim.x / 2;\n    float v = x[threadIdx.x] * half;\n'
        '    for (int s = half; s > 0; s >>= 1) { v += __shfl_down_sync(0xffffffff, v, s); }\n'
        '    y[0] = v;\n}\n"""\n'
        "class ModelNew(nn.Module):\n    def forward(self, x):\n        y = torch.empty(1, device=x.device)\n        lib.r(x, y)\n        return y\n")),
    ("try/finally without except", forward(
        "y = torch.empty_like(x)\ntry:\n    lib.k(x, y)\nfinally:\n    pass\nreturn y")),
    ("helpers with ints", forward(
        "y = torch.empty_like(x)\nlib.k(x, y, ceil_div(x.numel(), 256))\nreturn y",
        extra="def ceil_div(a, b):\n    return (a + b - 1) // b\n")),
    ("no_grad and comprehension", forward(
        "with torch.no_grad():\n    outs = [torch.empty_like(x) for _ in range(2)]\n    lib.k(x, outs[0], outs[1])\nreturn outs[0]")),
    ("list of launch arguments", forward(
        "y = torch.empty_like(x)\nargs = [x, y, x.numel()]\nargs.append(256)\nlib.k(*args)\nreturn y")),
    ("is None checks", forward(
        "if x is None or self.bias is None:\n    raise ValueError('missing input')\ny = torch.empty_like(x)\nlib.k(x, self.bias, y)\nreturn y",
        init="self.bias = nn.Parameter(torch.zeros(4))")),
    ("custom op namespace", forward("return torch.ops.my_ext.swish(x)")),
    ("C++ wrapper with allowed calls", module(
        'SRC = r"""\n#include <torch/extension.h>\n#include <ATen/cuda/CUDAContext.h>\n'
        "torch::Tensor f(torch::Tensor x) {\n  TORCH_CHECK(x.is_cuda(), \"cuda\");\n  auto y = torch::empty({x.size(0)}, x.options());\n"
        "  auto z = torch::zeros_like(x);\n  auto s = at::cuda::getCurrentCUDAStream();\n  const float* p = x.data_ptr<float>();\n"
        "  int64_t n = x.numel();\n  auto v = x.contiguous().view({-1});\n  return y;\n}\n\"\"\"\n"
        "class ModelNew(nn.Module):\n    def forward(self, x):\n        y = torch.empty_like(x)\n        lib.k(x, y)\n        return y\n")),
]


@pytest.mark.parametrize("label,source", CLEAN, ids=[c[0] for c in CLEAN])
def test_legitimate_code_passes(label: str, source: str):
    assert check_candidate_source(source) == [], label


# ---------------------------------------------------------------------------------------
# Options
# ---------------------------------------------------------------------------------------


def test_allow_torch_ops_lets_library_ops_through():
    src_mm = forward("y = torch.matmul(x, self.w)\nreturn self.ext.bias_relu(y)",
                     init="self.w = nn.Parameter(torch.ones(4, 4))\nself.ext = lib")
    assert "torch_fallback" in guards(src_mm)
    assert guards(src_mm, allow_torch_ops=frozenset({"matmul"})) == set()
    src_at = forward("return lib.k(x @ self.w)", init="self.w = nn.Parameter(torch.ones(4, 4))")
    assert guards(src_at, allow_torch_ops=frozenset({"matmul"})) == set()
    src_lin = forward("return lib.k(self.fc(x))", init="self.fc = nn.Linear(4, 4)")
    assert "torch_fallback" in guards(src_lin)
    assert guards(src_lin, allow_torch_ops=LIBRARY_OPS) == set()
    # allowing matmul does not allow softmax
    src_sm = forward("return torch.softmax(torch.matmul(x, x), -1)")
    assert "torch_fallback" in guards(src_sm, allow_torch_ops=LIBRARY_OPS)


def test_allow_lower_precision():
    src = (DATA / "static_lower_precision.py").read_text()
    assert "lower_precision" in guards(src)
    assert "lower_precision" not in guards(src, allow_lower_precision=True)


def test_problem_marks_number_inputs():
    src = module(
        "class ModelNew(nn.Module):\n    def forward(self, x, scale):\n"
        "        y = torch.empty_like(x)\n        lib.k(x, y, scale * 2.0)\n        return y\n"
    )
    assert "torch_fallback" in guards(src)  # without the problem, scale looks like a tensor
    problem = TorchProblem(
        path=Path("p.py"), name="p", source="", constants={}, input_constants=(),
        inputs=(TensorSpec("tensor", (4,), "float32"), TensorSpec("float", (), "float64", 2.0)),
        init_inputs=(), outputs=(TensorSpec("tensor", (4,), "float32"),),
    )
    assert guards(src, problem=problem) == set()


def test_problem_module_import_counts_as_the_reference():
    problem = TorchProblem(
        path=Path("softmax.py"), name="softmax", source="", constants={}, input_constants=(),
        inputs=(TensorSpec("tensor", (4,), "float32"),), init_inputs=(),
        outputs=(TensorSpec("tensor", (4,), "float32"),),
    )
    src = module("from softmax import Model as Reference\nclass ModelNew(Reference):\n    pass\n")
    assert "inherits_model" in guards(src, problem=problem)


def test_cpp_profiler_events_are_refused():
    # RECORD_FUNCTION("aten::mm") would forge an op name the profiler guards trust
    cu = (
        "#include <torch/extension.h>\n"
        "// RECORD_FUNCTION in a comment is fine\n"
        "torch::Tensor f(torch::Tensor x) {\n"
        "  RECORD_FUNCTION(\"aten::mm\", std::vector<c10::IValue>({x}));\n"
        "  nvtxRangePushA(\"x\");\n"
        "  return x;\n}\n"
    )
    found = [(v.guard, v.line) for v in check_cuda_source(cu, file="kernel.cu")]
    assert found == [("patching", 4), ("patching", 5)]


def test_cuda_file_checks_report_the_file_and_line():
    cu = (
        "#include <cuda_fp16.h>  // included but unused: fine\n"
        "// __half in a comment is fine\n"
        "__global__ void k(const __half* x) {}\n"
        "/* half2 in a block comment\n   is fine too */\n"
        "__device__ float2 f(half2 v) { return __half22float2(v); }\n"
    )
    found = check_cuda_source(cu, file="kernel.cu")
    assert {(v.guard, v.line, v.file) for v in found} == {
        ("lower_precision", 3, "kernel.cu"),
        ("lower_precision", 6, "kernel.cu"),
    }
    assert check_cuda_source(cu, allow_lower_precision=True) == []
    src = (DATA / "clean_fast.py").read_text()
    found = check_candidate_source(src, cuda_sources={"clean_fast.cu": cu})
    assert found and all(v.file == "clean_fast.cu" for v in found)


def test_embedded_cuda_line_numbers_are_python_lines():
    src = (DATA / "static_lower_precision.py").read_text()
    lines = src.splitlines()
    found = [v for v in check_candidate_source(src) if v.guard == "lower_precision"]
    hmul = [v for v in found if "__hmul" in v.message]
    assert hmul and "__hmul" in lines[hmul[0].line - 1]


def test_allowlists_are_documented():
    doc = (Path(__file__).parent.parent / "docs" / "pytorch-problems.md").read_text()
    for name in ("empty_like", "zeros", "arange", "view", "contiguous", "data_ptr", "permute"):
        assert f"`{name}" in doc
    for gid in GUARD_IDS:
        assert f"`{gid}`" in doc
    assert {"empty", "zeros", "full", "arange", "reshape"} <= ALLOWED_TORCH_FUNCTIONS
    assert {"view", "contiguous", "data_ptr", "size", "stride", "to"} <= ALLOWED_TENSOR_METHODS
    assert not (ALLOWED_TORCH_FUNCTIONS & LIBRARY_OPS)


def test_never_raises_on_odd_input():
    assert [v.guard for v in check_candidate_source("x = '\0'\x00")] == ["syntax"]
    assert [v.guard for v in check_candidate_source("")] == ["no_modelnew"]
