"""Where a suite's problems run: ``--executor local`` or ``--executor ray`` (docs/executor.md).

Both executors run the same unit of work, one problem's whole ``optimize`` command (its
compiles, its reference, its GPU evaluations, all its turns), through :func:`run_launch`:
the command in its own session (process group), its stdout and stderr into the bench's
log files, killed as a group past its time limit.  What differs is *where*:

- :class:`LocalExecutor`: a child process of this machine (the bench's ``-j`` threads each
  wait on one); GPU evaluations of concurrent problems take turns on the per-GPU lock
  (``evaluate/gpu_lock.py``).
- :class:`RayExecutor`: a Ray task on some node of a Ray cluster (``--ray-address``, else
  ``$RAY_ADDRESS``, else a Ray started in this process).  The task declares one CPU and
  ``1 / per_gpu`` of a GPU (none on a cluster without GPUs: compile-only runs), so Ray places
  at most ``per_gpu`` problems on each GPU of the cluster and sets the task's
  ``CUDA_VISIBLE_DEVICES``; problems sharing a GPU overlap their compiles and take turns on
  that node's GPU lock for their evaluations.  Why a problem and not a candidate is the
  task: a problem's reference outputs (up to the device's memory, GBs) and its build cache
  stay on one node instead of crossing the network for every candidate.

Files: the Ray executor needs the suite and the output folder on a filesystem every node
shares (NFS, Lustre, or one machine): the task checks a token file the driver wrote into
the output folder (its name holds the token: two benches on one folder do not clash) and
refuses to run where it cannot read it (the problem's status is ``error``, with a message
that says so; such an executor error is not a result, so ``--resume`` runs the problem
again).  Nothing is copied between nodes.

Faults (Ray): a task whose worker process or node dies is submitted again, at most
``retries`` more times; each loss is recorded in the problem's ``placement.lost``.  On the
node a detached watcher (:mod:`cudaperf_cli.bench.reaper`) kills the command's process
tree when the Ray worker dies (Ray kills a worker's direct children only, with SIGKILL), so
a lost or cancelled task leaves nothing running to overlap its retry.  Ctrl-C on the driver
cancels every task (``ray.cancel(force=True)``: its worker is killed, the watcher stops the
command's tree) and the bench writes the report of what finished.  The driver sets no deadline of its
own: a task may wait in Ray's queue for as long as the cluster is busy, the node enforces
the problem's time limit once it runs, and Ray reports a lost node.

Environment on a node: the node's own, overlaid with the driver's ``CUDAPERF_*`` and
``OPENAI_*`` variables and the variable ``--api-key-env`` names (a model policy needs its
key on the node); the ``optimize`` command is the node's ``python -m cudaperf_cli optimize``
(or ``$CUDAPERF_BENCH_OPTIMIZE`` as the driver set it).
"""

from __future__ import annotations

import os
import select
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

from cudaperf_cli.core import CudaperfError, terminate_process_groups
from cudaperf_cli.ray_cluster import first_line
from cudaperf_cli.sandbox import python_child_env

#: Names of ``--executor``.
EXECUTORS = ("local", "ray")
#: Overrides the optimize command of every problem (tests: a stand-in script).
OPTIMIZE_CMD_ENV = "CUDAPERF_BENCH_OPTIMIZE"
#: Driver environment variables (prefixes) a Ray task's ``optimize`` gets on its node.
FORWARDED_PREFIXES = ("CUDAPERF_", "OPENAI_")
#: Name prefix of the token file (``<prefix><token>``) in the output folder that a Ray task
#: must read to run (shared filesystem).
NODE_CHECK_FILE = ".cudaperf-node-check-"
#: Name prefix of the file (``<prefix><token>``) the driver creates on Ctrl-C: every task's
#: watcher then stops its command's tree (:mod:`cudaperf_cli.bench.reaper`).
STOP_FILE = ".cudaperf-stop-"


@dataclass(frozen=True)
class Launch:
    """One problem's optimize run, as an executor receives it.

    Attributes:
        problem_id: the suite's id of the problem (for messages and bookkeeping).
        args: optimize's arguments (the file first), every path absolute.
        stdout_path, stderr_path: where the command's output goes (files in the output folder).
        limit_s: the problem's time limit, seconds (the whole process group is killed past it).
        env_overlay: variables set on top of the environment of the machine that runs it.
        base_cmd: the command before ``args``; None: ``<that machine's python> -m cudaperf_cli
            optimize``.
        out_dir: the bench's output folder, absolute (a Ray task checks it sees it).
        token: the token of ``out_dir/<NODE_CHECK_FILE><token>`` (empty: not checked); the
            driver creates ``out_dir/<STOP_FILE><token>`` on Ctrl-C (the watcher's signal).
        cwd: the folder the command runs in: the bench's (a relative problem path and
            ``./cudaperf.toml`` mean the same on every node); "" for this process's.
    """

    problem_id: str
    args: list[str]
    stdout_path: str
    stderr_path: str
    limit_s: float
    env_overlay: dict[str, str] = field(default_factory=dict)
    base_cmd: list[str] | None = None
    out_dir: str = ""
    token: str = ""
    cwd: str = ""

    def command(self) -> list[str]:
        """The whole command line on the machine that runs it."""
        return [*(self.base_cmd or [sys.executable, "-m", "cudaperf_cli", "optimize"]), *self.args]


@dataclass
class Finished:
    """What running a :class:`Launch` gave.

    Attributes:
        rc: the command's exit status (negative: killed by that signal); None when it never
            ran (``error`` says why).
        timed_out: killed at the time limit.
        wall_s: seconds from start to exit, on the machine that ran it.
        cmd: the command line that ran.
        placement: where it ran: ``executor``, ``node`` (host name), ``node_ip``, ``node_id``
            (Ray), ``gpus`` (the GPU ids it was given, ``None`` for every visible one),
            ``attempts`` and ``lost`` (the failed attempts' reasons).
        error: why it could not run (the problem's status is then ``error``); "" otherwise.
        interrupted: stopped by Ctrl-C (not a result).
    """

    rc: int | None
    timed_out: bool = False
    wall_s: float = 0.0
    cmd: list[str] = field(default_factory=list)
    placement: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    interrupted: bool = False


def run_launch(launch: Launch, env: dict[str, str], *, die_with_parent: bool = False,
               on_start: Callable[[subprocess.Popen], bool] | None = None) -> Finished:
    """Run ``launch`` here: its command in a new session, output to its log files, the
    group killed (SIGTERM, then SIGKILL) past ``launch.limit_s``.

    Args:
        launch: what to run.
        env: the command's whole environment.
        die_with_parent: the command's process tree is killed when this process dies (a
            Ray worker): a detached watcher is started for it (:mod:`cudaperf_cli.bench.reaper`).
        on_start: called with the process right after it started; returning False kills it
            at once (a stop that came while it was starting).

    Returns:
        :class:`Finished` (``placement`` left empty: the executor fills it).

    Raises:
        OSError: the log files cannot be written or the command cannot start.
    """
    cmd = launch.command()
    t0 = time.monotonic()
    timed_out = False
    with open(launch.stdout_path, "wb") as out_fh, open(launch.stderr_path, "wb") as err_fh:
        if not die_with_parent:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out_fh, stderr=err_fh,
                                    start_new_session=True, env=env, cwd=launch.cwd or None)
        else:  # the command waits at a gate until its watcher runs (no window without one)
            gate_r, gate_w = os.pipe()
            try:
                proc = subprocess.Popen(  # the gate is its stdin, /dev/null once open
                    ["/bin/sh", "-c", 'read -r _ || exit 125; exec </dev/null; exec "$@"', "sh", *cmd],
                    stdin=gate_r, stdout=out_fh, stderr=err_fh,
                    start_new_session=True, env=env, cwd=launch.cwd or None)
                os.close(gate_r)
                gate_r = -1
                stop = ["--stop-file", str(Path(launch.out_dir) / (STOP_FILE + launch.token))] \
                    if launch.token else []
                ready_r, ready_w = os.pipe()
                try:
                    subprocess.run([sys.executable, "-m", "cudaperf_cli.bench.reaper", "--watch",
                                    str(os.getpid()), "--root", str(proc.pid), *stop, "--ready-fd", str(ready_w)],
                                   env=env, timeout=60, pass_fds=(ready_w,), stdin=subprocess.DEVNULL,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    os.close(ready_w)
                    ready_w = -1
                    # the gate opens once the watcher has recorded ROOT (or died: EOF), 60 s at most
                    if select.select([ready_r], [], [], 60.0)[0]:
                        os.read(ready_r, 1)
                finally:
                    for fd in (ready_r, ready_w):
                        if fd >= 0:
                            os.close(fd)
                os.write(gate_w, b"go\n")
            finally:
                for fd in (gate_r, gate_w):
                    if fd >= 0:
                        os.close(fd)
        if on_start is not None and not on_start(proc):
            terminate_process_groups([proc])
        try:
            rc: int | None = proc.wait(timeout=launch.limit_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            terminate_process_groups([proc])  # optimize kills its own children first
            rc = proc.wait()
        except BaseException:  # an exception in the waiting thread: the group goes too
            terminate_process_groups([proc])
            raise
        finally:
            try:  # the worker of a finished optimize, if any, dies with its group
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    return Finished(rc=rc, timed_out=timed_out, wall_s=time.monotonic() - t0, cmd=cmd)


class Executor(Protocol):
    """What the bench's runner needs from an executor (both are thread-safe)."""

    name: str

    def default_jobs(self) -> int:
        """Problems in flight at once when ``-j`` is not given."""

    def describe(self) -> dict[str, Any]:
        """The executor and the machines it runs on, for the report (JSON-able)."""

    def execute(self, launch: Launch) -> Finished:
        """Run one problem's command to its end (blocks; called from the runner's threads)."""

    def stop(self) -> None:
        """Ctrl-C: no new command starts; running ones are killed."""

    def close(self) -> None:
        """Give back what the executor started (a local Ray)."""


def driver_env() -> dict[str, str]:
    """The environment an ``optimize`` child of this machine gets: this process's, made to
    import this copy of cudaperf (:func:`~cudaperf_cli.sandbox.python_child_env`); the
    user's model-server key stays (the CLI's own child, not a candidate)."""
    return python_child_env(dict(os.environ, PYTHONUNBUFFERED="1"))


def base_command() -> list[str] | None:
    """``$CUDAPERF_BENCH_OPTIMIZE`` split, or None (``python -m cudaperf_cli optimize``)."""
    override = os.environ.get(OPTIMIZE_CMD_ENV, "").strip()
    return shlex.split(override) if override else None


class LocalExecutor:
    """Child processes of this machine (see the module docstring)."""

    name = "local"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._procs: dict[int, subprocess.Popen] = {}

    def default_jobs(self) -> int:
        return os.cpu_count() or 1

    def describe(self) -> dict[str, Any]:
        return {"executor": self.name, "address": None,
                "nodes": [{"node": socket.gethostname(), "cpus": os.cpu_count(),
                           "gpus": _visible_gpus()}]}

    def execute(self, launch: Launch) -> Finished:
        if self._stop.is_set():
            return Finished(rc=None, interrupted=True)

        def started(proc: subprocess.Popen) -> bool:
            with self._lock:
                self._procs[proc.pid] = proc
                return not self._stop.is_set()

        fin = run_launch(launch, driver_env(), on_start=started)
        with self._lock:
            self._procs = {k: p for k, p in self._procs.items() if p.poll() is None}
        fin.placement = {"executor": self.name, "node": socket.gethostname(),
                         "gpus": os.environ.get("CUDA_VISIBLE_DEVICES"), "attempts": 1, "lost": []}
        fin.interrupted = self._stop.is_set() and not fin.timed_out and fin.rc != 0
        return fin

    def stop(self) -> None:
        with self._lock:
            self._stop.set()
            procs = list(self._procs.values())
        terminate_process_groups(procs)

    def close(self) -> None:
        pass


def _visible_gpus() -> int | None:
    """GPUs nvidia-smi lists on this machine (None: no nvidia-smi)."""
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return 0
    return sum(1 for ln in out.stdout.splitlines() if ln.startswith("GPU "))


# -- Ray ---------------------------------------------------------------------------------


class NotShared(RuntimeError):
    """A Ray node does not see the bench's output folder (no shared filesystem)."""


def node_env(overlay: dict[str, str]) -> dict[str, str]:
    """The environment of an ``optimize`` child on a Ray node: the node's, with ``overlay``
    (the driver's forwarded variables) on top, made to import the node's cudaperf."""
    return python_child_env(dict(os.environ, **overlay, PYTHONUNBUFFERED="1"))


def run_on_node(launch: Launch) -> Finished:
    """The body of a Ray task (runs on the node): check the shared folder, run the command,
    say where it ran.

    Raises:
        NotShared: the node cannot read ``launch.out_dir``'s token.
    """
    import ray

    node = socket.gethostname()
    if launch.token:
        try:
            seen = (Path(launch.out_dir) / (NODE_CHECK_FILE + launch.token)).read_text().strip()
        except OSError:
            seen = ""
        if seen != launch.token:
            raise NotShared(
                f"node {node} ({ray.util.get_node_ip_address()}) does not see the output folder "
                f"{launch.out_dir}: --executor ray needs the suite and -o on a filesystem every "
                "node shares (docs/executor.md)")
    ctx = ray.get_runtime_context()
    gpus = [str(g) for g in ray.get_gpu_ids()]
    fin = run_launch(launch, node_env(launch.env_overlay), die_with_parent=True)
    fin.placement = {"executor": "ray", "node": node, "node_ip": ray.util.get_node_ip_address(),
                     "node_id": ctx.get_node_id(), "gpus": gpus, "pid": os.getpid(),
                     **_gpu_identity(gpus[0] if gpus else None)}
    return fin


def _gpu_identity(device: str | None) -> dict[str, Any]:
    """``gpu_name`` and ``gpu_uuid`` of GPU ``device`` of this node (nvidia-smi), for the
    candidates' ``gpu`` field: the report's machine is the driver's, the GPU is the node's."""
    if device is None:
        return {"gpu_name": None, "gpu_uuid": None}
    from cudaperf_cli.bench.env import nvidia_smi

    smi = nvidia_smi(device) or {}
    return {"gpu_name": smi.get("name"), "gpu_uuid": smi.get("uuid")}


def forwarded_env(api_key_env: str | None) -> dict[str, str]:
    """The driver's variables a node's ``optimize`` gets (see the module docstring)."""
    out = {k: v for k, v in os.environ.items() if k.startswith(FORWARDED_PREFIXES)}
    if api_key_env and api_key_env in os.environ:
        out[api_key_env] = os.environ[api_key_env]
    return out


class RayExecutor:
    """Ray tasks on the nodes of a Ray cluster (see the module docstring).

    Args:
        address: the cluster (``host:port`` or ``ray://...``); None: ``$RAY_ADDRESS``, else a
            Ray started in this process (stopped by :meth:`close`).
        out_dir: the bench's output folder (the token for the shared-filesystem check goes
            there).
        per_gpu: problems placed on one GPU at once (each task asks for ``1/per_gpu`` GPU).
        retries: submissions again after a lost worker or node, per problem.
        api_key_env: the variable ``--api-key-env`` names (forwarded to the nodes).

    Raises:
        CudaperfError: Ray is not installed, or the cluster cannot be reached (exit 2).
    """

    name = "ray"

    def __init__(self, address: str | None, out_dir: Path, *, per_gpu: int = 2, retries: int = 2,
                 api_key_env: str | None = None) -> None:
        from cudaperf_cli.ray_cluster import connect

        self._ray = connect(address)
        self.address = address or os.environ.get("RAY_ADDRESS") or None
        self.per_gpu = max(1, int(per_gpu))
        self.retries = max(0, int(retries))
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._refs: dict[str, Any] = {}
        ray = self._ray
        self.gpus = int(ray.cluster_resources().get("GPU", 0))
        self.cpus = int(ray.cluster_resources().get("CPU", 0))
        self.token = secrets.token_hex(16)
        self.out_dir = out_dir.resolve()
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.token_file = self.out_dir / (NODE_CHECK_FILE + self.token)
        self.token_file.write_text(self.token + "\n")
        for old in self.out_dir.glob(STOP_FILE + "*"):  # an earlier stopped run's (close())
            try:
                old.unlink()
            except OSError:
                pass
        self.overlay = forwarded_env(api_key_env)
        self._task = ray.remote(run_on_node)

    def default_jobs(self) -> int:
        return max(1, self.gpus * self.per_gpu if self.gpus else self.cpus)

    def _gpu_share(self) -> float:
        return 1.0 / self.per_gpu if self.gpus else 0.0

    def describe(self) -> dict[str, Any]:
        nodes = []
        for n in self._ray.nodes():
            if not n.get("Alive"):
                continue
            res = n.get("Resources") or {}
            nodes.append({"node": n.get("NodeManagerHostname"), "node_ip": n.get("NodeManagerAddress"),
                          "node_id": n.get("NodeID"), "cpus": int(res.get("CPU", 0)),
                          "gpus": int(res.get("GPU", 0))})
        try:  # the cluster actually joined ("auto" and $RAY_ADDRESS resolved)
            gcs = self._ray.get_runtime_context().gcs_address
        except Exception:  # noqa: BLE001 - older Ray
            gcs = None
        return {"executor": self.name, "address": self.address, "gcs_address": gcs,
                "started_here": self.address is None,
                "nodes": nodes, "cpus": self.cpus, "gpus": self.gpus, "per_gpu": self.per_gpu,
                "gpu_per_task": self._gpu_share(), "retries": self.retries,
                "ray_version": self._ray.__version__}

    def execute(self, launch: Launch) -> Finished:
        ray = self._ray
        from ray import exceptions as rx

        launch = Launch(**{**launch.__dict__, "env_overlay": {**self.overlay, **launch.env_overlay},
                           "out_dir": str(self.out_dir), "token": self.token})
        lost: list[dict[str, Any]] = []
        t0 = time.monotonic()
        for attempt in range(1, self.retries + 2):
            with self._lock:
                if self._stop.is_set():
                    return Finished(rc=None, interrupted=True)
                ref = self._task.options(num_cpus=1, num_gpus=self._gpu_share(), max_retries=0,
                                         retry_exceptions=False).remote(launch)
                self._refs[launch.problem_id] = ref
            try:
                fin: Finished = ray.get(ref)  # no deadline here: see the module docstring
            except rx.TaskCancelledError:
                return Finished(rc=None, interrupted=True)
            except (rx.WorkerCrashedError, rx.NodeDiedError, rx.ObjectLostError,
                    rx.OwnerDiedError, rx.LocalRayletDiedError) as exc:
                if self._stop.is_set():
                    return Finished(rc=None, interrupted=True)
                lost.append({"attempt": attempt, "reason": f"{type(exc).__name__}: {first_line(exc)}"})
                continue
            except rx.RayTaskError as exc:
                if self._stop.is_set():
                    return Finished(rc=None, interrupted=True)
                cause = exc.cause if isinstance(getattr(exc, "cause", None), BaseException) else exc
                return Finished(rc=None, placement=self._placement(None, attempt, lost),
                                error=first_line(cause), wall_s=time.monotonic() - t0)
            finally:
                with self._lock:
                    self._refs.pop(launch.problem_id, None)
            fin.placement = self._placement(fin.placement, attempt, lost)
            fin.interrupted = self._stop.is_set() and not fin.timed_out and fin.rc != 0
            return fin
        return Finished(rc=None, placement=self._placement(None, self.retries + 1, lost),
                        error=f"lost {len(lost)} time(s) (worker or node died): {lost[-1]['reason']}",
                        wall_s=time.monotonic() - t0)

    def _placement(self, where: dict[str, Any] | None, attempts: int,
                   lost: list[dict[str, Any]]) -> dict[str, Any]:
        return {**(where or {"executor": self.name}), "attempts": attempts, "lost": list(lost)}

    def stop(self) -> None:
        """Cancel every task: its Ray worker is killed, and the watcher on the node stops the
        command's process tree (:mod:`cudaperf_cli.bench.reaper`).  (A polite
        ``ray.cancel`` raises nothing in a task that waits on a child process.)"""
        with self._lock:
            self._stop.set()
            refs = list(self._refs.values())
        try:  # every watcher sees it within a poll, whatever Ray's cancel does
            (self.out_dir / (STOP_FILE + self.token)).write_text("stop\n")
        except OSError:
            pass
        for ref in refs:
            try:
                self._ray.cancel(ref, force=True)
            except Exception:  # noqa: BLE001 - already finished
                pass

    def close(self) -> None:
        """Disconnect (a Ray started here stops) and remove the token file; idempotent.

        A stop file (:meth:`stop`) stays: a watcher on a loaded node may poll it only
        seconds later (removed one second after the stop, it was missed once, and a hung
        problem's child outlived the bench).  The next executor in the same folder removes
        it; its token is this run's, which no later run's watcher reads."""
        try:
            self._ray.shutdown()
        except Exception:  # noqa: BLE001
            pass
        try:
            self.token_file.unlink()
        except OSError:
            pass


def make_executor(name: str, *, out_dir: Path, address: str | None = None, per_gpu: int = 2,
                  retries: int = 2, api_key_env: str | None = None) -> Executor:
    """The executor ``--executor NAME`` asks for.

    Raises:
        CudaperfError: an unknown name, Ray missing or its cluster unreachable (exit 2).
    """
    if name == "local":
        return LocalExecutor()
    if name == "ray":
        return RayExecutor(address, out_dir, per_gpu=per_gpu, retries=retries,
                           api_key_env=api_key_env)
    raise CudaperfError(f"--executor must be one of {', '.join(EXECUTORS)}, not '{name}'")


__all__ = [
    "EXECUTORS",
    "NODE_CHECK_FILE",
    "OPTIMIZE_CMD_ENV",
    "Executor",
    "Finished",
    "Launch",
    "LocalExecutor",
    "NotShared",
    "RayExecutor",
    "base_command",
    "driver_env",
    "forwarded_env",
    "make_executor",
    "run_launch",
    "run_on_node",
]
