"""Bench results made by hand for the paper's tests (tests/test_viz_paper_*.py): the machine they ran
on, and the metrics of a given speedup and MAT."""

from __future__ import annotations

from hdlib.bench import Metrics

MACHINE = {"cpu": "AMD EPYC", "vector_flags": ["avx", "avx2"], "threads": 2, "torch": "2.13.0+cpu"}


def metrics(speedup: float, mat: float) -> Metrics:
    return Metrics(speedup, mat, 20.0 * speedup, 0.1, 0.01, 1.0, {})
