"""Connecting to a Ray cluster, and a loopback head for tests and benchmarks.

Used by ``cudaperf bench --executor ray`` (``bench/executor.py``) and ``cudaperf train policy
--executor ray`` (``rl/evaluate.py``).  Ray is optional (``pip install 'cudaperf[ray]'``):
this module imports it only inside :func:`connect`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

from cudaperf_cli.core import CudaperfError


def connect(address: str | None) -> Any:
    """Connect this process to a Ray cluster and return the ``ray`` module.

    Args:
        address: ``host:port``, ``ray://host:port`` or ``auto``; None: ``$RAY_ADDRESS``, else
            a Ray started in this process (``ray.shutdown()`` stops it).

    Raises:
        CudaperfError: Ray is not installed, or the cluster cannot be reached (exit 2).
    """
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address:
        reachable(address)
        use_token_if_present()  # before Ray reads its configuration
    try:
        import ray
    except ImportError:
        raise CudaperfError("--executor ray needs Ray, which is not installed",
                            hint="pip install 'cudaperf[ray]'") from None
    try:
        if ray.is_initialized():
            ray.shutdown()
        ray.init(address=address, include_dashboard=False, log_to_driver=False,
                 configure_logging=True, logging_level=logging.ERROR)
    except Exception as exc:  # noqa: BLE001 - Ray raises several types for this
        raise CudaperfError(f"cannot reach the Ray cluster at {address or 'a new local Ray'}: "
                            f"{first_line(exc)}",
                            hint="check --ray-address / RAY_ADDRESS; a cluster with token "
                            "authentication needs its token here (RAY_AUTH_TOKEN, or "
                            "~/.ray/auth_token: `ray get-auth-token`)") from None
    return ray


def use_token_if_present() -> bool:
    """Send Ray's authentication token when this machine has one and ``$RAY_AUTH_MODE`` is
    unset: sets ``RAY_AUTH_MODE=token`` in this process (its Ray workers inherit it).

    A Ray 2.5x+ head started with ``ray start`` turns token authentication on by itself
    when ``~/.ray/auth_token`` exists (any local ``ray.init()`` writes one), and a driver
    whose mode is unset then fails after about 20 s ("Failed to connect"); a driver in
    token mode connects to clusters with and without authentication (measured with Ray
    2.60).  Returns whether token mode is on.
    """
    mode = os.environ.get("RAY_AUTH_MODE")
    if mode is not None:
        return mode.strip().lower() == "token"
    path = os.environ.get("RAY_AUTH_TOKEN_PATH") or str(Path.home() / ".ray" / "auth_token")
    if not (os.environ.get("RAY_AUTH_TOKEN") or Path(path).is_file()):
        return False
    os.environ["RAY_AUTH_MODE"] = "token"
    if "ray" in sys.modules:  # Ray caches its configuration at import: refresh it, as Ray does
        try:
            from ray._raylet import Config

            Config.initialize("")
        except Exception:  # noqa: BLE001 - another Ray version: the variable alone
            pass
    return True


def reachable(address: str, timeout_s: float = 5.0) -> None:
    """Check that a Ray address's ``host:port`` (``ray://`` too) accepts a TCP connection:
    ``ray.init`` retries an unreachable cluster for minutes before it gives up.

    Raises:
        CudaperfError: the address cannot be parsed or nothing answers there (exit 2).
    """
    if address == "auto":
        return
    hostport = address.split("://", 1)[-1].rstrip("/")
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        raise CudaperfError(f"--ray-address must be host:port (or ray://host:port), not '{address}'")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            pass
    except OSError as exc:
        raise CudaperfError(f"cannot reach the Ray cluster at {address}: {exc.strerror or exc}",
                            hint="start one with `ray start --head`, or check --ray-address / "
                            "RAY_ADDRESS") from None



@contextlib.contextmanager
def local_head(num_cpus: int, *, num_gpus: int | None = None, start_timeout_s: float = 90.0
               ) -> Iterator[str]:
    """A Ray head node on 127.0.0.1 for tests and benchmarks: yields its ``host:port``.

    Started as ``ray start --head --block`` in a session of its own and stopped by that
    process group (SIGTERM, then SIGKILL): never ``ray stop``, which would stop every Ray
    of this user.  ``num_gpus`` None: Ray detects them.

    Raises:
        CudaperfError: the ``ray`` command is not next to this Python, or the head did not
            start within ``start_timeout_s``.
    """
    ray_cli = Path(sys.executable).with_name("ray")
    if not ray_cli.exists():
        raise CudaperfError(f"no ray command next to {sys.executable}", hint="pip install 'cudaperf[ray]'")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    tmp = tempfile.mkdtemp(prefix="rayh", dir="/tmp")  # short: Ray's socket paths must fit
    cmd = [str(ray_cli), "start", "--head", "--block", "--node-ip-address", "127.0.0.1",
           "--port", str(port), "--num-cpus", str(num_cpus), "--include-dashboard", "false",
           "--disable-usage-stats", "--temp-dir", tmp]
    if num_gpus is not None:
        cmd += ["--num-gpus", str(num_gpus)]
    head = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + start_timeout_s
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if head.poll() is not None or time.monotonic() > deadline:
                    raise CudaperfError(f"the Ray head did not start (exit {head.poll()})") from None
                time.sleep(0.2)
        yield f"127.0.0.1:{port}"
    finally:
        for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 30.0)):
            try:
                os.killpg(head.pid, sig)
                head.wait(timeout=wait)
                break
            except (ProcessLookupError, subprocess.TimeoutExpired):
                continue
        shutil.rmtree(tmp, ignore_errors=True)



def first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[0] if lines else type(exc).__name__


__all__ = ["connect", "first_line", "local_head", "reachable", "use_token_if_present"]
