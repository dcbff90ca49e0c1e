"""The value-ranked tree: verify the drafts expected to pay, as many as the hardware rewards.

The tiers propose more candidates than a step should verify. Every candidate node gets an estimate
of the probability that the model accepts it when its parent is accepted, learned from what nodes of
its kind achieved: its tier (and the part of the tier that drafted it), the tier's own confidence in
it (a corpus share, the model's probability when it was recycled), its depth in its draft, the
length of the context suffix its draft was matched on, and its rank among its siblings; and the
model's own opinion of the token, from what it predicted the last time it saw the token before
(`hdlib.tiers.guesses.Successors`, the table the decoding loop keeps from every pass). A node's
path probability, the product of those estimates from the root down, is the probability that it is
accepted, so the expected tokens of a step that verifies the node set T are

    E(T) = 1 + sum_{i in T} P(i)       (the bonus token is always emitted)

A child's path probability never exceeds its parent's, so the n nodes with the highest path
probabilities form a tree (ties go to the earlier node, and parents precede children). The step
verifies the n that maximise E - r forward(1 + n) under the measured forward time, r being the
tokens per second the generation has been achieving (at the first step, E / forward(1 + n)): a
token drafted is worth the time it costs only at the rate the rest of the text is made. n = 0 is
a plain step. A lower tier's drafts thus enter only where they are expected to pay, and a lower
tier is asked only where asking it is expected to pay for its lookup (`hdlib.engine.gate`, the hierarchy):
before each tier after the first, the gate weighs what the tier has added in steps whose tree so far
was as likely as this one's against its lookup time, at the generation's rate. That rate, tokens per
second, counts the forward time of the profile and the host time the steps measured.

A Lookahead window (`hdlib.tiers.window`, an option of the context tier; to the engine a rider,
`hdlib.tiers.rider`) adds its W (N - 1) tokens to a pass; forward(1 + n) becomes forward(1 + W (N - 1)
+ n) in the passes it rides in, and it rides only where the tokens its n-grams are accepted for, per
pass, outweigh what its tokens cost at the rate r (`ValueBudget.rider_pays`). On a GPU, where forward
time is flat, that is nearly every pass; on a CPU, seldom.

Estimates are counts with exponential decay (recent steps weigh more: a copying phase and a free
phase differ), shrunk level by level toward a coarser kind: (tier, part, confidence band, opinion
band, agreement, depth, key length, rank) toward (... depth) toward (... agreement) toward (tier,
part, confidence band, opinion band), which starts from the opinion or the confidence itself. The
prior (`hdlib.engine.prior.AcceptancePrior`) is what the same kinds achieved before, and the caller chooses which:
the prior shipped with the packaged model (read-only, so every machine starts from the same rates,
the default for that model), the one this machine's cache keeps per model and device and updates
after each generation (so a generation starts where the last ones left off, and its numbers depend
on what ran before), none (fresh), or a file. A kind that is no longer verified drifts back to its
coarser estimate, so it is tried again: that is the exploration.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from itertools import pairwise

import numpy as np

from hdlib.engine.budget import Selection
from hdlib.engine.forward_time import ForwardProfile
from hdlib.engine.gate import RETRY_SHORTEST, Retry, TierGate
from hdlib.engine.prior import AcceptancePrior
from hdlib.engine.trace import Step, TierLookup
from hdlib.engine.tree import DraftTree
from hdlib.errors import HDError
from hdlib.tiers.base import DraftTier, token_before_newest
from hdlib.tiers.guesses import GUESSES, Successors
from hdlib.tiers.rider import PassRider

CANDIDATES = 16  # draft tokens each tier may propose per step, before the ranking keeps the best
# A Lookahead window left out of this many passes rides in the next, to be measured anew; each time
# it still does not pay, the wait doubles (`hdlib.engine.gate.Retry`), as on a CPU it seldom pays.
WINDOW_EXPLORE = RETRY_SHORTEST
DEFAULT_PRIOR = 0.3  # acceptance of a kind never seen, on any model: optimistic enough to be tried


CONFIDENCE_EDGES = (0.05, 0.2, 0.4, 0.6, 0.8, 0.95)  # a tier's own confidence, in bands
BAND_MIDDLES = tuple((lo + hi) / 2 for lo, hi in pairwise((0.0, *CONFIDENCE_EDGES, 1.0)))


def band(probability: float) -> int:
    """-1 for unknown (negative), else 0..6 by CONFIDENCE_EDGES (bisect: it runs for every node, every step).

    >>> band(-1.0), band(0.01), band(0.5), band(0.99)
    (-1, 0, 3, 6)
    """
    return -1 if probability < 0 else bisect_right(CONFIDENCE_EDGES, probability)


def node_kinds(tree: DraftTree, node: int, model_opinion: float = -1.0) -> tuple[Hashable, ...]:
    """The kinds of a node, finest first: what its acceptance is estimated from.

    `model_opinion`: the model's probability of the node's token after its parent's token, the last
    time the model saw that token (0: not among its top guesses; -1: never seen).
    """
    tier = tree.tiers[node]
    name = tier.name if tier is not None else ""
    coarse = (name, tree.sources[node], band(tree.confidences[node]), band(model_opinion))
    agreed = (*coarse, min(tree.agreement(node), 2))
    deep = (*agreed, min(tree.depth(node), 6))
    fine = (*deep, min(tree.key_lengths[node], 4), min(tree.sibling_rank(node), 2))
    return fine, deep, agreed, coarse


def first_guess(kinds: tuple[Hashable, ...]) -> float:
    """Where an estimate starts before any count or prior: the model's opinion, else the tier's own
    confidence (the middle of its band), else DEFAULT_PRIOR."""
    *_, own, opinion = kinds[-1]  # type: ignore[misc]
    known = opinion if opinion >= 0 else own
    return DEFAULT_PRIOR if known < 0 else BAND_MIDDLES[known]


@dataclass
class _Counts:
    accepted: float = 0.0
    seen: float = 0.0


class AcceptanceModel:
    """P(node accepted | parent accepted) per node kind, from decayed counts with shrinkage."""

    def __init__(
        self, prior: dict[str, tuple[float, float]] | None = None, decay: float = 0.98, strength: float = 4.0
    ) -> None:
        if not 0 < decay <= 1 or strength <= 0:
            raise HDError(f"acceptance model: need 0 < decay <= 1 and strength > 0, got {decay}, {strength}")
        self.prior = dict(prior or {})  # kind (as a string, see `prior_name`) -> (acceptance rate, observations)
        self.decay = decay
        self.strength = strength  # pseudo-observations a coarser estimate is worth to a finer one
        self._weight = 1.0  # the weight of an observation now: 1 / decay^steps, so old ones fade
        self._counts: dict[Hashable, _Counts] = {}
        self._prior_of: dict[
            Hashable, tuple[float, float] | None
        ] = {}  # kind -> its prior (None: none), looked up once

    def probability(self, kinds: tuple[Hashable, ...]) -> float:
        """Acceptance of a node with these kinds (finest first) when its parent is accepted.

        From `first_guess`, then from the coarsest kind to the finest: the coarser estimate pulled
        toward the kind's prior (by the observations behind it), then toward this generation's counts
        of the kind. A prior of a few observations moves an estimate a little: one rejection on an
        earlier run must not pin a kind at zero, where it would never be verified again.
        """
        p = first_guess(kinds)
        pseudo = self.strength * self._weight
        for kind in reversed(kinds):
            if kind not in self._prior_of:
                self._prior_of[kind] = self.prior.get(prior_name(kind))
            known = self._prior_of[kind]
            if known is not None:
                rate, seen = known
                p = (rate * seen + self.strength * p) / (seen + self.strength)
            c = self._counts.get(kind)
            if c is not None:
                p = (c.accepted + pseudo * p) / (c.seen + pseudo)
        return p

    def update(self, step: Step) -> None:
        """Learn from a verified step: each node whose fate was decided (its parent was accepted), by
        the kinds its estimate was made from (`Step.kinds`; a step without them teaches nothing);
        then age every count by one step."""
        if step.kinds is not None:
            on_path = set(step.accepted_nodes)
            for node in range(1, len(step.tree)):
                if step.tree.parents[node] in on_path:
                    self.observe(step.kinds[node], node in on_path)
        self.next_step()

    def observe(self, kinds: tuple[Hashable, ...], accepted: bool) -> None:
        for kind in kinds:
            c = self._counts.setdefault(kind, _Counts())
            c.seen += self._weight
            c.accepted += self._weight * accepted

    def next_step(self) -> None:
        """Age every count by one step."""
        self._weight /= self.decay
        if self._weight > 1e100:  # rescale before float64 runs out
            for c in self._counts.values():
                c.accepted /= self._weight
                c.seen /= self._weight
            self._weight = 1.0

    def rates(self) -> dict[str, tuple[float, float]]:
        """(rate, decayed observations) of every kind observed, for the prior."""
        return {
            prior_name(kind): (c.accepted / c.seen, c.seen / self._weight)
            for kind, c in self._counts.items()
            if c.seen > 0
        }


def prior_name(kind: Hashable) -> str:
    return "/".join(str(part) for part in kind) if isinstance(kind, tuple) else str(kind)


def estimate(
    tree: DraftTree, model: AcceptanceModel, memory: Successors, before_root: int = -1
) -> tuple[list[tuple[Hashable, ...]], np.ndarray]:
    """Every node's kinds (the root's empty) and the estimated probability that it is accepted (the
    root's 1): the product of `model`'s acceptance of its kinds from the root down, the model's
    opinions read from `memory` (`before_root`: the context token before the root, -1 if none).

    >>> from hdlib.tiers import Proposal, Tier
    >>> tree = DraftTree(root=1)
    >>> tree.add(Proposal((2, 3), confidence=(0.9, 0.5)), Tier.CONTEXT)
    2
    >>> kinds, probs = estimate(tree, AcceptanceModel(), Successors())
    >>> probs.round(3).tolist()  # nothing learned yet: each token's own confidence band, multiplied
    [1.0, 0.875, 0.438]
    """
    before = tree.previous_tokens(before_root)
    tokens, parents = tree.tokens, tree.parents
    kinds: list[tuple[Hashable, ...]] = [()]
    probs = np.ones(len(tree))
    for node in range(1, len(tree)):  # parents precede children
        opinion = memory.probability(tokens[node], tokens[parents[node]], before[parents[node]])
        kinds.append(node_kinds(tree, node, opinion))
        probs[node] = probs[parents[node]] * model.probability(kinds[node])
    return kinds, probs


def best_size(
    path_probs: np.ndarray, profile: ForwardProfile, rate: float | None = None, extra: int = 0
) -> tuple[np.ndarray, int]:
    """The drafted nodes by falling path probability, and how many of them to verify in a pass that
    also carries `extra` tokens (a Lookahead window's).

    Without `rate`, the n that maximises this step's expected tokens per second. With `rate` (the
    tokens per second the generation achieves), the n that maximises expected tokens minus what the
    step's time is worth at that rate: what maximises the whole generation's tokens per second
    (Dinkelbach), where the step's own ratio would buy marginal tokens too dearly once drafting pays.
    """
    order = np.argsort(-path_probs[1:], kind="stable") + 1  # stable: ties keep node order, parents first
    n_max = min(len(order), len(profile.seconds) - 1)
    expected = 1.0 + np.concatenate([[0.0], np.cumsum(path_probs[order[:n_max]])])
    seconds = profile.forward_s(1 + extra + np.arange(n_max + 1))
    value = expected / seconds if rate is None else expected - rate * seconds
    return order, int(np.argmax(value))


class ValueBudget:
    """A budget policy that drafts candidates from the tiers worth asking and verifies the subtree
    worth most.

    `gate` gives every tier asked `candidates` draft tokens, and asks a tier after the first only where
    asking it pays (`hdlib.engine.gate`; `gate=False` asks every tier); `select` keeps the nodes worth
    verifying, with their estimated path probabilities, and lets the rider's rows ride where they pay;
    `update` learns from the verified step: the acceptance of each kind, the gate's gains and lookup
    times, the generation's rate, the rider's worth, the model's guesses. `rates()` is what the
    generation learned (`generate` folds it into a learning prior).
    """

    def __init__(
        self,
        profile: ForwardProfile,
        prior: AcceptancePrior | None = None,
        candidates: int | None = None,
        gate: bool = True,
    ) -> None:
        candidates = CANDIDATES if candidates is None else candidates
        if not isinstance(candidates, int) or candidates < 0:
            raise HDError(f"the candidate budget must be a non-negative integer, got {candidates!r}")
        self.profile = profile
        self.prior = prior
        self.candidates = candidates
        self.model = AcceptanceModel(prior.rates() if prior is not None else None)
        self.tier_gate = TierGate(self.model.decay) if gate else None
        self.guesses = Successors(GUESSES)  # the model's guesses, its opinion of the next drafts
        # Learned from the steps, decayed like the counts: emitted tokens and their time (the rate);
        # the draft tokens a rider's rows (a Lookahead window's) were accepted for, and the passes it
        # rode in (one token per pass at first: it is tried); the draft tokens the last pass verified.
        self.tokens, self.seconds = 0.0, 0.0
        self.window_tokens, self.window_passes = 1.0, 1.0
        self.window_retry = Retry()
        self.last_size = 0

    def rate(self) -> float | None:
        """The tokens per second the generation has been achieving: the profile's forward time and
        the host time the steps measured."""
        return self.tokens / self.seconds if self.seconds > 0 else None

    def rates(self) -> dict[str, tuple[float, float]]:
        """What this generation learned of each kind's acceptance (for a prior)."""
        return self.model.rates()

    def gate(self, tier: DraftTier, tree: DraftTree, context: Sequence[int], asked: Sequence[TierLookup]) -> int:
        """`candidates` for the first tier; for a later one, as many where asking it pays, with `tree`
        drafted so far (`hdlib.engine.gate`), else 0."""
        if not asked or self.tier_gate is None:
            return self.candidates
        _, probs = estimate(tree, self.model, self.guesses, token_before_newest(context))
        return self.candidates if self.tier_gate.asks(tier.tier, float(probs[1:].sum()), self.rate()) else 0

    def rider_pays(self, rider: PassRider) -> bool:
        """Whether `rider`'s rows (a Lookahead window's) pay in the next pass: the draft tokens they
        have been accepted for, per pass they rode in, against the tokens the generation's rate would
        make in the time `rider.size` more tokens add to a pass of the last one's size. A rider left
        out of WINDOW_EXPLORE passes rides in the next, so its worth is measured again (and waits
        twice as long the next time, while it does not pay)."""
        rate, n = self.rate(), self.last_size
        extra_s = float(self.profile.forward_s(1 + n + rider.size) - self.profile.forward_s(1 + n))
        gain = self.window_tokens / self.window_passes
        return self.window_retry.decide(rate is None or gain >= rate * extra_s)

    def select(self, tree: DraftTree, context: Sequence[int], rider: PassRider | None) -> Selection:
        ride = rider is not None and self.rider_pays(rider)
        if tree.n_drafted == 0:
            return Selection(tree, (1.0,), ((),), ride)
        kinds, probs = estimate(tree, self.model, self.guesses, token_before_newest(context))
        order, n = best_size(probs, self.profile, self.rate(), rider.size if ride and rider is not None else 0)
        kept = np.sort(order[:n]).tolist()
        return Selection(tree.subtree(kept), (1.0, *probs[kept].tolist()), tuple(kinds[i] for i in [0, *kept]), ride)

    def update(self, step: Step) -> None:
        self.model.update(step)
        if self.tier_gate is not None:
            self.tier_gate.update(step)
        # The generation's recent rate: the profile's forward time (the time the choice is made in)
        # and the step's host time.
        decay, n = self.model.decay, step.tree.n_drafted
        self.tokens = decay * self.tokens + len(step.tokens)
        forward = float(self.profile.forward_s(1 + n + step.window))
        self.seconds = decay * self.seconds + forward + step.times.overhead
        source, sources = step.window_source, step.tree.sources
        harvested = sum(bool(source) and sources[node] == source for node in step.accepted_nodes[1:])
        self.window_tokens = decay * self.window_tokens + harvested
        self.window_passes = decay * self.window_passes + (step.window > 0)
        self.window_retry.record(step.window > 0)
        self.last_size = n
        self.guesses.update(step)  # after the kinds were learned: they hold the opinions `select` read
