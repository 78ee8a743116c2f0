"""effbench: a reproducible benchmark of PyTorch CNN training performance."""

__version__ = "0.1.0"
