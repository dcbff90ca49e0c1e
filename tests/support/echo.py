"""A tier written in a test, in under 15 lines, as a user writes one: as first-class as hdlib's own. It
drafts, is shown in its own colour in StepThrough, tier_drafts and the CLI summary, and is a letter in
bench orders once registered (test_decoding, test_viz_lookup, test_viz_step_through, test_registry, test_cli,
test_bench)."""

from __future__ import annotations

from hdlib.tiers import DraftTier, Tier


class Echo(DraftTier):
    """Guesses that the text repeats itself: the last token again, and the last three tokens."""

    tier = Tier("echo", "X", "#332288")

    def propose(self, context, budget):
        return [tuple(context[-1:]) * 4, tuple(context[-3:])]


ECHO = Echo.tier
PROMPT = "how are you"  # the tiny model answers it with a run of one token: echo drafts get accepted
