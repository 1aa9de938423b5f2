"""The simulated engine's physics (profiles, traces, one decode step) and the evaluation of
policies against the oracle in virtual time."""
