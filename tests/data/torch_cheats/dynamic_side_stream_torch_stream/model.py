# Cheat: the kernel runs on a torch.cuda.Stream() of the candidate's, which waits for the
# current stream (the inputs) but is never waited for: forward returns with the work
# pending, so events on the current stream do not see it.  Rejected by side_stream (the
# output changes after forward returned; the profiler sees a kernel off the current stream).
import torch
import torch.nn as nn

from cudaperf_cli.torch_runtime import load_cuda

lib = load_cuda("kernel.cu")


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = float(scale)
        self.side = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        if self.side is None:
            self.side = torch.cuda.Stream(device=x.device)
        self.side.wait_stream(torch.cuda.current_stream(x.device))
        lib.scaled_relu(x, y, x.numel(), self.scale, stream=self.side)
        return y
