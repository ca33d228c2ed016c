"""seq2final: learn from a sequence of shifted datasets, adapt to the final time point."""

__version__ = "0.1.0"
