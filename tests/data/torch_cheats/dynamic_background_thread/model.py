# Cheat: forward returns at once and a Python thread launches the kernel 2 ms later, on
# the same stream: the events around forward time nothing, the output is usually written
# by the time it is compared.  Rejected by background_thread (a thread the candidate
# started is alive when forward returns).
import threading
import time

import torch
import torch.nn as nn

from cudaperf_cli.torch_runtime import load_cuda

lib = load_cuda("kernel.cu")


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = float(scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        stream = torch.cuda.current_stream(x.device)

        def later() -> None:
            time.sleep(0.002)
            with torch.cuda.stream(stream):
                lib.scaled_relu(x, y, x.numel(), self.scale)

        threading.Thread(target=later, name="deferred", daemon=True).start()
        return y
