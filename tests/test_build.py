"""build stage: ptxas report parser, nvcc driver, cache, errors, timeouts (CPU only)."""

from __future__ import annotations

import json
import os
import time
import subprocess
from pathlib import Path

import pytest

from cudaperf_cli.build import (
    BuildResult,
    KernelResources,
    build_candidate,
    detect_arch,
    extract_errors,
    find_nvcc,
    parse_ptxas_report,
)
from cudaperf_cli.build import nvcc as nvcc_mod
from cudaperf_cli.build.host_code import syscall_bytes
from cudaperf_cli.core import ToolchainError

# Real nvcc 13.0 output, ``-gencode`` for sm_80 and sm_90 (sm_80 still reports cmem[0]).
REAL_MULTI_ARCH = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'plain' for 'sm_80'
ptxas info    : Function properties for plain
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 8 registers, used 0 barriers, 360 bytes cmem[0]
ptxas info    : Compile time = 2.220 ms
ptxas info    : Compiling entry function '_Z12local_kernelPdii' for 'sm_80'
ptxas info    : Function properties for _Z12local_kernelPdii
    512 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers, 512 bytes cumulative stack size, 368 bytes cmem[0]
ptxas info    : Compile time = 72.200 ms
ptxas info    : Compiling entry function '_Z11smem_kernelPKdPdi' for 'sm_80'
ptxas info    : Function properties for _Z11smem_kernelPKdPdi
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 8 registers, used 1 barriers, 2048 bytes smem, 372 bytes cmem[0]
ptxas info    : Compile time = 2.433 ms
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'plain' for 'sm_90'
ptxas info    : Function properties for plain
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, used 0 barriers
ptxas info    : Compile time = 2.585 ms
ptxas info    : Compiling entry function '_Z11smem_kernelPKdPdi' for 'sm_90'
ptxas info    : Function properties for _Z11smem_kernelPKdPdi
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 12 registers, used 1 barriers, 2048 bytes smem
ptxas info    : Compile time = 3.082 ms
"""

# Real nvcc 13.0 output with -maxrregcount=24 (spills) and a non-entry device function.
REAL_SPILLS = """\
ptxas info    : Overriding maximum register limit 256 for '_Z5heavyPKdPdi' with  24 of maxrregcount option
ptxas info    : 128 bytes gmem
ptxas info    : Compiling entry function '_Z5heavyPKdPdi' for 'sm_90'
ptxas info    : Function properties for _Z5heavyPKdPdi
    1720 bytes stack frame, 3260 bytes spill stores, 3444 bytes spill loads
ptxas info    : Used 24 registers, used 0 barriers, 1720 bytes cumulative stack size
ptxas info    : Compile time = 74.987 ms
ptxas info    : Compiling entry function '_Z6callsfPdi' for 'sm_90'
ptxas info    : Function properties for _Z6callsfPdi
    64 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 26 registers, used 0 barriers, 64 bytes cumulative stack size
ptxas info    : Compile time = 4.112 ms
ptxas info    : Function properties for _Z1fdi
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
"""

# An older toolkit's format (no barrier count, cmem banks listed).
OLD_FORMAT = """\
ptxas info    : Compiling entry function '_Z6kernelPfS_i' for 'sm_70'
ptxas info    : Function properties for _Z6kernelPfS_i
    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 40 registers, 1024 bytes smem, 376 bytes cmem[0], 16 bytes cmem[2]
"""

SMEM_KERNEL = r"""
__global__ void smem_kernel(const double* a, double* b, int n) {
  __shared__ double tile[256];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  tile[threadIdx.x] = i < n ? a[i] : 0.0;
  __syncthreads();
  if (i < n) b[i] = tile[255 - threadIdx.x];
}
"""

LOCAL_KERNEL = r"""
__global__ void local_kernel(double* b, int n, int k) {
  double loc[64];
  for (int j = 0; j < 64; ++j) loc[j] = b[(j * k) % n];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) b[i] = loc[(i * 7) % 64] + loc[k % 64];
}
"""

HEAVY_KERNEL = r"""
__global__ void heavy(const double* __restrict__ a, double* __restrict__ b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  double acc[32];
  #pragma unroll
  for (int j = 0; j < 32; ++j) acc[j] = a[(i + j * 97) % n];
  #pragma unroll
  for (int r = 0; r < 8; ++r) {
    #pragma unroll
    for (int j = 0; j < 32; ++j) acc[j] = acc[j] * acc[(j + r + 1) % 32] + 1.0;
  }
  double s = 0;
  #pragma unroll
  for (int j = 0; j < 32; ++j) s += acc[j];
  b[i] = s;
}
"""

ENTRY = r"""
#include <cuda_runtime.h>
extern "C" __global__ void plain(float* x) { x[threadIdx.x] = 1.0f; }
extern "C" int foo_cuda(int n, float* x) { plain<<<1, 32>>>(x); return (int)cudaGetLastError(); }
"""


# ---------------------------------------------------------------------------------------
# Parser on captured real output
# ---------------------------------------------------------------------------------------


def _by(res: list[KernelResources], name: str, arch: str | None = None) -> KernelResources:
    hits = [r for r in res if r.name == name and (arch is None or r.arch == arch)]
    assert len(hits) == 1, (name, arch, res)
    return hits[0]


def test_parse_multi_arch_real_output() -> None:
    res = parse_ptxas_report(REAL_MULTI_ARCH)
    assert [(r.name, r.arch) for r in res] == [
        ("plain", "sm_80"),
        ("_Z12local_kernelPdii", "sm_80"),
        ("_Z11smem_kernelPKdPdi", "sm_80"),
        ("plain", "sm_90"),
        ("_Z11smem_kernelPKdPdi", "sm_90"),
    ]
    smem80 = _by(res, "_Z11smem_kernelPKdPdi", "sm_80")
    assert (smem80.registers, smem80.shared_bytes, smem80.constant_bytes, smem80.barriers) == (
        8,
        2048,
        372,
        1,
    )
    smem90 = _by(res, "_Z11smem_kernelPKdPdi", "sm_90")
    assert (smem90.registers, smem90.shared_bytes, smem90.constant_bytes) == (12, 2048, None)
    loc = _by(res, "_Z12local_kernelPdii", "sm_80")
    assert loc.stack_frame_bytes == 512 and loc.cumulative_stack_bytes == 512
    assert loc.spill_store_bytes == 0 and not loc.spills
    assert _by(res, "plain", "sm_80").constant_bytes == 360


def test_parse_spills_and_skips_device_functions() -> None:
    res = parse_ptxas_report(REAL_SPILLS)
    assert [r.name for r in res] == ["_Z5heavyPKdPdi", "_Z6callsfPdi"]  # _Z1fdi is no kernel
    heavy = res[0]
    assert heavy.registers == 24
    assert heavy.stack_frame_bytes == 1720
    assert heavy.spill_store_bytes == 3260 and heavy.spill_load_bytes == 3444
    assert heavy.spills
    assert heavy.barriers == 0
    assert res[1].stack_frame_bytes == 64 and res[1].registers == 26


def test_parse_old_format() -> None:
    (k,) = parse_ptxas_report(OLD_FORMAT)
    assert (k.registers, k.shared_bytes, k.constant_bytes) == (40, 1024, 376)
    assert k.barriers is None
    assert (k.stack_frame_bytes, k.spill_store_bytes, k.spill_load_bytes) == (8, 4, 4)


def test_parse_demangles_when_a_demangler_exists() -> None:
    res = parse_ptxas_report(REAL_MULTI_ARCH)
    smem = _by(res, "_Z11smem_kernelPKdPdi", "sm_90")
    if smem.demangled != smem.name:  # cu++filt or c++filt present
        assert smem.demangled.startswith("smem_kernel(")
    assert _by(res, "plain", "sm_90").demangled == "plain"
    raw = parse_ptxas_report(REAL_MULTI_ARCH, demangle_names=False)
    assert all(r.demangled == r.name for r in raw)


def test_parse_ignores_noise() -> None:
    assert parse_ptxas_report("") == []
    assert parse_ptxas_report("candidate.cu(3): warning #177-D: unused\nrandom text\n") == []


def test_kernel_resources_round_trip() -> None:
    k = parse_ptxas_report(REAL_SPILLS)[0]
    assert KernelResources.from_dict(json.loads(json.dumps(k.__dict__))) == k


# ---------------------------------------------------------------------------------------
# Parser on live nvcc output
# ---------------------------------------------------------------------------------------


def _nvcc_ptxas(nvcc: str, tmp_path: Path, source: str, *flags: str) -> str:
    import subprocess

    src = tmp_path / "k.cu"
    src.write_text(source)
    proc = subprocess.run(
        [nvcc, "-O3", "-arch=sm_90", "-Xptxas", "-v", "-c", "-o", str(tmp_path / "k.o"),
         str(src), *flags],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout + proc.stderr


def test_live_shared_memory_and_several_kernels(nvcc_path: str, tmp_path: Path) -> None:
    log = _nvcc_ptxas(nvcc_path, tmp_path, SMEM_KERNEL + LOCAL_KERNEL + ENTRY)
    res = parse_ptxas_report(log)
    names = {r.name for r in res}
    assert {"_Z11smem_kernelPKdPdi", "_Z12local_kernelPdii", "plain"} <= names, log
    smem = _by(res, "_Z11smem_kernelPKdPdi")
    assert smem.shared_bytes == 256 * 8
    assert smem.barriers == 1
    assert smem.registers > 0 and smem.arch == "sm_90"
    loc = _by(res, "_Z12local_kernelPdii")
    assert loc.stack_frame_bytes >= 64 * 8  # the local array lives on the stack


def test_live_register_spills(nvcc_path: str, tmp_path: Path) -> None:
    log = _nvcc_ptxas(nvcc_path, tmp_path, HEAVY_KERNEL, "-maxrregcount=24")
    (heavy,) = parse_ptxas_report(log)
    assert heavy.registers <= 24
    assert heavy.spill_store_bytes > 0 and heavy.spill_load_bytes > 0, log
    assert heavy.spills


# ---------------------------------------------------------------------------------------
# build_candidate
# ---------------------------------------------------------------------------------------


def test_build_ok_and_cache_hit(nvcc_path: str, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    r1 = build_candidate(ENTRY + SMEM_KERNEL, cache_root=cache)
    assert r1.ok and r1.status == "ok" and not r1.cached, r1.errors
    assert r1.lib_path is not None and r1.lib_path.is_file()
    assert r1.lib_path.name == "candidate.so"
    assert r1.build_dir == r1.lib_path.parent and r1.build_dir.parent == cache
    assert (r1.build_dir / "candidate.cu").read_text() == ENTRY + SMEM_KERNEL
    assert (r1.build_dir / "build.json").is_file() and (r1.build_dir / "build.log").is_file()
    assert r1.arch == "sm_90"
    assert r1.command[1:] == [
        "-O3", "-arch=sm_90", "-c", "-Xcompiler", "-fPIC", "-Xptxas", "-v",
        "-lineinfo", "-o", "candidate.o", "candidate.cu",
    ]
    assert not (r1.build_dir / "candidate.o").exists()  # linked: the library is kept
    assert {k.name for k in r1.resources} >= {"plain", "_Z11smem_kernelPKdPdi"}
    assert r1.errors == ""

    t0 = time.monotonic()
    r2 = build_candidate(ENTRY + SMEM_KERNEL, cache_root=cache)
    assert time.monotonic() - t0 < 5
    assert r2.cached and r2.ok
    assert r2.lib_path == r1.lib_path
    assert r2.resources == r1.resources
    assert r2.seconds == pytest.approx(r1.seconds)

    # A different flag or arch is a different build directory.
    r3 = build_candidate(ENTRY + SMEM_KERNEL, cache_root=cache, extra_flags=["-DX=1"])
    assert r3.ok and not r3.cached and r3.build_dir != r1.build_dir
    assert "-DX=1" in r3.command
    assert len([p for p in cache.iterdir() if not p.name.startswith(".")]) == 2
    assert not [p for p in cache.iterdir() if p.name.startswith(".tmp-")]


def test_build_result_json_round_trip(nvcc_path: str, tmp_path: Path) -> None:
    r = build_candidate(ENTRY, cache_root=tmp_path)
    back = BuildResult.from_json(json.loads(json.dumps(r.to_json())))
    assert back == r


def test_compile_error_verbatim_and_cached(nvcc_path: str, tmp_path: Path) -> None:
    src = (
        "#include <cuda_runtime.h>\n"
        "__global__ void k(float* x) {\n"
        "  x[threadIdx.x] = y;\n"
        "}\n"
        'extern "C" int foo_cuda(float* x) { k<<<1,1>>>(x); return 0; }\n'
    )
    r = build_candidate(src, cache_root=tmp_path)
    assert not r.ok and r.status == "compile_error" and r.lib_path is None
    assert r.errors.splitlines()[0] == 'candidate.cu(3): error: identifier "y" is undefined'
    assert "    x[threadIdx.x] = y;" in r.errors  # the source line nvcc quotes
    assert "^" in r.errors
    assert '1 error detected in the compilation of "candidate.cu".' in r.errors
    assert ".tmp-" not in r.log and str(tmp_path) not in r.errors
    again = build_candidate(src, cache_root=tmp_path)
    assert again.cached and again.status == "compile_error" and again.errors == r.errors


def test_compile_errors_trimmed(nvcc_path: str, tmp_path: Path) -> None:
    body = "\n".join(f"  int v{i} = undefined_{i};" for i in range(120))
    src = f"__global__ void k() {{\n{body}\n}}\n"
    r = build_candidate(src, cache_root=tmp_path)
    assert r.status == "compile_error"
    lines = r.errors.splitlines()
    assert len(lines) <= 42
    assert len(r.errors) <= 4200
    assert lines[0].startswith("candidate.cu(2): error: identifier \"undefined_0\"")
    assert "more line" in lines[-2]
    assert lines[-1] == '100 errors detected in the compilation of "candidate.cu".'
    assert 'identifier "undefined_99"' in r.log  # the full log keeps everything


def test_ptxas_error_is_reported(nvcc_path: str, tmp_path: Path) -> None:
    src = (
        "__global__ void big(float* x) { __shared__ float s[100000]; "
        "s[threadIdx.x] = x[threadIdx.x]; __syncthreads(); x[threadIdx.x] = s[threadIdx.x+1]; }\n"
    )
    r = build_candidate(src, cache_root=tmp_path)
    assert r.status == "compile_error"
    assert "ptxas error" in r.errors and "too much shared data" in r.errors


def test_compile_timeout(nvcc_path: str, tmp_path: Path) -> None:
    t0 = time.monotonic()
    r = build_candidate(ENTRY, cache_root=tmp_path, timeout_s=0.05)
    assert time.monotonic() - t0 < 15
    assert r.status == "compile_timeout" and not r.ok and not r.cached
    assert "0.05 s" in r.errors
    assert r.build_dir is None
    # nothing cached: the next build really compiles
    assert [p for p in tmp_path.iterdir()] == []
    ok = build_candidate(ENTRY, cache_root=tmp_path)
    assert ok.ok and not ok.cached


def test_missing_nvcc_is_a_toolchain_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ToolchainError) as exc:
        build_candidate(ENTRY, cache_root=tmp_path, nvcc=str(tmp_path / "no-nvcc"))
    assert "nvcc" in str(exc.value) and "\n" not in str(exc.value)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.delenv("CUDAPERF_NVCC", raising=False)
    monkeypatch.setattr(nvcc_mod, "_FALLBACK_HOMES", (str(tmp_path / "nothing"),))
    with pytest.raises(ToolchainError) as exc2:
        find_nvcc()
    msg = str(exc2.value)
    assert msg.startswith("nvcc not found") and "\n" not in msg
    assert exc2.value.exit_code == 3


def test_nvcc_env_override(nvcc_path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDAPERF_NVCC", nvcc_path)
    assert find_nvcc() == nvcc_path


def test_extract_errors_fallback_and_limits() -> None:
    # no error line: the last 40 lines, of which only the toolchain's own may go back
    log = "\n".join(f"line {i}" for i in range(100))
    assert extract_errors(log) == "(40 line(s) located outside candidate.cu withheld: they may quote other files)"
    assert extract_errors(log + "\nnvcc fatal   : something went wrong") == "nvcc fatal   : something went wrong"
    many = "\n".join(f"candidate.cu({i}): error: bad thing {i}" for i in range(10))
    assert extract_errors(many, max_lines=3).splitlines() == [
        "candidate.cu(0): error: bad thing 0",
        "candidate.cu(1): error: bad thing 1",
        "candidate.cu(2): error: bad thing 2",
        "... (7 more lines in the full build log)",
    ]
    other = "\n".join(f"a.cu({i}): error: bad thing {i}" for i in range(3))
    assert extract_errors(other) == "(3 line(s) located outside candidate.cu withheld: they may quote other files)"
    assert extract_errors(other, own=("a.cu",)).splitlines()[0] == "a.cu(0): error: bad thing 0"


def test_clean_paths() -> None:
    log = (
        "/tmp/cache/.tmp-abc-123/candidate.cu(3): error: x\n"
        "/tmp/tmpxft_0000a1b2_00000000-6_candidate.cudafe1.cpp:5: error: y\n"
    )
    out = nvcc_mod._clean_paths(log, "/tmp/cache/.tmp-abc-123")
    assert out.splitlines() == ["candidate.cu(3): error: x", "candidate.cudafe1.cpp:5: error: y"]


def test_detect_arch_never_raises() -> None:
    arch = detect_arch()
    assert arch is None or (arch.startswith("sm_") and arch[3:].isdigit())
    assert detect_arch(ordinal=999) is None


def test_build_dir_is_content_addressed(nvcc_path: str, tmp_path: Path) -> None:
    v = nvcc_mod.nvcc_version(nvcc_path)
    k1 = nvcc_mod.cache_key("a", "sm_90", [], v)
    assert k1 == nvcc_mod.cache_key("a", "sm_90", [], v)
    assert k1 != nvcc_mod.cache_key("b", "sm_90", [], v)
    assert k1 != nvcc_mod.cache_key("a", "sm_80", [], v)
    assert k1 != nvcc_mod.cache_key("a", "sm_90", ["-G"], v)
    assert k1 != nvcc_mod.cache_key("a", "sm_90", [], v + "x")
    assert os.path.basename(str(build_candidate(ENTRY, cache_root=tmp_path).build_dir)) == (
        nvcc_mod.cache_key(ENTRY, "sm_90", [], v)
    )


#: Host code that a launcher does not need, each in a candidate that otherwise builds: the
#: (symbol as reported, kind) the host-code check must name.
HOST_CHEATS = [
    ('#include <dlfcn.h>\n', 'void *p = dlsym(RTLD_DEFAULT, "PyRun_SimpleString"); (void)p;', "dlsym", "run-time symbol lookup"),
    ('extern "C" int PyRun_SimpleString(const char *);\n', 'PyRun_SimpleString("import os");', "PyRun_SimpleString", "the Python C API"),
    ('#include <pthread.h>\nstatic void *later(void *a) { return a; }\n', 'pthread_t t; pthread_create(&t, 0, later, 0);', "pthread_create", "a thread"),
    ('#include <thread>\n', 'std::thread t([] {}); t.detach();', "std::thread", "a thread"),
    ('#include <stdio.h>\n', 'FILE *f = fopen("/tmp/ref.npy", "r"); if (f) fclose(f);', "fopen", "file access"),
    ('#include <fstream>\n', 'std::ifstream f("/tmp/ref.npy");', "basic_ifstream", "file access"),
    ('#include <stdlib.h>\n', 'system("true");', "system", "a process"),
    ('#include <sys/mman.h>\n', 'mprotect((void *)0, 0, 0);', "mprotect", "memory mappings or a raw system call"),
    ('#include <signal.h>\n#include <unistd.h>\n', 'kill(getppid(), 9);', "kill", "signals"),
    ('', 'long r; asm volatile("syscall" : "=a"(r) : "a"(39L) : "rcx", "r11", "memory");', "0f 05", "a raw system call"),
    # Found by an attack pass against a list of refused names: each is refused now as not
    # on the list of what a launcher may call, or by the bytes of its instruction.
    ('#include <mntent.h>\n', 'FILE *f = setmntent("/tmp/ref.npy", "r"); (void)f;', "setmntent", "not on the list"),
    ('#include <wordexp.h>\n', 'wordexp_t w; wordexp("$(id)", &w, 0);', "wordexp", "not on the list"),
    ('extern "C" int __openat64_2(int, const char *, int);\n', 'int fd = __openat64_2(-100, "/tmp/x", 0); (void)fd;',
     "__openat64_2", "not on the list"),
    ('#include <link.h>\n#include <stdio.h>\n', 'printf("%p", (void *)_r_debug.r_map);', "_r_debug", "not on the list"),
    ('__attribute__((naked, noinline)) static long hidden(long nr) {\n'
     '  asm volatile("mov %rdi, %rax\\n jmp 1f+1\\n1: .byte 0xb8, 0x0f, 0x05, 0xc3, 0x90\\n"); }\n',
     'hidden(39);', "0f 05", "a raw system call"),
    ('', 'volatile unsigned v = 0xc3050fu; (void)v;', "0f 05", "a raw system call"),
    # Found by the review of the rebuild with other alignments: an executable section that
    # is not SHT_PROGBITS, and two sections the linker joins into "0f 05".
    ('#ifndef __CUDA_ARCH__\nasm(".pushsection .note.cp,\\"ax\\",@note\\n.byte 0x0f,0x05\\n.popsection");\n#endif\n',
     '', "0f 05", "a raw system call"),
    ('#ifndef __CUDA_ARCH__\nasm(".pushsection .text.cpa,\\"ax\\",@progbits\\n.p2align 0\\nnop\\n.byte 0x0f\\n.popsection\\n"\n'
     '    ".pushsection .text.cpb,\\"ax\\",@progbits\\n.p2align 0\\n.byte 0x05\\nret\\n.popsection");\n#endif\n',
     '', "0f 05", "a raw system call"),
    # A host function the CUDA driver runs later, on its own (unconfined) thread.
    ('static void CUDART_CB later(void *p) { (void)p; }\n', 'cudaLaunchHostFunc(0, later, 0);',
     "cudaLaunchHostFunc", "not on the list"),
]


@pytest.mark.parametrize("prelude, body, symbol, kind", HOST_CHEATS,
                         ids=[f"{i}-{c[2].replace(' ', '')}" for i, c in enumerate(HOST_CHEATS)])
def test_host_code_that_reaches_past_the_launch_is_refused(
    nvcc_path: str, tmp_path: Path, prelude: str, body: str, symbol: str, kind: str
) -> None:
    src = (prelude + "__global__ void k(float *x) { x[0] = 1.0f; }\n"
           'extern "C" int saxpy_cuda(int n, float a, float *x, float *y) {\n  ' + body
           + "\n  k<<<1, 1>>>(y);\n  return (int)cudaGetLastError();\n}\n")
    r = build_candidate(src, cache_root=tmp_path / "cache")
    assert r.status == "guard_rejected" and not r.ok and r.lib_path is None, (r.status, r.errors)
    assert symbol in r.errors and f"({kind}" in r.errors, r.errors
    assert r.errors.startswith("candidate.cu: error: the host code uses")
    again = build_candidate(src, cache_root=tmp_path / "cache")  # deterministic: cached
    assert again.cached and again.status == "guard_rejected"


def test_an_honest_launcher_passes_the_host_code_check(nvcc_path: str, tmp_path: Path) -> None:
    """printf, malloc, streams, events, cudaMalloc, std::vector and iostream are fine."""
    src = ("#include <cstdio>\n#include <cstdlib>\n#include <vector>\n#include <iostream>\n"
           "__global__ void k(float *x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= 2; }\n"
           'extern "C" int saxpy_cuda(int n, float a, float *x, float *y) {\n'
           "  std::vector<int> v(4); float *tmp = nullptr; cudaMalloc(&tmp, 16); cudaFree(tmp);\n"
           "  cudaStream_t s; cudaStreamCreate(&s); cudaStreamDestroy(s);\n"
           "  void *h = malloc(8); free(h); if (n < 0) { printf(\"n=%d\\n\", n); std::cerr << n; }\n"
           "  k<<<(n + 255) / 256, 256>>>(y, n);\n  return (int)cudaGetLastError();\n}\n")
    r = build_candidate(src, cache_root=tmp_path / "cache")
    assert r.ok and r.status == "ok", r.errors


def test_system_call_bytes_inside_a_jump_are_moved_by_another_layout(nvcc_path: str, tmp_path: Path) -> None:
    """Honest host code whose conditional jump skips 0x50f bytes (``0f 8e 0f 05 00 00``: the
    bytes of ``syscall`` inside the displacement, as in a generated batch-norm launcher of
    KernelBench's level2/72) is rebuilt with other jump-target alignments until they are
    gone (here the second, ``-falign-labels=32,-falign-loops=32``; measured with gcc 12 under
    nvcc 13.0), and says so among the warnings.  A syscall the source writes stays refused
    (``HOST_CHEATS``)."""
    from cudaperf_cli.build.nvcc import HOST_RELAYOUTS

    src = ('extern "C" int cp_f(int x) { if (x > 3) { asm volatile(".skip 1295, 0x90"); } return x * 7; }\n'
           "__global__ void k(float *x) { x[0] = 1.0f; }\n"
           'extern "C" int saxpy_cuda(int n, float a, float *x, float *y) {\n'
           "  k<<<1, 1>>>(y);\n  return (int)cudaGetLastError() + cp_f(n) * 0;\n}\n")
    obj = tmp_path / "default.o"
    subprocess.run([nvcc_path, "-O3", "-arch=sm_90", "-c", "-Xcompiler", "-fPIC", "-x", "cu", "-o", str(obj), "-"],
                   input=src, text=True, check=True, capture_output=True)
    if not syscall_bytes(obj):
        pytest.skip("this host compiler lays the jump out differently: no 0f 05 to move")
    r = build_candidate(src, cache_root=tmp_path / "cache")
    assert r.ok and r.status == "ok", r.errors
    assert f"host code rebuilt with -Xcompiler {HOST_RELAYOUTS[-1]}" in r.warnings, r.warnings


def test_ptxas_reserved_shared_memory_unknown_fields_and_the_target_arch() -> None:
    """``2080+16 bytes smem`` is 2096 bytes (was read as 16); fields ptxas did not print
    are unknown (None), not 0; with two architectures the target's entry is the one used."""
    from cudaperf_cli.build import for_arch
    from cudaperf_cli.structure.score import match_resources

    log = (
        "ptxas info    : Compiling entry function '_Z1kPf' for 'sm_80'\n"
        "ptxas info    : Function properties for _Z1kPf\n"
        "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
        "ptxas info    : Used 40 registers, 2080+16 bytes smem, 360 bytes cmem[0]\n"
        "ptxas info    : Compiling entry function '_Z1kPf' for 'sm_90'\n"
        "ptxas info    : Function properties for _Z1kPf\n"
        "    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n"
        "ptxas info    : Used 32 registers, 2080+16 bytes smem\n"
    )
    sm80, sm90 = parse_ptxas_report(log, demangle_names=False)
    assert sm80.shared_bytes == sm90.shared_bytes == 2096
    assert sm80.constant_bytes == 360 and sm90.constant_bytes is None
    assert sm90.cumulative_stack_bytes is None
    assert for_arch([sm80, sm90], "sm_90") == [sm90] and for_arch([sm80, sm90], "sm_75") == [sm80, sm90]
    res, _ = match_resources([sm80, sm90], "k", "sm_90")
    assert res is sm90 and res.spills  # not sm_80's 40 registers without spills


_SYSCALL_CHEAT = ('__global__ void k(float *x) { x[0] = 1.0f; }\n'
                  'extern "C" int saxpy_cuda(int n, float a, float *x, float *y) {\n'
                  '  long r; asm volatile("syscall" : "=a"(r) : "a"(39L) : "rcx", "r11", "memory");\n'
                  "  k<<<1, 1>>>(y);\n  return (int)cudaGetLastError();\n}\n")


@pytest.mark.parametrize("failure", ["none", "rebuild_times_out", "rebuild_check_skipped"])
def test_a_syscall_stays_refused_whatever_the_rebuilds_do(
    nvcc_path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failure: str
) -> None:
    """A real ``syscall`` is refused after the rebuilds with other alignments, and stays
    refused when a rebuild times out or its object cannot be checked (a skipped check is
    not a pass); the warnings never claim the bytes were harmless."""
    calls = {"run": 0, "check": 0}
    real_run, real_check = nvcc_mod._run_tool, nvcc_mod.check_host_object

    def run(cmd, cwd, timeout_s):  # type: ignore[no-untyped-def]
        calls["run"] += 1
        if failure == "rebuild_times_out" and calls["run"] == 2:
            return None, "", True
        return real_run(cmd, cwd, timeout_s)

    def check(obj):  # type: ignore[no-untyped-def]
        calls["check"] += 1
        if failure == "rebuild_check_skipped" and calls["check"] == 2:
            return [], "host-code check skipped: nm (binutils) is missing or cannot read candidate.o"
        return real_check(obj)

    monkeypatch.setattr(nvcc_mod, "_run_tool", run)
    monkeypatch.setattr(nvcc_mod, "check_host_object", check)
    r = build_candidate(_SYSCALL_CHEAT, cache_root=tmp_path / "cache")
    assert r.status == "guard_rejected" and not r.ok and r.lib_path is None, (r.status, r.errors, r.warnings)
    assert "0f 05" in r.errors
    assert "lay inside another instruction" not in r.warnings, r.warnings
    assert "the refusal stands" in r.warnings, r.warnings
    if failure == "none":
        assert calls["run"] == 1 + len(nvcc_mod.HOST_RELAYOUTS), calls
