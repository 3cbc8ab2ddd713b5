"""Cheat: ModelNew inherits the reference Model (through an alias) and adds nothing."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

from reference import Model

Base = Model

ext = load_inline(name="noop", cpp_sources="void noop() {}", functions=["noop"])


class ModelNew(Base):
    def forward(self, x):
        ext.noop()
        return super().forward(x)
