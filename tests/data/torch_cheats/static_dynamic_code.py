"""Cheat: the real forward is hidden in a string and run with exec."""

import torch
import torch.nn as nn

_code = "def forward(self, x):\n    import torch\n    return torch.relu(x)\n"
_ns = {}
exec(_code, _ns)


class ModelNew(nn.Module):
    forward = _ns["forward"]
