"""The adversarial suite on a real GPU (``@pytest.mark.gpu``; skipped without a CUDA device):
every C cheat of ``tests/data/cheats/c_*/`` goes through ``cudaperf optimize --policy replay``
(one turn, the cheat as the model's reply: the whole loop a user gets, as the H200 session fed
cheats to it) and must end with a status of its ``cheat.toml``'s ``expect`` (and its
``match`` in the message), with no result file written; the honest controls
(``c_control_*``) must be verified, written, and clean under compute-sanitizer where it is
installed.  The runner is benchmarks/adversarial.py's, which also prints the table:
``python benchmarks/adversarial.py``.

Run: ``python -m pytest -m gpu tests/test_gpu_adversarial.py -n 4`` (each case is one
optimize child; their GPU work is serialised by the GPU lock).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import cuda_device_status, load_benchmark

pytestmark = pytest.mark.gpu

adv = load_benchmark("adversarial")
C_CHEATS = {c.name: c for c in adv.load_c_cheats()}


@pytest.fixture(scope="module")
def gpus() -> int:
    usable, why = cuda_device_status()
    if not usable:
        pytest.skip(f"needs a CUDA device: {why}")
    count, _ = adv.gpu_count()
    return count


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("adversarial")


@pytest.mark.parametrize("name", sorted(C_CHEATS))
def test_cheat_is_rejected_and_control_passes(name: str, gpus: int, work: Path) -> None:
    from cudaperf_cli.evaluate.sanitize import find_compute_sanitizer

    cheat = C_CHEATS[name]
    if cheat.min_gpus > gpus:
        pytest.skip(f"{name} cheats with {cheat.min_gpus} GPUs; {gpus} here")
    tool = find_compute_sanitizer()
    if cheat.expect == ["sanitizer_error"] and tool is None:
        pytest.skip(f"{name} is caught by compute-sanitizer, which is not installed here")
    v = adv.run_c_cheat(cheat, work, timeout_s=60.0)
    print(f"\n{name}: {v.status} ({v.caught_by}) in {v.seconds:.1f} s: {v.message[:400]}"
          f"\nsanitize: {v.sanitize}")
    why = f"{v.status}: {v.message}\nexpected {cheat.expect}, match {cheat.match!r}; written={v.written}"
    assert v.status != "error", why
    if cheat.control:
        assert v.status in adv.CONTROL_OK and v.written, why
        if tool is not None:
            assert v.sanitize.get("result") == "clean", (why, v.sanitize)
    else:
        assert not v.written, f"a cheat was written as the run's result: {why}"
        assert v.status in cheat.expect, why
        if cheat.match is not None:
            assert cheat.match.lower() in v.message.lower(), why
    assert v.ok, why
