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


#: Seconds ``ray.init`` may take: past them the cluster is unreachable (an address that
#: accepts TCP but is no Ray, such as a web server, makes ``ray.init`` retry for many
#: minutes; a cluster whose token this machine lacks fails after about 20 s).
CONNECT_TIMEOUT_S = 60.0
#: Overrides :data:`CONNECT_TIMEOUT_S` (seconds).
CONNECT_TIMEOUT_ENV = "CUDAPERF_RAY_CONNECT_TIMEOUT_S"


def connect(address: str | None, timeout_s: float | None = None) -> Any:
    """Connect this process to a Ray cluster and return the ``ray`` module.

    ``ray.init`` runs in a thread of its own, bounded by ``timeout_s``.  Ray's C++ core
    installs a failure-signal handler for SIGTERM (it aborts the process: no report, seen
    in CI): ``RAY_DISABLE_FAILURE_SIGNAL_HANDLER=1`` is set for this process unless given,
    and the Python handlers of SIGTERM, SIGHUP and SIGINT (the CLI's Ctrl-C path) are set
    again after ``ray.init``.

    Args:
        address: ``host:port``, ``ray://host:port`` or ``auto``; None: ``$RAY_ADDRESS``, else
            a Ray started in this process (``ray.shutdown()`` stops it).
        timeout_s: seconds ``ray.init`` may take (None: ``$CUDAPERF_RAY_CONNECT_TIMEOUT_S``,
            else :data:`CONNECT_TIMEOUT_S`).

    Raises:
        CudaperfError: Ray is not installed, or the cluster cannot be reached within
            ``timeout_s`` (exit 2).
    """
    import threading

    if timeout_s is None:
        try:
            timeout_s = float(os.environ.get(CONNECT_TIMEOUT_ENV) or CONNECT_TIMEOUT_S)
        except ValueError:
            raise CudaperfError(f"${CONNECT_TIMEOUT_ENV} must be a number of seconds") from None
    given = address
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address:
        reachable(address, via="--ray-address" if given else "RAY_ADDRESS")
    try:
        import ray
    except ImportError:
        raise CudaperfError("--executor ray needs Ray, which is not installed",
                            hint="pip install 'cudaperf[ray]'") from None
    if ray.is_initialized():
        ray.shutdown()
    box: dict[str, BaseException] = {}

    def init() -> None:
        try:
            ray.init(address=address, include_dashboard=False, log_to_driver=False,
                     configure_logging=True, logging_level=logging.ERROR)
        except BaseException as exc:  # noqa: BLE001 - Ray raises several types for this
            box["error"] = exc

    # Ray's C++ core would install absl's failure-signal handler, which turns SIGTERM into an
    # abort (exit -6, no report); Ray reads this variable to leave it out
    os.environ.setdefault("RAY_DISABLE_FAILURE_SIGNAL_HANDLER", "1")
    saved = _python_handlers()
    thread = threading.Thread(target=init, name="cudaperf-ray-init", daemon=True)
    thread.start()
    thread.join(timeout_s)
    _restore(saved)
    where = address or "a new local Ray"
    hint = ("check --ray-address / RAY_ADDRESS; a cluster with token authentication needs "
            "RAY_AUTH_MODE=token and its token here (RAY_AUTH_TOKEN, or ~/.ray/auth_token)")
    if thread.is_alive():
        raise CudaperfError(f"cannot reach the Ray cluster at {where}: no answer from Ray within "
                            f"{timeout_s:.0f} s", hint=hint)
    if "error" in box:
        raise CudaperfError(f"cannot reach the Ray cluster at {where}: {first_line(box['error'])}",
                            hint=hint)
    return ray


_SIGNALS = ("SIGTERM", "SIGHUP", "SIGINT")


def _python_handlers() -> dict[int, Any]:
    """The Python-level handlers of :data:`_SIGNALS` (main thread only; else empty)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return {}
    return {int(getattr(signal, n)): signal.getsignal(getattr(signal, n)) for n in _SIGNALS}


def _restore(saved: dict[int, Any]) -> None:
    """Set ``saved`` handlers again (at the C level too: Ray's core may have replaced them)."""
    import signal

    for num, handler in saved.items():
        if handler is not None:
            try:
                signal.signal(num, handler)
            except (ValueError, OSError, TypeError):
                pass


def reachable(address: str, timeout_s: float = 5.0, via: str = "--ray-address") -> None:
    """Check that a Ray address's ``host:port`` (``ray://`` too) accepts a TCP connection:
    ``ray.init`` retries an unreachable cluster for minutes before it gives up.

    Args:
        address: the address; ``auto`` is not checked (Ray looks for a local cluster).
        timeout_s: seconds for the TCP connection.
        via: where the address came from, for the message (``--ray-address``, ``RAY_ADDRESS``).

    Raises:
        CudaperfError: the address cannot be parsed or nothing answers there (exit 2).
    """
    address = address.strip()
    if address == "auto":
        return
    hostport = address.split("://", 1)[-1].rstrip("/")
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536 or not host:
        raise CudaperfError(f"{via} must be host:port (or ray://host:port, or auto), not '{address}'",
                            hint="an IPv6 address goes in brackets: [::1]:6379")
    if ":" in host and not host.startswith("["):
        raise CudaperfError(f"{via}: put the IPv6 address of '{address}' in brackets, e.g. [::1]:6379")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            pass
    except OSError as exc:
        raise CudaperfError(f"cannot reach the Ray cluster at {address} ({via}): {exc.strerror or exc}",
                            hint="start one with `ray start --head`, or check --ray-address / "
                            "RAY_ADDRESS") from None


@contextlib.contextmanager
def local_head(num_cpus: int, *, num_gpus: int | None = None, start_timeout_s: float = 90.0
               ) -> Iterator[str]:
    """A Ray head node on 127.0.0.1 for tests and benchmarks: yields its ``host:port``.

    Started as ``ray start --head --block`` in a session of its own and stopped by that
    process group (SIGTERM, then SIGKILL): never ``ray stop``, which would stop every Ray
    of this user.  ``num_gpus`` None: Ray detects them.  Token authentication is off
    (``RAY_AUTH_MODE=disabled``) unless the caller's environment sets ``RAY_AUTH_MODE``.

    Raises:
        CudaperfError: the head did not start within ``start_timeout_s`` (no Ray, or it
            failed).
    """
    ray_cli = Path(sys.executable).with_name("ray")
    # the console script, else its module (a wheel installed with pip --target has no script)
    launcher = [str(ray_cli)] if ray_cli.exists() else [sys.executable, "-m", "ray.scripts.scripts"]
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    tmp = tempfile.mkdtemp(prefix="rayh", dir="/tmp")  # short: Ray's socket paths must fit
    cmd = [*launcher, "start", "--head", "--block", "--node-ip-address", "127.0.0.1",
           "--port", str(port), "--num-cpus", str(num_cpus), "--include-dashboard", "false",
           "--disable-usage-stats", "--temp-dir", tmp]
    if num_gpus is not None:
        cmd += ["--num-gpus", str(num_gpus)]
    # no token authentication unless the caller's environment asks for it: Ray 2.5x turns it
    # on for `ray start` whenever ~/.ray/auth_token exists, and a driver without
    # RAY_AUTH_MODE=token could then not connect
    env = dict(os.environ)
    env.setdefault("RAY_AUTH_MODE", "disabled")
    head = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, env=env)
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


__all__ = ["connect", "first_line", "local_head", "reachable"]
