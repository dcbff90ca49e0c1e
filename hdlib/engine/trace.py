"""What a generation leaves behind: one typed record per step, and the result that sums them up.

A `Step` says which drafts were proposed (the trie, each node with its tier), which path the model
accepted, which tier each accepted token came from (the model's own token at the end is `BONUS`),
and where the time went. A `Generation` holds the steps with the text and the numbers people quote:
mean accepted tokens per step (MAT), tokens per second, tokens per tier, the engine's share of the
step time. How they are shown (colours, legends, a notebook's view of a generation) is
`hdlib.presentation`'s.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Collection, Hashable, Sequence
from dataclasses import dataclass, field, fields
from enum import Enum

from hdlib.engine.tree import DraftTree
from hdlib.tiers.base import BONUS, Tier
from hdlib.tiers.guesses import ModelGuesses


@dataclass(frozen=True)
class StepTimes:
    """Seconds spent in each phase of one step."""

    draft: float  # asking the tiers
    tree: float  # trie -> tensors and masks
    forward: float  # the target model's forward pass
    accept: float  # choosing the accepted path, and reading it (with the records) from the device
    update: float  # keeping the accepted path in the cache; and learning from the step before (see `PhaseClock`)
    policy: float = 0.0  # the budget policy: the nodes kept

    @property
    def total(self) -> float:
        return self.draft + self.tree + self.forward + self.accept + self.update + self.policy

    @property
    def overhead(self) -> float:
        """The engine's own time: everything but the forward pass."""
        return self.total - self.forward


class PhaseClock:
    """The seconds of one step's phases: each `lap` charges the time since the last lap (or since
    the clock was made) to a phase. The verifier times tree building and the forward pass apart
    inside its own phase; `times` splits them. `learned_s`, what learning from the step before took
    (it happens before that step is handed on, so it is charged to the next), counts as `update`."""

    def __init__(self, learned_s: float = 0.0) -> None:
        self.seconds = {name: 0.0 for name in ("draft", "verify", "accept", "update", "policy")}
        self.seconds["update"] = learned_s
        self._last = time.perf_counter()

    def lap(self, phase: str) -> None:
        now = time.perf_counter()
        self.seconds[phase] += now - self._last
        self._last = now

    def times(self, tree_s: float) -> StepTimes:
        """The step's `StepTimes`, `tree_s` of the verify phase spent building the tree's tensors."""
        s = self.seconds
        return StepTimes(s["draft"], tree_s, s["verify"] - tree_s, s["accept"], s["update"], s["policy"])


@dataclass(frozen=True)
class TierLookup:
    """A tier asked in one step: how long it took (its lookup and its drafts' insertion into the
    trie) and how many new nodes it added. A tier the step did not ask has none."""

    tier: Tier
    seconds: float
    added: int


@dataclass(frozen=True)
class Step:
    """One step's outcome, complete when the loop yields it: the one record every learner (the tiers,
    the rider, the budget policy) learns from through `update(step)`, and what a notebook replays."""

    index: int
    context_len: int  # tokens before this step
    budget: int  # the most draft tokens this step could have (what the gate gave the first tier)
    tree: DraftTree  # the drafts verified, merged, each node with its tier
    accepted_nodes: tuple[int, ...]  # the accepted path through the tree, root first
    tokens: tuple[int, ...]  # what the step emitted: accepted drafts, then the bonus token
    tiers: tuple[Tier, ...]  # one per emitted token
    times: StepTimes
    # The value-ranked tree's estimate, per node, that the model accepts it (the root: 1); None when
    # the budget policy does not estimate (a fixed budget).
    estimates: tuple[float, ...] | None = None
    # What the model wanted, per node: its most likely next token after the node, that token's
    # probability, and the probability the node had of being accepted once its parent was reached
    # (greedy: 1 or 0; sampling: the rejection rule's; None: its parent was not reached). None in
    # records made by hand.
    choices: tuple[int, ...] | None = None
    choice_probs: tuple[float, ...] | None = None
    accept_probs: tuple[float | None, ...] | None = None
    window: int = 0  # rows a tier's rider (its Lookahead window) put in the pass beside the tree
    lookups: tuple[TierLookup, ...] = ()  # the tiers asked, in the order asked (a skipped tier has none)
    # Per node, the model's GUESSES most likely next tokens and their probabilities (None: not read, as
    # in plain decoding): what the recycled tier and the value-ranked tree learn the model's opinions from.
    guesses: ModelGuesses | None = field(default=None, repr=False)
    # Per node, the kinds its estimate was made from (`hdlib.engine.value`; None without estimates).
    kinds: tuple[Hashable, ...] | None = field(default=None, repr=False)
    window_source: str = ""  # the part of its tier that drafts what the rider found ("": no rider)
    window_next: tuple[int, ...] = ()  # where the rider rode: the model's next token after each of its top rows

    def rejected(self) -> list[int]:
        """The nodes the model was asked about and refused: tried (their parent reached), not accepted."""
        if self.accept_probs is None:
            return []
        kept = set(self.accepted_nodes)
        return [i for i, a in enumerate(self.accept_probs) if a is not None and i not in kept]

    @property
    def n_accepted_drafts(self) -> int:
        return sum(t != BONUS for t in self.tiers)

    @property
    def asked(self) -> tuple[Tier, ...]:
        """The tiers this step asked, in order."""
        return tuple(lookup.tier for lookup in self.lookups)

    def accepted_proposers(self) -> list[frozenset[Tier]]:
        """Per accepted draft token, every tier that drafted it (the first of them is credited with it)."""
        return [self.tree.proposing_tiers(node) for node in self.accepted_nodes[1 : 1 + self.n_accepted_drafts]]


@dataclass(frozen=True)
class TierStats:
    """What one tier did in a generation. A token two tiers drafted is credited to the first in
    order; `alone` and `shared` say how many of the tokens a tier drafted another tier drafted too."""

    tier: Tier
    credited: int  # emitted draft tokens credited to it
    alone: int  # emitted draft tokens it drafted and no other tier did
    shared: int  # emitted draft tokens it drafted and another tier did too (credited to it or not)
    asked: int  # steps it was asked in (the hierarchy skips a tier where asking it does not pay)
    lookup_s: float  # seconds it spent drafting, over the steps it was asked in


class StopReason(str, Enum):
    """Why a generation ended. A str, so records and JSON keep the plain value ("eos", ...)."""

    EOS = "eos"
    MAX_NEW_TOKENS = "max_new_tokens"
    CONTEXT_LENGTH = "context_length"

    @property
    def message(self) -> str:
        """The reason in words, for summaries."""
        return {
            StopReason.EOS: "the model ended its answer",
            StopReason.MAX_NEW_TOKENS: "reached max_new_tokens",
            StopReason.CONTEXT_LENGTH: "stopped at the model's context length",
        }[self]


STOP_REASONS = tuple(reason.value for reason in StopReason)


def cut_at_end(tokens: Sequence[int], eos: Collection[int]) -> list[int]:
    """`tokens` up to and including the first end token: what a generation keeps.

    >>> cut_at_end([5, 2, 7, 2], eos={2})
    [5, 2]
    """
    end = next((i for i, token in enumerate(tokens) if token in eos), len(tokens) - 1)
    return list(tokens[: end + 1])


def stop_reason(tokens: Sequence[int], eos: Collection[int], max_new_tokens: int) -> StopReason:
    if tokens and tokens[-1] in eos:
        return StopReason.EOS
    return StopReason.MAX_NEW_TOKENS if len(tokens) >= max_new_tokens else StopReason.CONTEXT_LENGTH


@dataclass
class Generation:
    prompt_ids: list[int]
    steps: list[Step]
    stop_reason: StopReason  # (a plain string of STOP_REASONS is taken too)
    wall_s: float  # from the first prefill to the last step
    prefill_s: float
    text: str = ""
    tier_order: list[Tier] = field(default_factory=list)
    pieces: list[str] = field(default_factory=list)  # the text of each token, when a tokenizer was at hand
    temperature: float = 0.0  # 0: greedy
    seed: int | None = None  # the sampler's seed (None when greedy): with the gumbel rule, it replays the answer
    sampling_rule: str = ""  # how drafts were accepted when sampling (hdlib.engine.sampling); "" when greedy
    # The acceptance prior the auto budget started from (`hdlib.decoding.resolve_prior`): its source
    # ("packaged", "learned", "fresh" or a file) and the digest of its rates then; "" without one.
    prior_source: str = ""
    prior_digest: str = ""

    @property
    def tokens(self) -> list[int]:
        """The new tokens, every step's in turn (the end-of-sequence token included if one was produced)."""
        return [t for s in self.steps for t in s.tokens]

    @property
    def mat(self) -> float:
        """Mean tokens emitted per step, bonus included (plain decoding: 1.0)."""
        return len(self.tokens) / len(self.steps) if self.steps else 0.0

    @property
    def tokens_per_s(self) -> float:
        return len(self.tokens) / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def tier_counts(self) -> Counter[Tier]:
        """Emitted tokens per tier; the bonus tokens are counted under `BONUS`."""
        return Counter(t for s in self.steps for t in s.tiers)

    def legend(self) -> list[tuple[Tier, int]]:
        """(tier, emitted tokens) for the generation's tiers in order, then the bonus token."""
        counts = self.tier_counts
        return [(t, counts.get(t, 0)) for t in [*self.tier_order, BONUS]]

    def tier_stats(self) -> list[TierStats]:
        """Per tier of the generation, in order: its credited tokens, the tokens it drafted alone and
        with another tier, the steps it was asked in, and its drafting time."""
        alone: Counter[Tier] = Counter()
        shared: Counter[Tier] = Counter()
        asked: Counter[Tier] = Counter()
        seconds: Counter[Tier] = Counter()
        for s in self.steps:
            for proposers in s.accepted_proposers():
                (alone if len(proposers) == 1 else shared).update(proposers)
            for lookup in s.lookups:
                asked[lookup.tier] += 1
                seconds[lookup.tier] += lookup.seconds
        credited = self.tier_counts
        return [
            TierStats(t, credited.get(t, 0), alone[t], shared[t], asked[t], seconds[t]) for t in self.tier_order
        ]

    @property
    def step_time(self) -> StepTimes:
        """Total seconds per phase over all steps."""
        return StepTimes(*(sum(getattr(s.times, f.name) for s in self.steps) for f in fields(StepTimes)))

    @property
    def overhead_frac(self) -> float:
        """Share of the step time spent in the engine rather than in the forward pass."""
        t = self.step_time
        return t.overhead / t.total if t.total > 0 else 0.0

    @property
    def stop_message(self) -> str:
        return StopReason(self.stop_reason).message

    def summary(self) -> dict[str, object]:
        return {
            "new_tokens": len(self.tokens),
            "steps": len(self.steps),
            "mat": round(self.mat, 3),
            "tokens_per_s": round(self.tokens_per_s, 2),
            "overhead_frac": round(self.overhead_frac, 4),
            "tiers": {t.name: n for t, n in self.legend()},
            "drafted alone / shared": {r.tier.name: f"{r.alone} / {r.shared}" for r in self.tier_stats()},
            "steps asked": {r.tier.name: r.asked for r in self.tier_stats()},
            "stop_reason": StopReason(self.stop_reason).value,
            **(
                {"temperature": self.temperature, "seed": self.seed, "sampling_rule": self.sampling_rule}
                if self.temperature > 0
                else {}
            ),
            **({"prior": f"{self.prior_source} ({self.prior_digest})"} if self.prior_source else {}),
        }

    @property
    def token_tiers(self) -> list[Tier]:
        return [t for s in self.steps for t in s.tiers]
