"""spec-controller: learns at run time which batch sizes profit from speculative decoding."""

__version__ = "0.2.0.dev0"     # (0.1.0: the first round; CHANGELOG "Unreleased" is since then)
