"""A small transformer MLP block compiled with mybackend: the compiled code fails when it runs."""

import torch
import torch.nn as nn
from mybackend import my_backend


class Block(nn.Module):
    def __init__(self, dim: int = 32):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, 4 * dim)
        self.down = nn.Linear(4 * dim, dim)

    def forward(self, x):
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


torch.manual_seed(0)
model = torch.compile(Block(), backend=my_backend)
print(model(torch.randn(2, 8, 32)).shape)
