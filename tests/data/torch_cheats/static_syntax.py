"""Not a cheat, just broken: a syntax error."""

class ModelNew(nn.Module):
    def forward(self, x)
        return x
