"""A stand-in worker for the child-protocol tests (``python -m tests.child_fake``).

Its job (one JSON line on stdin) says what to do: ``{"log": path, "prepare_s": seconds
before asking for the GPU, "exit_before_ready": bool, "run_s": seconds after go,
"hog_bytes": resident bytes to hold after go, "spawn": seconds a grandchild sleeps}``.  It
appends ``<event> <time.monotonic()>`` lines to ``log`` (one clock for every process on
Linux), so a test can order the events of several children.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from cudaperf_cli.evaluate.child import STATE_ENV, State, read_job, result_channel, wait_for_gpu


def main() -> int:
    emit = result_channel()
    state = State(os.environ.get(STATE_ENV))
    job = read_job()
    log = job.get("log")

    def note(event: str) -> None:
        if log:
            with open(log, "a") as fh:
                fh.write(f"{event} {os.getpid()} {time.monotonic():.6f}\n")

    note("start")
    state.set("prepare")
    print("fake: printed on fd 1 goes to stderr", flush=True)
    time.sleep(float(job.get("prepare_s", 0)))
    if job.get("exit_before_ready"):
        note("early")
        emit({"status": "early"})
        return 0
    waited = wait_for_gpu(emit, state)
    note("go")
    state.set("run")
    if job.get("spawn"):
        child = subprocess.Popen(["sleep", str(job["spawn"])])
        print(f"fake: spawned pid {child.pid}", file=sys.stderr, flush=True)
    hog = None
    if job.get("hog_bytes"):
        hog = bytearray(int(job["hog_bytes"]))
        for i in range(0, len(hog), 4096):  # touch every page: resident
            hog[i] = 1
        note("hogging")
    time.sleep(float(job.get("run_s", 0)))
    note("end")
    emit({"status": "ok", "waited": waited, "held": len(hog or b"")})
    return 0


if __name__ == "__main__":
    code = main()
    sys.stderr.flush()
    os._exit(code)
