# Cheat: forward returns a tensor subclass that computes its values only when something
# reads them (__torch_dispatch__): the timed calls launch nothing, the checks that read the
# output launch the real kernel.  Rejected by output_type (type(out) is not torch.Tensor).
import torch
import torch.nn as nn
from torch.utils._pytree import tree_map

from cudaperf_cli.torch_runtime import load_cuda

lib = load_cuda("kernel.cu")


class LazyScaledRelu(torch.Tensor):
    @staticmethod
    def __new__(cls, x: torch.Tensor, scale: float):
        r = torch.Tensor._make_wrapper_subclass(cls, x.shape, strides=x.stride(), dtype=x.dtype,
                                                device=x.device)
        r._x, r._scale, r._y = x, scale, None
        return r

    def materialize(self) -> torch.Tensor:
        if self._y is None:
            y = torch.empty_like(self._x)
            lib.scaled_relu(self._x, y, self._x.numel(), self._scale)
            self._y = y
        return self._y

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        def unwrap(a):
            return a.materialize() if isinstance(a, LazyScaledRelu) else a

        return func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs or {}))


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = float(scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return LazyScaledRelu(x.contiguous(), self.scale)
