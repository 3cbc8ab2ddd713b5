"""Run a generated candidate against ``Model`` in a child process (tests, debugging).

:func:`check_candidate` starts ``python -m cudaperf_cli.policies.builtin_torch.selfcheck``
(own session, killed with its process group at the time limit), which imports the problem
and the candidate's ``model.py``, builds ``Model`` and ``ModelNew`` from the same
``get_init_inputs()`` under the same seed, copies ``Model.state_dict()`` into ``ModelNew``
(strict), and compares the outputs on fresh ``get_inputs()`` for each constant set, then
the floating-point buffers (running statistics that forward updates).

``emulate=True`` replaces ``cudaperf_cli.torch_runtime.load_cuda`` in the child by an
interpreter of the plan's kernels written with PyTorch CPU ops: it binds the launcher
arguments by the signatures parsed from ``kernel.cu`` (so the argument order of
``model.py`` is checked) and evaluates each kernel's primitives over its ``[outer, R,
inner]`` index space.  That checks the plan, ``model.py`` and the shapes without a GPU; it
does not check the CUDA text (the GPU run does, with ``device="cuda"``).

``host_cuda=True`` runs the CUDA text itself on the CPU instead: ``kernel.cu`` compiled
by the host C++ compiler against :mod:`.hostcuda`'s stand-in (threads as fibers, a small
device: ``CP_HOST_SMS`` multiprocessors of ``CP_HOST_BLOCKS_PER_SM`` resident blocks, so
that small shapes take the launchers' split paths).  Slow (every barrier and shuffle is a
context switch): small shapes only.

Job (stdin)::

    {"problem": path, "model": path/to/model.py, "configs": [{"batch_size": 8}, ...],
     "device": "cpu" | "cuda", "emulate": bool, "host_cuda": bool, "kernels": [...], "atol": 1e-4,
     "rtol": 1e-4, "trials": 2, "seed": 0}

Answer (stdout, last line): ``{"ok": bool, "configs": [{"constants", "ok", "message",
"max_abs_err", "outputs"}], "error": str | null}``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from cudaperf_cli.core import kill_process_group
from cudaperf_cli.policies.builtin_torch.codegen import POOL_SIZES
from cudaperf_cli.policies.builtin_torch.fusion import (
    CRef,
    FusedKernel,
    PRef,
    RowLen,
    XRef,
)

__all__ = ["check_candidate", "kernels_to_json"]

SELFCHECK_MODULE = "cudaperf_cli.policies.builtin_torch.selfcheck"


def kernels_to_json(kernels: Sequence[FusedKernel]) -> list[dict[str, Any]]:
    """What the emulator needs of each kernel: name, primitives, leaves, constants,
    outputs, roles, batch counts (JSON)."""

    def ref(r: Any) -> dict[str, Any]:
        if isinstance(r, PRef):
            return {"p": r.id}
        if isinstance(r, XRef):
            return {"x": [r.key[0], r.key[1]], "at": r.at}
        if isinstance(r, CRef):
            return {"c": [r.value, r.var]}
        if isinstance(r, RowLen):
            return {"R": r.correction}
        raise TypeError(r)

    out = []
    for k in kernels:
        out.append({
            "name": k.name,
            "rows": None if k.rows is None else k.rows.kind,
            "prims": [{"id": p.id, "op": p.op, "ins": [ref(r) for r in p.ins], "params": p.params} for p in k.prims],
            "leaves": [{"x": [l.ref.key[0], l.ref.key[1]], "at": l.ref.at, "domain": l.domain, "full": l.full,
                        "pool": l.pool} for l in k.leaves],
            "consts": [[c.value, c.var] for c in k.consts],
            "outputs": [pid for pid, _ in k.outputs],
            "roles": {str(pid): role for pid, role in k.roles.items()},
            "batch_counts": list(k.batch_counts),
        })
    return out


def check_candidate(
    problem_path: str | os.PathLike[str],
    model_path: str | os.PathLike[str],
    configs: Sequence[Mapping[str, int]],
    *,
    device: str = "cpu",
    emulate: bool = False,
    host_cuda: bool = False,
    kernels: Sequence[FusedKernel] = (),
    atol: float = 1e-4,
    rtol: float = 1e-4,
    trials: int = 2,
    timeout_s: float = 300.0,
    env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Compare ``ModelNew`` (from ``model_path``) with ``Model`` in a child process.

    Args:
        problem_path: the problem file.
        model_path: the candidate's ``model.py`` (its ``kernel.cu`` beside it).
        configs: module-constant sets to check (each rebuilds both models).
        device: ``"cpu"`` (needs ``emulate``) or ``"cuda"``.
        emulate: run the kernels with the PyTorch interpreter (``kernels`` required).
        host_cuda: run ``kernel.cu`` itself on the CPU (:mod:`.hostcuda`; ``device``
            ``"cpu"``; ``env`` may set ``CP_HOST_SMS`` and ``CP_HOST_BLOCKS_PER_SM``).
        kernels: the plan's kernels (for ``emulate``).
        atol, rtol: ``|cand - ref| <= atol + rtol * |ref|`` elementwise; NaN never passes.
        trials: fresh inputs per configuration.
        timeout_s: wall-clock limit of the child, seconds (torch import included).
        env: extra environment for the child.

    Returns:
        The child's answer (see the module docstring); ``{"ok": False, "error": ...}``
        when it timed out or died.
    """
    job = {
        "problem": str(problem_path),
        "model": str(model_path),
        "configs": [dict(c) for c in configs],
        "device": device,
        "emulate": bool(emulate),
        "host_cuda": bool(host_cuda),
        "kernels": kernels_to_json(kernels) if emulate else [],
        "atol": float(atol),
        "rtol": float(rtol),
        "trials": int(trials),
        "seed": 0,
    }
    from cudaperf_cli.sandbox import CUDA_CHILD_LIMITS, python_child_env, scrubbed_env

    child_env = scrubbed_env()  # generated code runs there: no secrets
    if device == "cpu":
        child_env["CUDA_VISIBLE_DEVICES"] = ""
    child_env.update(env or {})
    python_child_env(child_env)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            tempfile.TemporaryDirectory(prefix="cudaperf-host-cuda-") as host_dir:
        job["host_dir"] = host_dir  # the host build of kernel.cu (host_cuda)
        proc = subprocess.Popen(
            [sys.executable, "-m", SELFCHECK_MODULE],
            stdin=subprocess.PIPE, stdout=out, stderr=err, start_new_session=True, env=child_env,
            preexec_fn=CUDA_CHILD_LIMITS.preexec(),
        )
        try:
            proc.communicate(json.dumps(job).encode(), timeout=timeout_s)
        except subprocess.TimeoutExpired:
            kill_process_group(proc)
            proc.wait()
            return {"ok": False, "error": f"the check timed out after {timeout_s:g} s", "configs": []}
        finally:
            kill_process_group(proc)
        out.seek(0)
        err.seek(0)
        text = out.read().decode(errors="replace")
        tail = err.read().decode(errors="replace")[-2000:]
    for line in reversed(text.strip().splitlines()):
        try:
            return json.loads(line)
        except ValueError:
            continue
    return {"ok": False, "error": f"the check exited with status {proc.returncode}: {tail.strip()[-500:]}", "configs": []}


# ---------------------------------------------------------------------------------------
# Child
# ---------------------------------------------------------------------------------------


class _EmuLib:
    """Stands in for a :class:`~cudaperf_cli.torch_runtime.CudaLib`: each launcher runs its
    kernel's primitives with PyTorch ops (CPU)."""

    def __init__(self, torch: Any, kernels: Sequence[Mapping[str, Any]], cu_source: str):
        from cudaperf_cli.torch_runtime import parse_launchers

        self.torch = torch
        self.sigs = {s.name: s for s in parse_launchers(cu_source)}
        self.kernels = {k["name"]: k for k in kernels}
        missing = set(self.kernels) - set(self.sigs)
        if missing:
            raise RuntimeError(f"kernel.cu has no launcher for {sorted(missing)}")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name not in self.__dict__.get("kernels", {}):
            raise AttributeError(name)
        return lambda *args: self.run(name, args)

    def run(self, name: str, args: Sequence[Any]) -> None:
        torch = self.torch
        sig = self.sigs[name]
        k = self.kernels[name]
        if len(args) != len(sig.params):
            raise TypeError(f"{name}() takes {len(sig.params)} arguments, got {len(args)}")
        a = {p.name: v for p, v in zip(sig.params, args)}
        for p in sig.params:
            v = a[p.name]
            if p.pointer:
                want = getattr(torch, p.dtype or "float32")
                if not isinstance(v, torch.Tensor) or v.dtype != want or not v.is_contiguous():
                    raise TypeError(f"{name}: {p.name} must be a contiguous {p.dtype} tensor")
            elif isinstance(v, torch.Tensor):
                raise TypeError(f"{name}: {p.name} must be a number")
        chan = k["rows"] == "channels"  # rows: channels of [N, C, S]; R = N * S, inner = S
        if k["rows"] is None:
            outer, R, inner = int(a["n"]), 1, 1
        else:
            outer, R, inner = int(a["outer"]), int(a["R"]), int(a["inner"])
        N = outer * R if chan else outer * R * inner
        idx = torch.arange(N)
        ridx = torch.arange(outer if chan else outer * inner)
        nred = ridx.numel()

        def rows_of(x: Any) -> Any:
            """Full-domain values as [rows, R, columns]."""
            if chan:
                return x.reshape(-1, outer, inner).transpose(0, 1).reshape(outer, R, 1)
            return x.reshape(outer, R, inner)

        def spread(v: Any) -> Any:
            """Per-row values broadcast to the full domain."""
            if chan:
                return v.view(1, outer, 1).expand(R // inner, outer, inner).reshape(-1)
            return v.view(outer, 1, inner).expand(outer, R, inner).reshape(-1)
        vals: dict[Any, Any] = {}
        leaves = k["leaves"]

        def leaf(i: int) -> Any:
            l = leaves[i]
            t = a[f"L{i}"].reshape(-1)
            where = idx if l["domain"] == "full" else ridx
            if t.dtype == torch.int64:  # class indices, read as floats as the kernel reads them
                t = t.float()
            if l["full"]:
                if t.numel() != where.numel():
                    raise ValueError(f"{name}: L{i} has {t.numel()} elements, the domain {where.numel()}")
                return t[where]
            return t[(where // int(a[f"L{i}_inner"])) % int(a[f"L{i}_size"])]

        leaf_of = {(tuple(l["x"]), l["at"], l["domain"]): i for i, l in enumerate(leaves) if l.get("pool") is None}
        pool_leaf = {l["pool"]: i for i, l in enumerate(leaves) if l.get("pool") is not None}
        roles = {int(p): r for p, r in k["roles"].items()}

        def operand(r: Mapping[str, Any], domain: str) -> Any:
            if "p" in r:
                v = vals[r["p"]]
                if domain == "full" and roles[r["p"]] == "reduced":
                    return spread(v)
                return v
            if "x" in r:
                return leaf(leaf_of[(tuple(r["x"]), r["at"], domain)])
            if "c" in r:
                value, var = r["c"]
                j = k["consts"].index([value, var])
                return torch.tensor(float(a[f"c{j}"]), dtype=torch.float32)
            if "R" in r:
                return torch.tensor(float(R - r["R"]), dtype=torch.float32)
            raise ValueError(r)

        for p in k["prims"]:
            role = roles[p["id"]]
            if p["op"].startswith("red_"):
                x = rows_of(operand(p["ins"][0], "full"))
                if p["op"] == "red_sum":
                    v = x.sum(dim=1)
                elif p["op"] == "red_var":  # what cp_var_sums approximates (double sums)
                    corr = float((p.get("params") or {}).get("corr", 0.0))
                    v = x.double().var(dim=1, correction=corr).float() if R else torch.full((nred,), float("nan"))
                elif p["op"] == "red_lse":  # sum(exp(x - max)), -inf adding 0 (cp_lse_push), in double
                    xd = x.double()
                    m = xd.amax(dim=1, keepdim=True) if R else xd.sum(dim=1, keepdim=True)
                    terms = torch.where(xd == -float("inf"), torch.zeros_like(xd), torch.exp(xd - m))
                    v = terms.sum(dim=1).float()
                elif p["op"] in ("red_argmax", "red_argmin"):  # first max/min, NaN first: as torch
                    v = x.argmax(dim=1) if p["op"] == "red_argmax" else x.argmin(dim=1)
                elif p["op"] == "red_max":
                    v = x.amax(dim=1) if R else torch.full((nred,), -float("inf"))
                else:
                    v = x.amin(dim=1) if R else torch.full((nred,), float("inf"))
                vals[p["id"]] = v.reshape(-1)
                continue
            if p["op"] in ("scan_sum", "scan_prod"):  # along the row: [rows, R, columns]
                x = rows_of(operand(p["ins"][0], "full"))
                rev = bool((p.get("params") or {}).get("reverse"))
                x = x.flip(1) if rev else x
                v = x.cumsum(1) if p["op"] == "scan_sum" else x.cumprod(1)
                if (p.get("params") or {}).get("exclusive"):  # the identity, then v shifted by one
                    ident = torch.zeros_like if p["op"] == "scan_sum" else torch.ones_like
                    v = torch.cat([ident(v[:, :1]), v[:, :-1]], dim=1)
                vals[p["id"]] = (v.flip(1) if rev else v).reshape(-1)
                continue
            if p["op"] in ("ce_pick", "ce_hit", "ce_loss"):  # cross entropy, as codegen's cross_entropy_expr
                ins = [operand(r, role) for r in p["ins"]]
                nan = torch.tensor(float("nan"))
                if p["op"] == "ce_loss":
                    ls, pk, hit = ins
                    v = torch.where(hit > 0, ls - pk, pk)
                    vals[p["id"]] = v if R <= (1 << 24) else torch.full_like(v, float("nan"))
                    continue
                if chan:
                    raise ValueError(f"{name}: {p['op']} over channel rows")
                pos = ((idx // inner) % R).float()
                t, ign = ins[-2], ins[-1]
                at = (pos == t) & (t != ign)
                if p["op"] == "ce_hit":
                    vals[p["id"]] = at.float()
                    continue
                outside = (pos == 0) & (t != ign) & ((t < 0) | (t >= R))
                vals[p["id"]] = torch.where(at, ins[0], torch.where(outside, nan, torch.zeros_like(ins[0])))
                continue
            if p["op"] == "pool":
                i = pool_leaf[p["id"]]
                sizes = {n: int(a[f"L{i}_{n}"]) for n in POOL_SIZES}
                vals[p["id"]] = _pool(torch, a[f"L{i}"], sizes, p["params"]["kind"])[idx]
                continue
            ins = [operand(r, role) for r in p["ins"]]
            vals[p["id"]] = _ew(torch, p["op"], ins, p.get("params") or {})
        for j, pid in enumerate(k["outputs"]):
            out = a[f"O{j}"]
            v = vals[pid]
            want = N if roles[pid] == "full" else nred
            if out.numel() != want:
                raise ValueError(f"{name}: O{j} has {out.numel()} elements, expected {want}")
            out.view(-1).copy_(v.expand(want) if v.numel() == 1 else v)
        for j, _ in enumerate(k.get("batch_counts") or ()):  # cp_count_batch: one more batch
            a[f"B{j}"].add_(1)


def _pool(torch: Any, x: Any, z: Mapping[str, int], kind: str) -> Any:
    """PyTorch's own 3-D pooling of ``x`` (contiguous, ``[..., id, ih, iw]``) with the
    launcher's sizes ``z`` (:data:`~.codegen.POOL_SIZES`), flattened: ``ceil_mode`` is not
    passed to the launcher, so the mode giving the launcher's output extents is used.  An
    average over the last two dims (``kd == id == 1``) is ``avg_pool2d``: ``avg_pool3d``
    refuses a window wider than the unpadded input, which ``avg_pool1d``/``2d`` allow."""
    import torch.nn.functional as F

    vol = x.reshape(-1, 1, z["id"], z["ih"], z["iw"])
    k, s, p = (z["kd"], z["kh"], z["kw"]), (z["sd"], z["sh"], z["sw"]), (z["pd"], z["ph"], z["pw"])
    want = (z["od"], z["oh"], z["ow"])
    flat = kind != "max" and z["kd"] == z["id"] == z["od"] == 1 and z["pd"] == 0
    for ceil in (False, True):
        if kind == "max":
            y = F.max_pool3d(vol, k, s, p, (z["dd"], z["dh"], z["dw"]), ceil_mode=ceil)
        elif flat:
            y = F.avg_pool2d(vol[:, :, 0], k[1:], s[1:], p[1:], ceil_mode=ceil, count_include_pad=bool(z["cip"]),
                             divisor_override=z["div"] or None).unsqueeze(2)
        else:
            y = F.avg_pool3d(vol, k, s, p, ceil_mode=ceil, count_include_pad=bool(z["cip"]),
                             divisor_override=z["div"] or None)
        if tuple(y.shape[2:]) == want:
            return y.reshape(-1)
    raise ValueError(f"no pooling of {tuple(vol.shape)} gives the launcher's output {want}")


def _ew(torch: Any, op: str, x: Sequence[Any], params: Mapping[str, Any]) -> Any:
    a = x[0]
    f32 = torch.float32
    one = torch.tensor(1.0, dtype=f32)
    if op == "powc":
        return torch.pow(a, float(params["exponent"]))
    table = {
        "id": lambda: a, "neg": lambda: -a, "relu": lambda: torch.clamp_min(a, 0.0),
        "sigmoid": lambda: one / (one + torch.exp(-a)), "tanh": lambda: torch.tanh(a),
        "exp": lambda: torch.exp(a), "exp2": lambda: torch.exp2(a), "log": lambda: torch.log(a),
        "log2": lambda: torch.log2(a), "log10": lambda: torch.log10(a), "log1p": lambda: torch.log1p(a),
        "expm1": lambda: torch.expm1(a), "sqrt": lambda: torch.sqrt(a), "rsqrt": lambda: torch.rsqrt(a),
        "abs": lambda: torch.abs(a), "reciprocal": lambda: one / a, "square": lambda: a * a,
        "sin": lambda: torch.sin(a), "cos": lambda: torch.cos(a), "erf": lambda: torch.erf(a),
        "gelu": lambda: a * 0.5 * (1.0 + torch.erf(a * 0.70710678118654752440)),
        "gelu_tanh": lambda: 0.5 * a * (1.0 + torch.tanh(0.79788456080286535588 * (a + 0.044715 * a * a * a))),
        "silu": lambda: a / (one + torch.exp(-a)), "mish": lambda: a * torch.tanh(torch.log1p(torch.exp(a))),
        "selu": lambda: 1.0507009873554804934193349852946 * torch.where(a > 0, a, 1.6732632423543772848170429916717 * torch.expm1(a)),
        "hardsigmoid": lambda: torch.clamp(a + 3.0, 0.0, 6.0) / 6.0,
        "hardswish": lambda: a * torch.clamp(a + 3.0, 0.0, 6.0) / 6.0,
        "softsign": lambda: a / (1.0 + torch.abs(a)),
        "logsigmoid": lambda: torch.clamp_max(a, 0.0) - torch.log1p(torch.exp(-torch.abs(a))),
        "floor": lambda: torch.floor(a), "ceil": lambda: torch.ceil(a), "round": lambda: torch.round(a),
        "trunc": lambda: torch.trunc(a),
        "inf_to_zero": lambda: torch.where(torch.isinf(a), torch.zeros_like(a), a),
    }
    if op in table:
        return table[op]()
    b = x[1]
    binary = {
        "add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b, "div": lambda: a / b,
        "pow": lambda: torch.pow(a, b), "maximum": lambda: torch.maximum(a, b), "minimum": lambda: torch.minimum(a, b),
        "leaky_relu": lambda: torch.where(a > 0, a, a * b), "elu": lambda: torch.where(a > 0, a, b * torch.expm1(a)),
        "celu": lambda: torch.where(a > 0, a, b * torch.expm1(a / b)),
        "xlogy": lambda: torch.xlogy(a, b),
        "lse_finish": lambda: torch.where(b == float("inf"), b, torch.log(a) + b),
    }
    if op in binary:
        return binary[op]()
    c = x[2]
    if op == "softplus":
        return torch.where(a * b > c, a, torch.log1p(torch.exp(a * b)) / b)
    if op == "clamp":
        return torch.minimum(torch.maximum(a, b), c)
    raise ValueError(f"no emulation for '{op}'")


def _compare(torch: Any, got: Any, want: Any, atol: float, rtol: float) -> tuple[bool, str, float]:
    """(ok, why not, max |got - want|); computed on the tensors' device (float64 up to 16M
    elements, float32 beyond)."""
    if not isinstance(got, torch.Tensor):
        return False, f"a {type(got).__name__}, not a tensor", float("inf")
    if tuple(got.shape) != tuple(want.shape):
        return False, f"shape {list(got.shape)}, expected {list(want.shape)}", float("inf")
    if got.dtype != want.dtype:
        return False, f"dtype {got.dtype}, expected {want.dtype}", float("inf")
    if got.device != want.device:
        return False, f"on {got.device}, expected {want.device}", float("inf")
    big = got.numel() > (1 << 24)
    g = got.detach() if big else got.detach().double()
    w = want.detach() if big else want.detach().double()
    nan = int(torch.isnan(g).sum())
    if nan:
        return False, f"{nan} NaN", float("inf")
    err = (g - w).abs()
    bad = err > atol + rtol * w.abs()
    mx = float(err.max()) if err.numel() else 0.0
    n_bad = int(bad.sum())
    if n_bad:
        i = int(bad.reshape(-1).nonzero()[0])
        return False, (f"{n_bad} of {g.numel()} elements off (first at flat {i}: "
                       f"{float(g.reshape(-1)[i])} vs {float(w.reshape(-1)[i])})"), mx
    return True, "", mx


def _child(job: Mapping[str, Any]) -> dict[str, Any]:
    import importlib.util

    import torch

    from cudaperf_cli.problems.pytorch_probe import (
        apply_constants,
        import_problem_module,
    )
    from cudaperf_cli.torch_cpu_math import warm_up_cpu_math

    warm_up_cpu_math(torch)  # the reference and the emulation run on the CPU (pytorch#188792)

    device = job["device"]
    if device == "cuda" and not torch.cuda.is_available():
        return {"ok": False, "error": "no CUDA device", "configs": []}
    model_path = Path(job["model"])
    if job.get("emulate"):
        import cudaperf_cli.torch_runtime as rt

        cu = (model_path.parent / "kernel.cu").read_text()
        emu = _EmuLib(torch, job["kernels"], cu)
        rt.load_cuda = lambda *a, **kw: emu  # type: ignore[assignment]
    elif job.get("host_cuda"):
        import cudaperf_cli.torch_runtime as rt
        from cudaperf_cli.policies.builtin_torch.hostcuda import HostCudaLib

        if device != "cpu":
            return {"ok": False, "error": "host_cuda runs on the CPU (device 'cpu')", "configs": []}
        cu = (model_path.parent / "kernel.cu").read_text()
        host = HostCudaLib(cu, job["host_dir"])
        rt.load_cuda = lambda *a, **kw: host  # type: ignore[assignment]
    problem = import_problem_module(job["problem"], "_cudaperf_check_problem")
    spec = importlib.util.spec_from_file_location("_cudaperf_check_candidate", model_path)
    assert spec is not None and spec.loader is not None
    cand_mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = cand_mod
    spec.loader.exec_module(cand_mod)
    seed = int(job.get("seed", 0))
    results = []
    all_ok = True
    for consts in job["configs"]:
        apply_constants(problem, consts)
        torch.manual_seed(seed)
        init = problem.get_init_inputs()
        torch.manual_seed(seed)
        ref = problem.Model(*init).to(device)
        torch.manual_seed(seed)
        cand = cand_mod.ModelNew(*init).to(device)
        sd = ref.state_dict()
        if sd:
            cand.load_state_dict(sd, strict=True)
        entry: dict[str, Any] = {"constants": dict(consts), "ok": True, "message": "", "max_abs_err": 0.0, "outputs": []}
        for trial in range(int(job.get("trials", 2))):
            torch.manual_seed(1000 + trial)
            inputs = [v.to(device) if isinstance(v, torch.Tensor) else v for v in problem.get_inputs()]
            with torch.no_grad():
                want = ref(*[v.clone() if isinstance(v, torch.Tensor) else v for v in inputs])
                got = cand(*inputs)
            if device == "cuda":
                torch.cuda.synchronize()
            wants = list(want) if isinstance(want, (tuple, list)) else [want]
            gots = list(got) if isinstance(got, (tuple, list)) else [got]
            if len(gots) != len(wants):
                entry.update(ok=False, message=f"{len(gots)} outputs, expected {len(wants)}")
                break
            entry["outputs"] = [list(w.shape) for w in wants]
            for j, (g, w) in enumerate(zip(gots, wants)):
                ok, msg, mx = _compare(torch, g, w, float(job["atol"]), float(job["rtol"]))
                entry["max_abs_err"] = max(entry["max_abs_err"], mx)
                if not ok:
                    entry.update(ok=False, message=f"trial {trial} output {j}: {msg}")
                    break
            if not entry["ok"]:
                break
        if entry["ok"]:  # buffers forward updates (running statistics) must agree too
            cand_b = dict(cand.named_buffers())
            for bname, rb in ref.named_buffers():
                cb = cand_b.get(bname)
                if cb is None:
                    continue
                if not rb.is_floating_point():  # counters (num_batches_tracked): exact
                    if not torch.equal(cb.cpu(), rb.cpu()):
                        entry.update(ok=False, message=f"buffer {bname}: {cb.tolist()} vs {rb.tolist()}")
                        break
                    continue
                ok, msg, _ = _compare(torch, cb, rb, float(job["atol"]), float(job["rtol"]))
                if not ok:
                    entry.update(ok=False, message=f"buffer {bname}: {msg}")
                    break
        all_ok = all_ok and entry["ok"]
        results.append(entry)
    return {"ok": all_ok, "configs": results, "error": None}


def main() -> int:
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    job = json.loads(sys.stdin.read() or "{}")
    try:
        result = _child(job)
    except BaseException as exc:  # noqa: BLE001 - one line back to the parent
        import traceback

        traceback.print_exc()
        result = {"ok": False, "error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:400]}", "configs": []}
    proto.write(json.dumps(result) + "\n")
    proto.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
