"""The budget policies (`hdlib.engine.budget`): a fixed budget is checked against what a draft tree can
usefully hold. The adaptive policy, the value-ranked tree, is tested in test_value.py."""

from __future__ import annotations

import pytest

from hdlib.engine.budget import MAX_FIXED_BUDGET, FixedBudget
from hdlib.engine.tree import DraftTree
from hdlib.errors import HDError
from hdlib.tiers import ContextTier


def test_fixed_budget_rejects_negative_values_and_more_than_a_tree_can_usefully_hold():
    root = DraftTree(root=5)
    assert FixedBudget(0).gate(ContextTier(), root, [5], ()) == 0
    assert FixedBudget(MAX_FIXED_BUDGET).gate(ContextTier(), root, [5], ()) == MAX_FIXED_BUDGET
    with pytest.raises(HDError):
        FixedBudget(-1)
    with pytest.raises(HDError, match=f"more than a draft tree can usefully hold: at most {MAX_FIXED_BUDGET}"):
        FixedBudget(MAX_FIXED_BUDGET + 1)
    with pytest.raises(HDError, match="at most"):
        FixedBudget(100_000)


