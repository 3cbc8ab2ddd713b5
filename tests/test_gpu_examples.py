"""On a GPU: every bundled example ends with a verified kernel, checked at three sizes (the
edge configuration, the small odd one and the main one), and the written file works as a
drop-in."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.test_cli import EXAMPLES, cli

pytestmark = pytest.mark.gpu

ALL_EXAMPLES = sorted(p.name for p in EXAMPLES.glob("*.c"))


@pytest.mark.parametrize("example", ALL_EXAMPLES)
def test_example_is_verified_at_two_sizes(tmp_path, example):
    proc = cli("optimize", str(EXAMPLES / example), "--turns", "1", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    best = doc["best"]
    assert best["status"] == "correct"
    assert best["gpu_ms"] > 0 and best["cpu_ms"] > 0 and best["speedup_kernel"] > 0
    assert best["baseline"].startswith("gcc -O3")
    names = [c["name"] for c in doc["configs"]]
    assert names == ["edge", "small-odd", "main"]
    assert all(v <= 3 for v in doc["configs"][0]["sizes"].values())
    small = doc["configs"][1]["sizes"]
    assert all(v % 2 == 1 and v % 32 for k, v in small.items() if v > 5)
    out = Path(doc["output"])
    assert out.exists() and "extern \"C\" int" in out.read_text()
    print(f"{example}: {best['description']}: GPU {best['gpu_ms']:.4f} ms, "
          f"CPU {best['cpu_ms']:.2f} ms, x{best['speedup_kernel']:.1f} kernel, "
          f"x{best['speedup_e2e']:.2f} end-to-end")


DRIVER = r"""
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#define magnitude magnitude_cpu
#define main example_main
#include "EXAMPLE"
#undef magnitude
#undef main
void magnitude(int n, float scale, const float *u, const float *v, float *out);
int main(void) {
    int n = 100003;
    float *u = malloc(sizeof(float) * n), *v = malloc(sizeof(float) * n);
    float *a = malloc(sizeof(float) * n), *b = malloc(sizeof(float) * n);
    for (int i = 0; i < n; i++) { u[i] = (float)(i % 91) / 7.0f; v[i] = (float)(i % 13) - 6.0f; }
    magnitude_cpu(n, 0.25f, u, v, a);
    magnitude(n, 0.25f, u, v, b);
    for (int i = 0; i < n; i++)
        if (fabsf(a[i] - b[i]) > 1e-5f * fabsf(a[i]) + 1e-6f) { printf("mismatch %d\n", i); return 1; }
    printf("drop-in ok\n");
    return 0;
}
"""


def test_result_links_into_a_c_program_as_a_drop_in(tmp_path):
    proc = cli("optimize", str(EXAMPLES / "elementwise.c"), "--turns", "1", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    cu = tmp_path / "elementwise.cu"
    driver = tmp_path / "driver.c"
    driver.write_text(DRIVER.replace("EXAMPLE", str(EXAMPLES / "elementwise.c")))
    run = lambda *a: subprocess.run(a, check=True, capture_output=True, text=True, cwd=tmp_path)  # noqa: E731
    run("nvcc", "-O3", "-arch=sm_90", "-c", str(cu), "-o", "elementwise.o")
    run("cc", "-O2", "-c", str(driver), "-o", "driver.o")
    run("nvcc", "-arch=sm_90", "driver.o", "elementwise.o", "-o", "prog")
    out = run(str(tmp_path / "prog"))
    assert "drop-in ok" in out.stdout
