"""The paper's HD (its authors' code) and hdlib's, point by point, with where hdlib does each:
`CONTRASTS`, one `Contrast` per aspect, and `contrast_table`, the same as a `Table`.

tests/test_viz_contrasts.py checks each claim of the table against the code.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hdlib.viz.table import Table


@dataclass(frozen=True)
class Contrast:
    """One way the paper's HD (as its authors' code runs it) and hdlib's differ."""

    aspect: str
    paper: str
    hdlib: str
    where: str  # where hdlib does it


CONTRASTS: tuple[Contrast, ...] = (
    Contrast(
        "drafts",
        "at most 7 drafts of 4 tokens, laid side by side as separate chains (each sees only its own "
        "earlier tokens); the longest accepted chain is kept",
        "every tier's drafts merged into one trie rooted at the newest token (a shared prefix is verified "
        "once); the longest accepted path is kept",
        "hdlib.engine.tree.DraftTree, hdlib.engine.drafter",
    ),
    Contrast(
        "budget",
        "fixed: 7 drafts x 4 = 28 draft tokens a step",
        "auto (the default): the value-ranked tree verifies the nodes most likely to be accepted, as many "
        "as pay under the forward time measured on this machine, chosen each step; a fixed budget when "
        "asked (budget=16, @16)",
        "hdlib.engine.value.ValueBudget",
    ),
    Contrast(
        "keys",
        "the newest token (context store, model database); the newest 2 tokens, else 1 (statistics)",
        "the longest suffix of the text found: 4 down to 2 tokens (context; model, in its 5-grams), "
        "8 down to 1 (statistics)",
        "ContextSettings, ModelSettings, StatisticsSettings",
    ),
    Contrast(
        "context store",
        "the request's 5-grams (the one ending at the newest token left out) and the n-grams a Lookahead "
        "window (7 columns of 4 levels, 28 tokens in every pass) harvests; at most 7 per key, least "
        "recently seen dropped",
        "the request's own n-grams, prompt and answer so far, each new one at once; the 4 most recent "
        "continuations per key, up to 10 tokens; a Lookahead window only with +window (every pass at a "
        "fixed budget; with the auto budget only where it pays)",
        "hdlib.tiers.context, hdlib.tiers.window",
    ),
    Contrast(
        "model database",
        "the top 100,000 5-grams by document frequency of the target model's answers to English OASST1 "
        "prompts (their script stops after 11 prompts)",
        "the top 5-grams by document frequency of the model's own greedy answers to ShareGPT prompts "
        "(the shipped one: 640 answers, 53,626 5-grams)",
        "hdlib.databases.modeldb, data/db/",
    ),
    Contrast(
        "statistics",
        "REST's datastore: a suffix array over UltraChat (about 12 GB)",
        "hdlib's numpy suffix array over ShareGPT's train split, chat-templated (27.4 M tokens)",
        "hdlib.databases.statsdb, hdlib.tiers.suffix_array",
    ),
    Contrast(
        "recycled guesses",
        "none",
        "a fourth tier, R, asked after the context: the model's 8 most likely next tokens after each token "
        "and token pair from its recent passes (Token Recycling's idea), learned during the answer",
        "hdlib.tiers.recycled",
    ),
    Contrast(
        "order",
        "context, model, statistics (C, M, S)",
        "context, recycled, model, statistics (C, R, M, S); any permutation by name: hd:SCM",
        "hdlib.tiers.DEFAULT_TIERS",
    ),
    Contrast(
        "hierarchy",
        "no gate: a lower tier is asked only while the 7 drafts are not found",
        "at a fixed budget the same (a tier is asked only while the budget is not full); with the auto "
        "budget a gate asks a tier after the first only where its gain in steps like this one pays for "
        "its lookup time",
        "hdlib.engine.gate.TierGate",
    ),
    Contrast(
        "duplicates",
        "drafts not de-duplicated across tiers; after a part-full context store the model database "
        "gives its least frequent entries",
        "a node once in the trie, with every tier that drafted it; each tier's continuations most "
        "frequent (or most recent) first",
        "hdlib.engine.tree, hdlib.tiers.ngram.DraftSet",
    ),
    Contrast(
        "sampling (T > 0)",
        "the drafts tried in order, each token accepted with probability p(x), else removed and the rest "
        "renormalised (the standard lossless rule for deterministic drafts); their first steps verify "
        "against a token sampled beforehand, a bias",
        "the Gumbel rule by default (for a seed, HD's answer is plain sampling's, token for token); "
        "recursive rejection sampling on request (the same distribution)",
        "hdlib.engine.sampling",
    ),
    Contrast(
        "the paper's way in hdlib",
        "bench method hd-paper: their context store, keys, window, 7 chains of 4 and defects, with "
        "hdlib's databases, on hdlib's verifier; +mend mends the defects, +trie merges shared prefixes",
        "bench methods hd (all of the above), hd:CMS@28 (hdlib's tiers at the paper's budget), "
        "hd+no-recycling, hd+window",
        "hdlib.bench.paper_drafter, docs/peers.md",
    ),
)


def contrast_table(contrasts: Sequence[Contrast] = CONTRASTS) -> Table:
    """The paper's HD vs hdlib's HD, one row per aspect."""
    rows = tuple((c.aspect, c.paper, c.hdlib, c.where) for c in contrasts)
    return Table(
        "The paper's HD (its authors' code) vs hdlib's HD",
        ("", "the paper's HD", "hdlib's HD", "in hdlib"),
        rows,
    )
