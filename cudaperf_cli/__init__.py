"""cudaperf: port hot C functions to verified, timed and scored CUDA kernels."""

__version__ = "0.1.0"
