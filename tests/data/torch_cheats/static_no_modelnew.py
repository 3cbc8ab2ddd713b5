"""Cheat: no ModelNew at all (the class is called something else)."""

import torch
import torch.nn as nn


class FastModel(nn.Module):
    def forward(self, x):
        return x
