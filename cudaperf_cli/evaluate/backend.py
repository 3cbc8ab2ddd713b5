"""Device access for the evaluation worker: cuda.core (device, allocations, events) and
cuda.bindings.driver (copies, memsets, synchronize, error names).

Only the worker process imports this module's CUDA parts.  Every driver call's result is
checked; a failure raises :class:`CudaCallError` carrying the call, the code and its name.

Copies (``h2d``/``d2h``) are synchronous; ``d2d`` and the memsets are enqueued on the
legacy default stream (``CU_STREAM_LEGACY``), the stream the candidate's kernels run on, so
they are ordered with the candidate's work and with the timing events recorded there.

:class:`HostBackend` emulates a device in host memory.  It exists for CPU tests of the
worker's logic (selected with ``CUDAPERF_WORKER_BACKEND=host``); its "candidate" is a C
function that receives host pointers.
"""

from __future__ import annotations

import ctypes
import re
import time
from dataclasses import dataclass
from typing import Any

import numpy as np


class NoDevice(Exception):
    """No usable CUDA device; ``str(exc)`` says why."""


class CudaCallError(Exception):
    """A driver call failed.

    Attributes:
        call: the call (``cuMemcpyDtoH`` ...).
        code: the CUresult value.
        name: its name (``CUDA_ERROR_ILLEGAL_ADDRESS``).
        string: the driver's description.
    """

    def __init__(self, call: str, code: int, name: str, string: str):
        super().__init__(f"{call} failed: {name} ({code}): {string}")
        self.call = call
        self.code = code
        self.name = name
        self.string = string


@dataclass
class Allocation:
    """A device allocation: ``ptr`` is the device address, ``nbytes`` its size in bytes."""

    ptr: int
    nbytes: int
    handle: Any = None


# ---------------------------------------------------------------------------------------
# Error names
# ---------------------------------------------------------------------------------------


def _norm(name: str) -> str:
    return re.sub(r"[^a-z]", "", name.lower().replace("cudaerror", "").replace("cuda_error", ""))


def driver_error(code: int) -> tuple[str, str]:
    """(name, description) of a CUresult value; never raises."""
    try:
        from cuda.bindings import driver as drv

        try:
            enum = drv.CUresult(int(code))
        except ValueError:
            return f"CUresult {code}", "unknown driver error code"
        name = enum.name
        try:
            err, s = drv.cuGetErrorString(enum)
            string = s.decode() if int(err) == 0 and s else ""
        except Exception:  # noqa: BLE001 - no driver loaded
            string = ""
        return name, string or name
    except Exception:  # noqa: BLE001
        return f"CUresult {code}", ""


#: cudaGetErrorString texts of the errors candidates commonly return (no libcudart needed).
_RUNTIME_STRINGS = {
    1: "invalid argument",
    2: "out of memory",
    3: "initialization error",
    9: "invalid configuration argument",
    35: "CUDA driver version is insufficient for CUDA runtime version",
    98: "invalid device function",
    100: "no CUDA-capable device is detected",
    209: "no kernel image is available for execution on the device",
    222: "the provided PTX was compiled with an unsupported toolchain.",
    400: "invalid resource handle",
    700: "an illegal memory access was encountered",
    701: "too many resources requested for launch",
    702: "the launch timed out and was terminated",
    716: "misaligned address",
    719: "unspecified launch failure",
}


def runtime_error(code: int) -> tuple[str, str]:
    """(name, description) of a cudaError_t value (what a candidate returns); never raises.

    The description is the driver's for the matching driver error when the names agree
    (most do: ``cudaErrorIllegalAddress`` = ``CUDA_ERROR_ILLEGAL_ADDRESS`` = 700).
    """
    name = f"cudaError {code}"
    try:
        from cuda.bindings import runtime as rt

        try:
            name = rt.cudaError_t(int(code)).name
        except ValueError:
            return name, "not a CUDA runtime error code"
    except Exception:  # noqa: BLE001
        return name, ""
    if int(code) in _RUNTIME_STRINGS:
        return name, _RUNTIME_STRINGS[int(code)]
    dname, dstring = driver_error(code)
    if _norm(dname) == _norm(name) and dstring and dstring != dname:
        return name, dstring
    return name, name


# ---------------------------------------------------------------------------------------
# Backends
# ---------------------------------------------------------------------------------------


class Backend:
    """Interface used by the worker; see :class:`CudaBackend` for the semantics.

    Every backend accounts for its own device allocations: ``live_bytes`` (allocated and
    not freed, bytes) and ``peak_bytes`` (the most ``live_bytes`` ever was).  Memory the
    candidate allocates itself (``cudaMalloc`` in its code) is not seen here.
    """

    kind = "abstract"
    live_bytes: int = 0
    peak_bytes: int = 0

    def _counted(self, a: "Allocation") -> "Allocation":
        live = self.__dict__.setdefault("_live", {})
        live[a.ptr] = a.nbytes
        self.live_bytes += a.nbytes
        self.peak_bytes = max(self.peak_bytes, self.live_bytes)
        return a

    def _uncounted(self, a: "Allocation") -> bool:
        """Forget ``a``; False when it was not live (freed twice)."""
        live = self.__dict__.setdefault("_live", {})
        n = live.pop(a.ptr, None)
        if n is None:
            return False
        self.live_bytes -= n
        return True

    def info(self) -> dict[str, Any]:
        raise NotImplementedError

    @property
    def l2_bytes(self) -> int:
        return int(self.info().get("l2_bytes") or 0)

    def alloc(self, nbytes: int) -> Allocation:
        """A device allocation of ``nbytes`` bytes (counted in ``live_bytes``).

        Raises:
            CudaCallError: the allocation failed (out of memory...).
        """
        raise NotImplementedError

    def free(self, a: Allocation) -> None:
        """Free ``a`` (a second free of one allocation is ignored)."""
        raise NotImplementedError

    def h2d(self, dst: int, src: np.ndarray) -> None:
        raise NotImplementedError

    def d2h(self, dst: np.ndarray, src: int) -> None:
        raise NotImplementedError

    def d2d(self, dst: int, src: int, nbytes: int) -> None:
        raise NotImplementedError

    def memset32(self, ptr: int, value: int, count: int) -> None:
        raise NotImplementedError

    def memset8(self, ptr: int, value: int, count: int) -> None:
        raise NotImplementedError

    def synchronize(self) -> int:
        """Wait for the device; return the CUresult (0 = success), never raise for it."""
        raise NotImplementedError

    def mem_free(self) -> int | None:
        """Free device memory now, bytes; None when unknown (the host emulation)."""
        return None

    def timer(self) -> "Timer":
        raise NotImplementedError

    def close(self) -> None:
        pass


class Timer:
    """A start/stop pair on the legacy default stream; :meth:`ms` after a synchronize."""

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def ms(self) -> float:
        raise NotImplementedError

    def wait_stop(self) -> None:
        """Block until the stream has reached the stop event (not the whole device)."""
        raise NotImplementedError


def _import_core() -> Any:
    """The cuda.core namespace (>= 1.0), else ``cuda.core.experimental`` (older releases)."""
    try:
        import cuda.core as core

        if hasattr(core, "Device") and hasattr(core, "EventOptions"):
            return core
    except ImportError:
        pass
    import cuda.core.experimental as core_exp  # type: ignore[import-not-found]

    return core_exp


def core_version() -> str:
    try:
        import cuda.core as core

        return str(getattr(core, "__version__", "unknown"))
    except Exception:  # noqa: BLE001
        return "unavailable"


def bindings_version() -> str:
    try:
        import cuda.bindings as b

        return str(getattr(b, "__version__", "unknown"))
    except Exception:  # noqa: BLE001
        return "unavailable"


def _driver_version_text(v: int) -> str:
    return f"{v // 1000}.{(v % 1000) // 10}"


class _CudaTimer(Timer):
    """Two cuda.core events; a failure (a sticky error after a faulting kernel) is a
    :class:`CudaCallError`, as for every other driver call, not cuda.core's own error."""

    def __init__(self, backend: "CudaBackend"):
        self._b = backend
        self._start = backend._core_call("cuEventCreate", backend._new_event)
        self._stop = backend._core_call("cuEventCreate", backend._new_event)

    def start(self) -> None:
        self._b._core_call("cuEventRecord", self._b._record, self._start)

    def stop(self) -> None:
        self._b._core_call("cuEventRecord", self._b._record, self._stop)

    def ms(self) -> float:
        return float(self._b._core_call("cuEventElapsedTime", lambda: self._stop - self._start))

    def wait_stop(self) -> None:
        self._b._core_call("cuEventSynchronize", self._stop.sync)


class CudaBackend(Backend):
    """A CUDA device through cuda.core + cuda.bindings.driver.

    The device's primary context is made current (``Device(ordinal).set_current()``); the
    candidate's statically linked CUDA runtime uses that same context, so pointers from
    :meth:`alloc` are valid in the candidate.
    """

    kind = "cuda"

    def __init__(self, ordinal: int = 0):
        try:
            from cuda.bindings import driver as drv
        except Exception as exc:  # noqa: BLE001
            raise NoDevice(f"cuda.bindings is not importable: {exc}") from None
        self.drv = drv
        try:
            (err,) = drv.cuInit(0)
        except Exception as exc:  # noqa: BLE001 - libcuda.so missing
            raise NoDevice(f"the NVIDIA driver (libcuda.so) cannot be loaded: {exc}") from None
        if int(err) != 0:
            name, string = driver_error(int(err))
            raise NoDevice(f"cuInit failed: {name}: {string}")
        err, count = drv.cuDeviceGetCount()
        if int(err) != 0:
            name, string = driver_error(int(err))
            raise NoDevice(f"cuDeviceGetCount failed: {name}: {string}")
        if count == 0:
            raise NoDevice("the driver reports no CUDA device (check CUDA_VISIBLE_DEVICES)")
        if not 0 <= ordinal < count:
            raise NoDevice(f"device {ordinal} requested but only {count} visible")
        try:
            self.core = _import_core()
        except Exception as exc:  # noqa: BLE001
            raise NoDevice(f"cuda.core is not importable: {exc}") from None
        self.ordinal = ordinal
        self.dev = self.core.Device(ordinal)
        self.dev.set_current()
        legacy = getattr(self.core, "LEGACY_DEFAULT_STREAM", None)
        self.stream = legacy if legacy is not None else self.dev.default_stream
        self.hstream = drv.CUstream(drv.CU_STREAM_LEGACY)
        err, self.cu_dev = drv.cuDeviceGet(ordinal)
        self._check("cuDeviceGet", err)
        self._event_options = self._make_event_options()
        self._info = self._query_info()

    # -- helpers -----------------------------------------------------------------------

    def _check(self, call: str, err: Any) -> None:
        code = int(err)
        if code != 0:
            name, string = driver_error(code)
            raise CudaCallError(call, code, name, string)

    def _p(self, ptr: int) -> Any:
        return self.drv.CUdeviceptr(int(ptr))

    def _make_event_options(self) -> Any:
        opts = self.core.EventOptions
        try:
            return opts(timing_enabled=True)
        except TypeError:  # cuda.core < 0.4 spelled it enable_timing
            return opts(enable_timing=True)

    def _core_call(self, call: str, fn: Any, *args: Any) -> Any:
        """``fn(*args)`` (a cuda.core call); its exception becomes a :class:`CudaCallError`
        named after the driver's error in its text (``CUDA_ERROR_ILLEGAL_ADDRESS``)."""
        try:
            return fn(*args)
        except CudaCallError:
            raise
        except Exception as exc:  # noqa: BLE001 - cuda.core raises its own CUDAError
            m = re.search(r"CUDA_ERROR_\w+", str(exc))
            name = m.group(0) if m else type(exc).__name__
            code = getattr(getattr(self.drv, "CUresult", None), name, -1)
            raise CudaCallError(call, int(code) if code is not None else -1, name, str(exc)) from exc

    def _new_event(self) -> Any:
        return self.dev.create_event(options=self._event_options)

    def _record(self, event: Any) -> None:
        self.stream.record(event)

    def _attr(self, name: str) -> int | None:
        try:
            attr = getattr(self.drv.CUdevice_attribute, name)
            err, val = self.drv.cuDeviceGetAttribute(attr, self.cu_dev)
            return int(val) if int(err) == 0 else None
        except Exception:  # noqa: BLE001
            return None

    def _query_info(self) -> dict[str, Any]:
        drv = self.drv
        info: dict[str, Any] = {"available": True, "backend": "cuda", "ordinal": self.ordinal}
        try:
            err, raw = drv.cuDeviceGetName(256, self.cu_dev)
            info["name"] = raw.split(b"\0", 1)[0].decode() if int(err) == 0 else "unknown"
        except Exception:  # noqa: BLE001
            info["name"] = "unknown"
        major = self._attr("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR")
        minor = self._attr("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR")
        info["compute_capability"] = f"{major}.{minor}"
        info["arch"] = f"sm_{major}{minor}"
        info["sm_count"] = self._attr("CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT")
        info["l2_bytes"] = self._attr("CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE") or 0
        info["clock_khz"] = self._attr("CU_DEVICE_ATTRIBUTE_CLOCK_RATE")
        info["memory_clock_khz"] = self._attr("CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE")
        info["memory_bus_width_bits"] = self._attr("CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH")
        info["max_shared_per_block_optin_bytes"] = self._attr(
            "CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"
        )
        info["max_shared_per_sm_bytes"] = self._attr(
            "CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR"
        )
        info["max_registers_per_sm"] = self._attr(
            "CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR"
        )
        info["max_threads_per_sm"] = self._attr(
            "CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR"
        )
        info["warp_size"] = self._attr("CU_DEVICE_ATTRIBUTE_WARP_SIZE")
        try:
            err, total = drv.cuDeviceTotalMem(self.cu_dev)
            info["memory_total_bytes"] = int(total) if int(err) == 0 else None
        except Exception:  # noqa: BLE001
            info["memory_total_bytes"] = None
        try:
            err, free, total = drv.cuMemGetInfo()
            info["memory_free_bytes"] = int(free) if int(err) == 0 else None
        except Exception:  # noqa: BLE001
            info["memory_free_bytes"] = None
        try:
            err, v = drv.cuDriverGetVersion()
            info["driver_cuda_version"] = _driver_version_text(int(v)) if int(err) == 0 else None
        except Exception:  # noqa: BLE001
            info["driver_cuda_version"] = None
        info["driver_version"] = _nvidia_driver_version()
        info["cuda_core_version"] = core_version()
        info["cuda_bindings_version"] = bindings_version()
        return info

    # -- Backend -----------------------------------------------------------------------

    def info(self) -> dict[str, Any]:
        return dict(self._info)

    def alloc(self, nbytes: int) -> Allocation:
        size = max(int(nbytes), 1)
        try:
            buf = self.dev.allocate(size, stream=self.stream)
        except Exception as exc:  # noqa: BLE001 - cuda.core raises CUDAError
            m = re.search(r"CUDA_ERROR_[A-Z_]+", str(exc))
            name = m.group(0) if m else type(exc).__name__
            code = -1
            try:
                code = int(getattr(self.drv.CUresult, name))
            except (AttributeError, TypeError, ValueError):
                pass
            raise CudaCallError(
                "Device.allocate", code, name, f"allocating {size} bytes failed: {exc}"
            ) from None
        return self._counted(Allocation(ptr=int(buf.handle), nbytes=size, handle=buf))

    def free(self, a: Allocation) -> None:
        if not self._uncounted(a):
            return
        try:
            a.handle.close()
        except Exception:  # noqa: BLE001 - after a sticky error, freeing may fail too
            pass

    def h2d(self, dst: int, src: np.ndarray) -> None:
        if src.nbytes:
            assert src.flags.c_contiguous
            (err,) = self.drv.cuMemcpyHtoD(self._p(dst), src.ctypes.data, src.nbytes)
            self._check("cuMemcpyHtoD", err)

    def d2h(self, dst: np.ndarray, src: int) -> None:
        if dst.nbytes:
            assert dst.flags.c_contiguous
            (err,) = self.drv.cuMemcpyDtoH(dst.ctypes.data, self._p(src), dst.nbytes)
            self._check("cuMemcpyDtoH", err)

    def d2d(self, dst: int, src: int, nbytes: int) -> None:
        if nbytes:
            (err,) = self.drv.cuMemcpyDtoDAsync(self._p(dst), self._p(src), nbytes, self.hstream)
            self._check("cuMemcpyDtoDAsync", err)

    def memset32(self, ptr: int, value: int, count: int) -> None:
        if count:
            (err,) = self.drv.cuMemsetD32Async(self._p(ptr), value, count, self.hstream)
            self._check("cuMemsetD32Async", err)

    def memset8(self, ptr: int, value: int, count: int) -> None:
        if count:
            (err,) = self.drv.cuMemsetD8Async(self._p(ptr), value, count, self.hstream)
            self._check("cuMemsetD8Async", err)

    def synchronize(self) -> int:
        (err,) = self.drv.cuCtxSynchronize()
        return int(err)

    def mem_free(self) -> int | None:
        try:
            err, free, _total = self.drv.cuMemGetInfo()
        except Exception:  # noqa: BLE001 - a fake or old driver: unknown
            return None
        return int(free) if int(err) == 0 else None

    def timer(self) -> Timer:
        return _CudaTimer(self)


def _nvidia_driver_version() -> str | None:
    try:
        with open("/proc/driver/nvidia/version") as fh:
            m = re.search(r"Kernel Module\s+(?:for \S+\s+)?([0-9.]+)", fh.read())
            return m.group(1) if m else None
    except OSError:
        return None


class _HostTimer(Timer):
    def __init__(self) -> None:
        self.t0 = self.t1 = 0.0

    def start(self) -> None:
        self.t0 = time.perf_counter()

    def stop(self) -> None:
        self.t1 = time.perf_counter()

    def ms(self) -> float:
        return (self.t1 - self.t0) * 1e3

    def wait_stop(self) -> None:
        pass  # everything is synchronous


class HostBackend(Backend):
    """Test-only emulation: "device" memory is host memory, everything is synchronous."""

    kind = "host"

    def __init__(self, ordinal: int = 0):
        self._bufs: dict[int, np.ndarray] = {}

    def info(self) -> dict[str, Any]:
        return {
            "available": True,
            "backend": "host",
            "name": "host emulation (tests only; not a GPU)",
            "compute_capability": None,
            "arch": None,
            "l2_bytes": 0,
        }

    def alloc(self, nbytes: int) -> Allocation:
        buf = np.empty(max(int(nbytes), 1) + 256, dtype=np.uint8)
        ptr = (buf.ctypes.data + 255) // 256 * 256
        self._bufs[ptr] = buf
        return self._counted(Allocation(ptr=ptr, nbytes=max(int(nbytes), 1), handle=buf))

    def free(self, a: Allocation) -> None:
        self._uncounted(a)
        self._bufs.pop(a.ptr, None)

    def h2d(self, dst: int, src: np.ndarray) -> None:
        ctypes.memmove(dst, src.ctypes.data, src.nbytes)

    def d2h(self, dst: np.ndarray, src: int) -> None:
        ctypes.memmove(dst.ctypes.data, src, dst.nbytes)

    def d2d(self, dst: int, src: int, nbytes: int) -> None:
        ctypes.memmove(dst, src, nbytes)

    def memset32(self, ptr: int, value: int, count: int) -> None:
        if count:
            arr = np.ctypeslib.as_array((ctypes.c_uint32 * count).from_address(ptr))
            arr[:] = value

    def memset8(self, ptr: int, value: int, count: int) -> None:
        ctypes.memset(ptr, value, count)

    def synchronize(self) -> int:
        return 0

    def timer(self) -> Timer:
        return _HostTimer()


def make_backend(kind: str, ordinal: int = 0) -> Backend:
    """``"cuda"`` (default) or ``"host"`` (test-only emulation).

    Raises:
        NoDevice: no usable CUDA device.
    """
    if kind == "host":
        return HostBackend(ordinal)
    return CudaBackend(ordinal)


__all__ = [
    "Allocation",
    "Backend",
    "CudaBackend",
    "CudaCallError",
    "HostBackend",
    "NoDevice",
    "Timer",
    "driver_error",
    "make_backend",
    "runtime_error",
]
