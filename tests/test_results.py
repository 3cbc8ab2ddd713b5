"""The drop-in host wrapper: copies follow the access classification and it compiles."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from cudaperf_cli.agent.results import build_instructions, host_wrapper_source, result_source
from cudaperf_cli.core import ArrayParam, CProblem, ScalarKind, ScalarParam

PROBLEM = CProblem(
    path=Path("saxpy.c"),
    function="saxpy",
    params=(
        ScalarParam("n", "int", ScalarKind.SIZE),
        ScalarParam("a", "float", ScalarKind.COEFFICIENT),
        ArrayParam("x", "float", ("n",), const=True),
        ArrayParam("y", "float", ("n",)),
        ArrayParam("z", "float", ("n",)),
    ),
    sizes={"n": 1000},
)

CANDIDATE = r"""
__global__ void k(int n, float a, const float *x, float *y, float *z) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { z[i] = a * x[i] + y[i]; y[i] = 0.f; }
}
extern "C" int saxpy_cuda(int n, float a, const float *x, float *y, float *z) {
    k<<<(n + 255) / 256, 256>>>(n, a, x, y, z);
    return (int)cudaGetLastError();
}
"""


def test_wrapper_copies_follow_access_modes():
    src = host_wrapper_source(PROBLEM, {"x": "read", "y": "readwrite", "z": "write"})
    assert 'extern "C" void saxpy(int n, float a, const float *x_host, float *y_host, float *z_host)' in src
    # x: in only; y: in and out; z: out only (never copied in).
    assert "cudaMemcpy(d_x, x_host" in src
    assert "cudaMemcpy(d_y, y_host" in src
    assert "cudaMemcpy(d_z, z_host" not in src
    assert "cudaMemcpy((void *)y_host, d_y" in src
    assert "cudaMemcpy((void *)z_host, d_z" in src
    assert "x_host, d_x" not in src
    assert "saxpy_cuda(n, a, d_x, d_y, d_z)" in src


def test_wrapper_defaults_without_classification():
    src = host_wrapper_source(PROBLEM, None)
    assert "cudaMemcpy(d_z, z_host" in src  # unknown: copied in
    assert "cudaMemcpy((void *)x_host" not in src  # const: never copied out


def test_build_instructions_name_arch_and_static_note(tmp_path):
    prob = CProblem(**{**PROBLEM.__dict__, "is_static": True})
    how = build_instructions(prob, tmp_path / "saxpy.cu", "sm_90")
    assert "-arch=sm_90" in how.compile and str(tmp_path / "saxpy.cu") in how.compile
    assert "static" in how.note


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
def test_result_file_compiles_and_links_with_a_c_caller(tmp_path):
    cu = tmp_path / "saxpy.cu"
    cu.write_text(result_source(PROBLEM, CANDIDATE, {"x": "read", "y": "readwrite", "z": "write"}))
    caller = tmp_path / "main.c"
    caller.write_text(
        "void saxpy(int n, float a, const float x[n], float y[n], float z[n]);\n"
        "int main(void) { float x[4] = {1,2,3,4}, y[4] = {0}, z[4];"
        " saxpy(4, 2.0f, x, y, z); return 0; }\n"
    )
    subprocess.run(["nvcc", "-arch=sm_90", "-c", str(cu), "-o", str(tmp_path / "saxpy.o")],
                   check=True, capture_output=True)
    subprocess.run(["cc", "-c", str(caller), "-o", str(tmp_path / "main.o")], check=True)
    subprocess.run(["nvcc", "-arch=sm_90", str(tmp_path / "main.o"), str(tmp_path / "saxpy.o"),
                    "-o", str(tmp_path / "prog")], check=True, capture_output=True)
    assert (tmp_path / "prog").exists()
