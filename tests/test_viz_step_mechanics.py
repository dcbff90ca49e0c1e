"""hdlib.viz.step_mechanics: the mechanics widget on a tiny model's generation, following its slider."""

from __future__ import annotations

import numpy as np
from support.oracle import OracleTier
from support.tiny import VOCAB
from support.tiny_prompts import MAX_NEW, PROMPTS

import hdlib
from hdlib import viz
from hdlib.tiers import BONUS, Tier

C, R, M, S, T = Tier.CONTEXT, Tier.RECYCLED, Tier.MODEL, Tier.STATISTICS, BONUS


def test_step_mechanics_follow_the_slider(lm, truths):
    prompt = PROMPTS["first"]
    tiers = [OracleTier(truths[prompt], VOCAB, seed=1, tier=t) for t in (C, M)]
    gen = hdlib.generate(lm, prompt, tiers=tiers, max_new_tokens=MAX_NEW, budget=8)
    mech = viz.StepMechanics(gen, past_shown=3)
    for k in (0, len(gen.steps) - 1):
        mech.step.value = k
        step = gen.steps[k]
        n = len(step.tree)
        assert np.array(mech.mask_fig.figure.data[0].z).shape == (n, 3 + n)
        before = list(mech.cache_fig.figure.data[0].z[0])
        assert sum(before[3:]) == len(step.accepted_nodes)
        assert [int(p) for p in mech.positions_fig.figure.data[0].text[1]] == [
            step.context_len - 1 + d for d in step.tree.depths
        ]
