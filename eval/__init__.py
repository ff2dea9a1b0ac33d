"""Engram evaluation: the regression taskset (eval.regression) and public benchmarks (eval.locomo)."""
