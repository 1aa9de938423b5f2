"""spec-controller: learns at run time which batch sizes profit from speculative decoding."""

__version__ = "0.1.0"
