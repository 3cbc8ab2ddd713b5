"""No secrets and bounded resources in the children that handle untrusted code (issue 14):
the environment of the evaluation workers, nvcc, the preprocessor and the isolated children,
the ``file_access`` guard on candidate sources, and a model reply that includes a file."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from cudaperf_cli.evaluate.static_guards import check_build_flags, check_candidate_source, check_includes
from cudaperf_cli.sandbox import C_TOOL_LIMITS, GIB, Limits, is_secret_name, limit_hit, scrubbed_env
from tests.conftest import fake_chat_server

REPO = Path(__file__).resolve().parents[1]
SECRETS = {"OPENAI_API_KEY": "sk-test-123", "AWS_SECRET_ACCESS_KEY": "aws-secret", "HF_TOKEN": "hf_x",
           "GITHUB_TOKEN": "ghp_x", "MY_SERVICE_PASSWORD": "pw", "SSH_AUTH_SOCK": "/tmp/agent.sock"}


def test_secret_names() -> None:
    for name in SECRETS:
        assert is_secret_name(name), name
    for name in ("PATH", "HOME", "LANG", "CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH", "CUDAPERF_WORKER_BACKEND",
                 "PYTHONUNBUFFERED", "TMPDIR", "CUDA_HOME", "XDG_CACHE_HOME"):
        assert not is_secret_name(name), name
    assert is_secret_name("CUDAPERF_API_KEY") and is_secret_name("anthropic_base_url")
    for name in ("MYSQL_PWD", "REDIS_PASS", "SMTP_PASS", "SENTRY_DSN", "SLACK_WEBHOOK_URL", "CI_JOB_JWT_V2",
                 "KRB5CCNAME", "STRIPE_SK", "GCP_SA_JSON"):
        assert is_secret_name(name), name
    for name in ("PWD", "OLDPWD", "HF_HOME", "AWS_REGION", "WANDB_MODE", "GITHUB_ACTIONS", "TOKENIZERS_PARALLELISM",
                 "PASSES", "COMPASS_DIR"):
        assert not is_secret_name(name), name


def test_scrubbed_env_drops_secrets_and_adds_extras() -> None:
    from cudaperf_cli.sandbox import mark_secret

    base = {"PATH": "/bin", "HOME": "/h", **SECRETS, "HTTPS_PROXY": "http://me:pw@proxy:3128",
            "PIP_INDEX_URL": "https://__token__:abc@pypi.example/simple", "NO_PROXY": "localhost",
            "HTTP_PROXY": "http://proxy:3128", "MY_LLM_API": "sk-x"}
    mark_secret("my_llm_api")  # --api-key-env MY_LLM_API
    env = scrubbed_env({"CUDA_VISIBLE_DEVICES": "1"}, base=base)
    assert env == {"PATH": "/bin", "HOME": "/h", "CUDA_VISIBLE_DEVICES": "1", "NO_PROXY": "localhost",
                   "HTTP_PROXY": "http://proxy:3128"}


def test_limits_are_set_in_the_child_and_named_when_hit(tmp_path: Path) -> None:
    lim = Limits(address_space_bytes=3 * GIB, cpu_s=77, file_bytes=1 << 20, open_files=99)
    code = ("import resource as r, json; print(json.dumps([r.getrlimit(x)[0] for x in "
            "(r.RLIMIT_AS, r.RLIMIT_CPU, r.RLIMIT_FSIZE, r.RLIMIT_NOFILE)]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         preexec_fn=lim.preexec(), check=True).stdout
    assert json.loads(out) == [3 * GIB, 77, 1 << 20, 99]
    assert lim.describe() == "address space 3 GiB, CPU 77 s, file size 1 MiB, 99 open files"
    assert Limits().preexec() is None and Limits().describe() == "none"
    # a file past the size limit: SIGXFSZ, named
    big = subprocess.run([sys.executable, "-c", f"open({str(tmp_path / 'f')!r}, 'wb').write(b'x' * (2 << 20))"],
                         capture_output=True, text=True, preexec_fn=lim.preexec())
    assert limit_hit(big.returncode, big.stderr, lim) == "its file-size limit of 1 MiB"
    assert limit_hit(1, "cc1: out of memory allocating 4294967312 bytes", C_TOOL_LIMITS) == \
        "its address-space limit of 4 GiB"
    assert limit_hit(1, "error: expected ';'", C_TOOL_LIMITS) is None and limit_hit(0, "", lim) is None


def test_a_dev_zero_include_is_one_line_under_the_memory_limit(tmp_path: Path) -> None:
    """``#include "/dev/zero"`` in a C input drove the preprocessor to 23.7 GB; now it ends
    at its 4 GiB address-space limit with one line that says so."""
    src = tmp_path / "z.c"
    src.write_text('#include "/dev/zero"\nvoid f(int n, float *x) { for (int i = 0; i < n; i++) x[i] = 0; }\n'
                   "int main(void) { return 0; }\n")
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "cudaperf_cli", "optimize", str(src), "-n", "1", "-y",
                           "-o", str(tmp_path / "z.cu"), "--run-dir", str(tmp_path / "runs")],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "address-space limit of 4 GiB" in proc.stderr and "/dev/zero" in proc.stderr, proc.stderr
    assert time.monotonic() - t0 < 120
    assert not (tmp_path / "z.cu").exists()


def test_no_secret_reaches_the_children(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        compile_c: Any) -> None:
    """The evaluation worker (and the candidate's host code in it), nvcc and the isolated
    children (the PyTorch probe, the fx trace) run without the secrets of the CLI's
    environment."""
    from cudaperf_cli.build import build_candidate
    from cudaperf_cli.core import isolated_child
    from cudaperf_cli.evaluate import ConfigSpec, EvalJob, run_evaluation
    from cudaperf_cli.core import param_to_json
    from tests.eval_refs import REF_C, SAXPY_PARAMS

    for k, v in SECRETS.items():
        monkeypatch.setenv(k, v)
    # the worker: the candidate's own code prints what it finds (to stderr: it may write
    # no file, the worker is confined)
    cand = compile_c(
        "#include <stdio.h>\n#include <stdlib.h>\n"
        "int saxpy_cuda(int n, float a, float *x, float *y) {\n"
        '  const char *k = getenv("OPENAI_API_KEY"), *p = getenv("PATH");\n'
        '  fprintf(stderr, "SEEN %s %s\\n", k ? k : "none", p ? "path" : "nopath");\n'
        "  for (int i = 0; i < n; i++) y[i] = a * x[i] + y[i];\n  return 0;\n}\n", "cand")
    ref = compile_c(REF_C, "ref")
    job = EvalJob(ref_lib=str(ref), ref_symbol="cudaperf_ref_saxpy", cand_lib=str(cand), cand_symbol="saxpy_cuda",
                  params=[param_to_json(p) for p in SAXPY_PARAMS], configs=[ConfigSpec("s", {"n": 100}, trials=1)],
                  cpu_reps=1)
    r = run_evaluation(job, timeout_s=60, env={"CUDAPERF_WORKER_BACKEND": "host"})
    assert r.status == "correct", r.message
    assert "SEEN none path" in r.stderr_tail and "sk-test-123" not in r.stderr_tail
    # nvcc: a stand-in that records its environment
    dump = tmp_path / "nvcc-env.json"
    fake = tmp_path / "nvcc"
    fake.write_text(f"#!{sys.executable}\nimport json, os, sys\n"
                    "if '--version' in sys.argv: print('Cuda compilation tools, release 13.0, V13.0.0'); sys.exit(0)\n"
                    f"json.dump(sorted(os.environ), open({str(dump)!r}, 'w'))\nsys.exit(1)\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    built = build_candidate("int x;\n", arch="sm_90", cache_root=tmp_path / "cache", timeout_s=30, nvcc=str(fake))
    assert not built.ok and dump.is_file()
    names = set(json.loads(dump.read_text()))
    assert "PATH" in names and not names & set(SECRETS)
    # an isolated child
    monkeypatch.chdir(REPO)
    with isolated_child("tests._envdump", prefix="envdump-") as (proc, _err):
        out, _ = proc.communicate(timeout=60)
    names = set(json.loads(out))
    assert "PATH" in names and not names & set(SECRETS)


# ----------------------------------------------------------------------------- file_access


@pytest.mark.parametrize("line, bad", [
    ('#include "/etc/passwd"', "absolute"),
    ("#  include </etc/shadow>", "absolute"),
    ('#include "../../.ssh/id_rsa"', "'..'"),
    ('#include_next "/x"', "absolute"),
    ("#define F \"/etc/passwd\"\n#include F", "computed"),
    ('#embed "data.bin"', "#embed"),
    ('asm(".incbin \\"/etc/passwd\\"");', ".incbin"),
    ('#include "~/.netrc"', "absolute"),
    # found by an attack pass: each made gcc or nvcc read the file past the first version
    ('%:include "/etc/hostname"', "absolute"),
    ('??=include "/etc/hostname"', "absolute"),
    ('#inc\\\nlude "/etc/hostname"', "absolute"),
    ('#\finclude "/etc/hostname"', "absolute"),
    ('const char *a = "/*";\n#include "/etc/hostname"\nconst char *b = "*/";', "absolute"),
    ("const char c = '/*';\n#include \"/etc/hostname\"\nconst char d = '*/';", "absolute"),
    ('#line 1 "/etc/hostname"\n#error a', "#line"),
    ('# 1 "/etc/hostname"', "#line"),
    ('asm(".include \\"/etc/hostname\\"");', "assembler"),
    ('__asm__(".inc" "bin \\"/etc/hostname\\"");', "assembler"),
    ('__asm__(".INCBIN \\"/etc/hostname\\"");', "assembler"),
    ('__asm__("\\x2eincbin \\"/etc/hostname\\"");', "assembler"),
    ('#if __has_include("/etc/hostname")\n#endif', "tests a file"),
    ('#pragma GCC dependency "/etc/hostname"', "tests a file"),
])
def test_includes_outside_the_include_path_are_refused(line: str, bad: str) -> None:
    found = check_includes("#include <cuda_runtime.h>\n" + line + "\n__global__ void k() {}\n")
    assert len(found) == 1 and found[0].guard == "file_access" and bad in found[0].message, found
    assert 2 <= found[0].line <= 2 + line.count("\n")


def test_ordinary_includes_pass() -> None:
    ok = ('#include <cuda_runtime.h>\n#include "polybench.h"\n#include <cub/cub.cuh>\n'
          '#include "sub/helper.h"\n// #include "/etc/passwd" in a comment\n/* #include F */\n'
          'printf("included %d of %d\\n", a, b);\nint include_count = 0; // see .include\n'
          'asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));\n#if __has_include(<cuda_fp8.h>)\n#endif\n')
    assert check_includes(ok) == []


def test_build_flags() -> None:
    assert check_build_flags(["-O3", "--use_fast_math", "-lineinfo", "-I.", "-Iinclude"]) is None
    assert "absolute" in check_build_flags(["-I/etc"])
    assert "'..'" in check_build_flags(["-I../../secrets"])
    assert "reads a file first" in check_build_flags(["-include", "x.h"]) or \
        "read a file first" in check_build_flags(["-include", "x.h"])
    assert "from a file" in check_build_flags(["@flags.txt"])


PY_CAND = '''
import torch
from torch.utils.cpp_extension import load_inline
SRC = r"""
#include <torch/extension.h>
{include}
__global__ void k(float* y, const float* x, int n) {{ int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = x[i]; }}
torch::Tensor run(torch::Tensor x) {{ auto y = torch::empty_like(x); k<<<(x.numel() + 255) / 256, 256>>>(y.data_ptr<float>(), x.data_ptr<float>(), x.numel()); return y; }}
"""
ext = load_inline(name="m", cpp_sources="torch::Tensor run(torch::Tensor x);", cuda_sources=SRC,
                  functions=["run"]{flags})
class ModelNew(torch.nn.Module):
    def forward(self, x):
        return ext.run(x)
'''


def test_the_python_candidates_sources_and_build_flags_are_checked() -> None:
    def guards(include: str = "", flags: str = "") -> list[str]:
        return [v.guard for v in check_candidate_source(PY_CAND.format(include=include, flags=flags))]

    assert "file_access" not in guards()
    assert "file_access" in guards(include='#include "/etc/passwd"')
    assert "file_access" in guards(flags=', extra_include_paths=["/home/user"]')
    assert "file_access" in guards(flags=', extra_cuda_cflags=["-include", "/etc/passwd"]')
    assert "file_access" in guards(flags=', extra_cflags=FLAGS')  # computed: unreadable
    assert "file_access" not in guards(flags=', extra_cuda_cflags=["-O3", "--use_fast_math"]')


def test_a_c_candidate_that_includes_a_file_is_rejected_before_nvcc(tmp_path: Path) -> None:
    from cudaperf_cli.build import build_candidate

    marker = tmp_path / "ran"
    fake = tmp_path / "nvcc"
    fake.write_text(f"#!/bin/sh\n[ \"$1\" = --version ] && echo 'release 13.0, V13.0.0' && exit 0\ntouch {marker}\nexit 1\n")
    fake.chmod(0o755)
    built = build_candidate('#include "/etc/passwd"\nint x;\n', arch="sm_90", cache_root=tmp_path / "c",
                            timeout_s=30, nvcc=str(fake))
    assert built.status == "guard_rejected" and not marker.exists()
    assert built.errors.startswith("[file_access] candidate.cu:1: #include of an absolute path")


SECRET_TEXT = "root-secret-MARKER-4711"


def test_a_reply_that_includes_a_file_leaks_nothing_to_the_server(tmp_path: Path) -> None:
    """A model reply whose candidate has ``#include "<a readable file>"``: the candidate is
    ``guard_rejected`` before nvcc reads it, and the next request to the model server does
    not carry the file's text (it carried /etc/passwd's first line before)."""
    from cudaperf_cli.build import find_nvcc
    from cudaperf_cli.core import ToolchainError

    try:
        find_nvcc()
    except ToolchainError:
        pytest.skip("optimize needs nvcc to start a C run")
    secret = tmp_path / "passwd"
    secret.write_text(SECRET_TEXT + "\n")
    src = tmp_path / "saxpy.c"
    src.write_text("void saxpy(int n, float a, float x[n], float y[n]) {\n"
                   "  for (int i = 0; i < n; i++) y[i] = a * x[i] + y[i];\n}\n"
                   "int main(void) { return 0; }\n")
    reply = ("```cuda\n#include <cuda_runtime.h>\n#include \"" + str(secret) + "\"\n"
             "extern \"C\" int saxpy_cuda(int n, float a, float *x, float *y) { return 0; }\n```\n")
    doc = {"id": "x", "object": "chat.completion", "created": 0, "model": "m",
           "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": reply}}]}
    with fake_chat_server(json.dumps(doc).encode()) as (url, bodies):
        env = {**os.environ, "OPENAI_API_KEY": "sk-test"}
        proc = subprocess.run(
            [sys.executable, "-m", "cudaperf_cli", "optimize", str(src), "--policy", "openai",
             "--model", "m", "--base-url", url, "-n", "2", "-y", "-s", "n=1000", "-o", str(tmp_path / "out.cu"),
             "--run-dir", str(tmp_path / "runs"), "--max-retries", "0"],
            capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    assert len(bodies) == 2, proc.stdout + proc.stderr
    assert all(SECRET_TEXT.encode() not in b for b in bodies)
    assert b"file_access" in bodies[1] and b"absolute path" in bodies[1]
    assert SECRET_TEXT not in proc.stdout + proc.stderr


# ----------------------------------------------------------------------------- what goes back to the model

#: Compiler logs of candidates that made nvcc read /tmp/attack/secret.txt past the include
#: guard (found by an attack pass, nvcc 13.0 + gcc): a digraph include, '#line' naming the
#: file, an assembler '.include'.
LEAKING_LOGS = [
    '/tmp/attack/secret.txt(1): error: identifier "SECRET_LINE_ONE" is undefined\n  SECRET_LINE_ONE xyz\n  ^\n\n'
    '/tmp/attack/secret.txt(2): error: expected a ";"\n  SECRET_LINE_TWO abc\n  ^\n\n'
    '2 errors detected in the compilation of "candidate.cu".\n',
    "/tmp/attack/secret.txt:1:2: error: #error a\n    1 | SECRET_LINE_ONE xyz\n      |  ^~~~~\n"
    "/tmp/attack/secret.txt:2:2: error: #error b\n    2 | SECRET_LINE_TWO abc\n      |  ^~~~~\n",
    "/tmp/attack/secret.txt: Assembler messages:\n"
    "/tmp/attack/secret.txt:1: Error: no such instruction: `secret_line_one xyz'\n"
    "/tmp/attack/secret.txt:2: Error: no such instruction: `secret_line_two abc'\n",
    "In file included from candidate.cu:2:\n/etc/hostname:1:1: error: 'SECRET_LINE_ONE' does not name a type\n"
    "    1 | SECRET_LINE_ONE\n      | ^~~~~~~~~~~~~~~\n",
    "c++: error: SECRET_LINE_ONE: linker input file not found\n",
]


@pytest.mark.parametrize("log", LEAKING_LOGS)
def test_diagnostics_located_in_other_files_are_withheld(log: str) -> None:
    from cudaperf_cli.build.nvcc import extract_errors

    text = extract_errors(log)
    assert "secret" not in text.lower(), text
    assert "withheld" in text, text


def test_the_candidates_own_diagnostics_are_kept() -> None:
    from cudaperf_cli.build.nvcc import extract_errors, extract_warnings

    log = ('candidate.cu(12): error: identifier "foo" is undefined\n      y[i] = foo;\n             ^\n\n'
           "candidate.cudafe1.cpp:40:3: error: something in the host pass\n\n"
           "ptxas error   : Entry function '_Z1kPf' uses too much shared data (0x20000 bytes, 0xc000 max)\n\n"
           '2 errors detected in the compilation of "candidate.cu".\n')
    text = extract_errors(log)
    assert text == log.strip(), text
    warn = ("candidate.cu(3): warning #177-D: variable \"z\" was declared but never referenced\n      int z;\n"
            "          ^\n\n/usr/local/cuda/include/x.h(9): warning: quoted header line\n   QUOTED\n")
    got = extract_warnings(warn)
    assert "variable \"z\"" in got and "QUOTED" not in got and "x.h" not in got


def test_python_children_import_this_copy_not_the_current_folders(tmp_path: Path) -> None:
    """A ``cudaperf_cli/`` folder in the current directory (an old clone) must not be what
    an evaluation child imports (Python 3.11+: PYTHONSAFEPATH)."""
    from cudaperf_cli.sandbox import PACKAGE_ROOT, python_child_env, scrubbed_env

    shadow = tmp_path / "cudaperf_cli"
    shadow.mkdir()
    (shadow / "__init__.py").write_text("raise SystemExit('the shadow copy was imported')\n")
    env = python_child_env(scrubbed_env())
    r = subprocess.run([sys.executable, "-m", "cudaperf_cli.sandbox"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=60, check=False)
    if sys.version_info >= (3, 11):
        assert "shadow copy" not in r.stderr, r.stderr
    code = "import cudaperf_cli, os; print(os.path.dirname(os.path.dirname(cudaperf_cli.__file__)))"
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path / "..", env=env,
                       capture_output=True, text=True, timeout=60, check=False)
    assert r.stdout.strip() == PACKAGE_ROOT, r.stderr
