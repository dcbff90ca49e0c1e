"""The worked examples (`>>>`) in the engine's and the tiers' docstrings run, and say what they show."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import hdlib.engine
import hdlib.tiers

MODULES = sorted(
    f"{package.__name__}.{info.name}"
    for package in (hdlib.engine, hdlib.tiers)
    for info in pkgutil.iter_modules(package.__path__)
)


@pytest.mark.parametrize("name", MODULES)
def test_the_examples_in_the_docstrings_hold(name):
    module = importlib.import_module(name)
    failures, _ = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert failures == 0, f"{name}: {failures} example(s) no longer hold (run python -m doctest -v on it)"


def test_the_engine_and_the_tiers_have_at_least_ten_worked_examples():
    finder = doctest.DocTestFinder()
    examples = [t for name in MODULES for t in finder.find(importlib.import_module(name)) if t.examples]
    assert len(examples) >= 10, [t.name for t in examples]
