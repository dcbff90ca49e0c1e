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
pass, outweigh what its tokens cost at the rate r (`ValueBudget.run_rider`). On a GPU, where forward
time is flat, that is nearly every pass; on a CPU, seldom.

Estimates are counts with exponential decay (recent steps weigh more: a copying phase and a free
phase differ), shrunk level by level toward a coarser kind: (tier, part, confidence band, opinion
band, agreement, depth, key length, rank) toward (... depth) toward (... agreement) toward (tier,
part, confidence band, opinion band), which starts from the opinion or the confidence itself. The
prior (`AcceptancePrior`) is what the same kinds achieved before, and the caller chooses which:
the prior shipped with the packaged model (read-only, so every machine starts from the same rates,
the default for that model), the one this machine's cache keeps per model and device and updates
after each generation (so a generation starts where the last ones left off, and its numbers depend
on what ran before), none (fresh), or a file. A kind that is no longer verified drifts back to its
coarser estimate, so it is tried again: that is the exploration.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from bisect import bisect_right
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

import numpy as np

from hdlib.engine.forward_time import ForwardProfile
from hdlib.engine.gate import RETRY_SHORTEST, Retry, TierGate
from hdlib.engine.trace import Step
from hdlib.engine.tree import DraftTree
from hdlib.errors import HDError
from hdlib.paths import cache_dir
from hdlib.store import write_text_atomic
from hdlib.tiers.base import DraftTier, token_before_newest
from hdlib.tiers.guesses import Successors
from hdlib.tiers.rider import PassRider

CANDIDATES = 16  # draft tokens each tier may propose per step, before the ranking keeps the best
# A Lookahead window left out of this many passes rides in the next, to be measured anew; each time
# it still does not pay, the wait doubles (`hdlib.engine.gate.Retry`), as on a CPU it seldom pays.
WINDOW_EXPLORE = RETRY_SHORTEST
DEFAULT_PRIOR = 0.3  # acceptance of a kind never seen, on any model: optimistic enough to be tried


CONFIDENCE_EDGES = (0.05, 0.2, 0.4, 0.6, 0.8, 0.95)  # a tier's own confidence, in bands
BAND_MIDDLES = tuple((lo + hi) / 2 for lo, hi in pairwise((0.0, *CONFIDENCE_EDGES, 1.0)))


def band(probability: float) -> int:
    """-1 for unknown (negative), else 0..6 by CONFIDENCE_EDGES (bisect: it runs for every node, every step)."""
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


def tree_kinds(tree: DraftTree, memory: Successors | None = None, before_root: int = -1) -> list[tuple[Hashable, ...]]:
    """`node_kinds` of every node (the root's is empty), the model's opinions read from `memory`
    (`before_root`: the context token before the root, -1 if none)."""
    tokens, parents = tree.tokens, tree.parents
    if memory is None:
        return [(), *(node_kinds(tree, n) for n in range(1, len(tree)))]
    before = tree.previous_tokens(before_root)
    kinds: list[tuple[Hashable, ...]] = [()]
    for n in range(1, len(tree)):
        opinion = memory.probability(tokens[n], tokens[parents[n]], before[parents[n]])
        kinds.append(node_kinds(tree, n, opinion))
    return kinds


def path_probabilities(tree: DraftTree, model: AcceptanceModel, kinds: list[tuple[Hashable, ...]]) -> np.ndarray:
    """(N,) the estimated probability that each node is accepted; the root's is 1."""
    probs = np.ones(len(tree))
    for node in range(1, len(tree)):  # parents precede children
        probs[node] = probs[tree.parents[node]] * model.probability(kinds[node])
    return probs


class TreeEstimates:
    """The estimates of a tree while it is drafted: each node's kinds and its acceptance once its
    parent is accepted, computed once per node as the tiers add nodes; a node that another tier has
    drafted too since (its agreement grew) is estimated again."""

    def __init__(self, tree: DraftTree, model: AcceptanceModel, memory: Successors, before_root: int) -> None:
        self.tree, self.model, self.memory = tree, model, memory
        self.before = [before_root]  # the token before each node
        self.kinds: list[tuple[Hashable, ...]] = [()]
        self.conditional = [1.0]
        self._agreement = [0]

    def _estimate(self, node: int) -> None:
        tree = self.tree
        parent = tree.parents[node]
        opinion = self.memory.probability(tree.tokens[node], tree.tokens[parent], self.before[parent])
        kinds = node_kinds(tree, node, opinion)
        p = self.model.probability(kinds)
        if node < len(self.kinds):
            self.kinds[node], self.conditional[node], self._agreement[node] = kinds, p, tree.agreement(node)
        else:
            self.before.append(tree.tokens[parent])
            self.kinds.append(kinds)
            self.conditional.append(p)
            self._agreement.append(tree.agreement(node))

    def path_probabilities(self) -> np.ndarray:
        """(N,) the estimated probability that each node of the tree as it is now is accepted."""
        tree = self.tree
        for node in range(1, len(self.kinds)):
            if tree.agreement(node) != self._agreement[node]:
                self._estimate(node)
        for node in range(len(self.kinds), len(tree)):
            self._estimate(node)
        probs = list(self.conditional)
        for node in range(1, len(probs)):  # parents precede children
            probs[node] *= probs[tree.parents[node]]
        return np.asarray(probs)


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

    Used by the decoding loop like any budget policy: `draft_budget` is the candidate budget per
    tier, `ask` is the hierarchy's gate before each tier after the first (`gate=False` asks every
    tier), `select` keeps the nodes worth verifying (with their estimated path probabilities),
    `observe` learns from the verified step.
    """

    per_tier = True  # every tier proposes its own candidates; the ranking decides, not the order alone
    successors_wanted = 8  # the model's top guesses after every node: its opinion of the next drafts

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
        self.gate = TierGate(self.model.decay) if gate else None
        self.guesses = Successors(self.successors_wanted)  # the model's opinions: the loop's table (use_guesses)
        self._tokens, self._seconds = 0.0, 0.0  # decayed sums over the steps: emitted tokens, their time
        self._estimates: TreeEstimates | None = None  # of the tree being drafted
        self._selected: tuple[DraftTree | None, list[tuple[Hashable, ...]]] = (None, [])  # the tree and its kinds
        # A rider's worth (a Lookahead window's), decayed like the counts: the draft tokens its rows
        # were accepted for, and the passes it rode in (one token per pass at first: it is tried).
        self._window_tokens, self._window_passes = 1.0, 1.0
        self._window = 0  # the rider's rows in the pass being chosen (0: none)
        self._window_source: str | None = None  # the part of its tier that drafts what it found
        self._window_retry = Retry()
        self._last_n = 0  # draft tokens the last pass verified

    def use_guesses(self, table: Successors) -> None:
        self.guesses = table

    def draft_budget(self, context_len: int) -> int:
        return self.candidates

    def _rate(self) -> float | None:
        """The tokens per second the generation has been achieving: the profile's forward time and
        the host time the steps measured."""
        return self._tokens / self._seconds if self._seconds > 0 else None

    def _estimates_of(self, tree: DraftTree, context: Sequence[int]) -> TreeEstimates:
        known = self._estimates
        if known is None or known.tree is not tree or known.model is not self.model or known.memory is not self.guesses:
            self._estimates = TreeEstimates(tree, self.model, self.guesses, token_before_newest(context))
        return self._estimates

    def ask(self, tier: DraftTier, tree: DraftTree, context: Sequence[int]) -> bool:
        """Whether asking `tier` pays, with `tree` drafted so far (`hdlib.engine.gate`)."""
        if self.gate is None:
            return True
        expected = float(self._estimates_of(tree, context).path_probabilities()[1:].sum())
        return self.gate.asks(tier.tier, expected, self._rate())

    def run_rider(self, rider: PassRider) -> bool:
        """Whether `rider`'s rows (a Lookahead window's) pay in the next pass: the draft tokens they
        have been accepted for, per pass they rode in, against the tokens the generation's rate would
        make in the time `rider.size` more tokens add to a pass of the last one's size. A rider left
        out of WINDOW_EXPLORE passes rides in the next, so its worth is measured again (and waits
        twice as long the next time, while it does not pay)."""
        size, self._window_source = rider.size, rider.source
        rate = self._rate()
        n = self._last_n
        extra_s = float(self.profile.forward_s(1 + n + size) - self.profile.forward_s(1 + n))
        gain = self._window_tokens / self._window_passes
        pays = self._window_retry.decide(rate is None or gain >= rate * extra_s)
        self._window = size if pays else 0
        return pays

    def select(self, tree: DraftTree, context: Sequence[int] = ()) -> tuple[DraftTree, tuple[float, ...] | None]:
        if tree.n_drafted == 0:
            self._selected = (tree, [()])
            return tree, (1.0,)
        estimates = self._estimates_of(tree, context)
        probs = estimates.path_probabilities()
        order, n = best_size(probs, self.profile, self._rate(), self._window)
        kept = np.sort(order[:n])
        verified = tree.subtree(kept.tolist())
        self._selected = (verified, [estimates.kinds[i] for i in [0, *kept.tolist()]])
        return verified, (1.0, *probs[kept].tolist())

    def observe(self, step: Step) -> None:
        tree, on_path = step.tree, set(step.accepted_nodes)
        # The kinds as `select` saw them (the model's opinion has moved on since).
        kinds = self._selected[1] if self._selected[0] is tree else tree_kinds(tree, self.guesses)
        for node in range(1, len(tree)):
            if tree.parents[node] in on_path:  # its fate was decided: its parent was accepted
                self.model.observe(kinds[node], node in on_path)
        self.model.next_step()
        if self.gate is not None:
            self.gate.observe(step)
        # The generation's recent rate: the profile's forward time (the time the choice is made in)
        # and the step's host time.
        decay, n = self.model.decay, step.tree.n_drafted
        self._tokens = decay * self._tokens + len(step.tokens)
        forward = float(self.profile.forward_s(1 + n + step.window))
        self._seconds = decay * self._seconds + forward + step.times.overhead
        harvested = sum(tree.sources[node] == self._window_source for node in step.accepted_nodes[1:])
        self._window_tokens = decay * self._window_tokens + harvested
        self._window_passes = decay * self._window_passes + (step.window > 0)
        self._window_retry.record(step.window > 0)
        self._window, self._last_n = 0, n

    def finish(self) -> None:
        """The generation is over: fold what it learned into the prior (a read-only prior stays as it is)."""
        if self.prior is not None:
            self.prior.merge(self.model.rates())


def parse_rates(text: str) -> dict[str, list[float]]:
    """The rates of a prior file's text (kind -> [rate, weight]); ValueError saying why it is none.

    A rate above 1 would let a child's path probability pass its parent's: the tree of the best nodes
    would no longer be a tree. So would NaN, which every comparison refuses.
    """
    try:
        raw = json.loads(text)
        data = {str(k): [float(v[0]), float(v[1])] for k, v in raw.items()}
    except (ValueError, TypeError, KeyError, IndexError, AttributeError) as error:
        raise ValueError("not a JSON object of kind -> [rate, weight]") from error
    bad = next((k for k, (r, w) in data.items() if not (0.0 <= r <= 1.0 and 0.0 <= w < math.inf)), None)
    if bad is not None:
        rate, weight = data[bad]
        raise ValueError(f"kind {bad!r} has rate {rate} and weight {weight}: need 0 <= rate <= 1, finite weight >= 0")
    return data


class AcceptancePrior:
    """Acceptance rates per node kind: where a generation's estimates start.

    One that `learns` folds each generation's rates in (`merge`) and writes them to its file: the
    prior this machine's cache keeps per model and device (`for_model`), or, without a file, one held
    in memory (`AcceptancePrior()`, as scripts/build_prior.py builds the packaged prior). A read-only
    one (`fresh`, `from_file`, `snapshot`) never changes, so every generation given it starts alike,
    whatever ran before: what a notebook or a benchmark needs. `source` says where the rates came
    from ("learned", "fresh", "packaged" or a file's path) and `digest` which rates they are.
    """

    def __init__(
        self, path: Path | None = None, memory: float = 200.0, learns: bool = True, source: str = "learned"
    ) -> None:
        self.path = path  # where a learning prior writes its rates (None: nowhere); read at once if present
        self.memory = memory  # observations the prior remembers: older ones fade as new ones come
        self.learns = learns
        self.source = source
        self._data: dict[str, list[float]] = {}  # kind -> [rate, weight]
        if path is None or not path.exists():
            return
        try:
            self._data = parse_rates(path.read_text())
        except (OSError, ValueError):
            # The cache's own file: start afresh, and say so once (a user's file is refused instead,
            # `from_file`).
            print(
                f"hdlib: {path} is not a valid acceptance prior (damaged?): removed, starting afresh", file=sys.stderr
            )
            path.unlink(missing_ok=True)

    @classmethod
    def for_model(cls, key: str, folder: Path | None = None) -> AcceptancePrior:
        """The prior kept for the model and device `key` names (a forward profile's key), in `folder`
        (default: hdlib's cache); it learns from every generation that uses it."""
        name = hashlib.sha256(key.encode()).hexdigest()[:16]
        return cls((folder or cache_dir() / "acceptance") / f"{name}.json")

    @classmethod
    def fresh(cls) -> AcceptancePrior:
        """No rates at all, read-only: every estimate starts from the node's own opinion or confidence."""
        return cls(None, learns=False, source="fresh")

    @classmethod
    def from_file(cls, path: str | Path, source: str | None = None) -> AcceptancePrior:
        """The rates in the file at `path` (written by `save`), read-only; `source` defaults to the
        path. A missing or invalid file is an HDError: unlike the cache's own, a user's file is never
        removed."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise HDError(f"acceptance prior {path}: no such file") from None
        except (OSError, UnicodeDecodeError) as error:
            raise HDError(f"cannot read acceptance prior {path}: {error}") from None
        try:
            data = parse_rates(text)
        except ValueError as error:
            raise HDError(f"{path} is not an acceptance prior ({error}); AcceptancePrior.save writes one") from None
        return cls._read_only(data, str(path) if source is None else source)

    @classmethod
    def _read_only(cls, data: dict[str, list[float]], source: str) -> AcceptancePrior:
        prior = cls(None, learns=False, source=source)
        prior._data = {k: list(v) for k, v in data.items()}
        return prior

    def snapshot(self) -> AcceptancePrior:
        """A read-only copy of the rates as they are now, with the same source: what a benchmark hands
        every method, so that none starts from what another learned."""
        return self._read_only(self._data, self.source)

    def rates(self) -> dict[str, tuple[float, float]]:
        """(rate, observations) per kind."""
        return {k: (v[0], v[1]) for k, v in self._data.items()}

    def digest(self) -> str:
        """16 hex digits of the SHA-256 of the rates' canonical JSON: equal digests, equal priors.
        (`save` writes that very JSON, so it is the digest of the file's bytes too.)"""
        return hashlib.sha256(_canonical(self._data).encode()).hexdigest()[:16]

    def save(self, path: str | Path) -> Path:
        """Write the rates to `path` as JSON, atomically (`from_file` reads them back)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        return write_text_atomic(path, _canonical(self._data))

    def merge(self, observed: dict[str, tuple[float, float]]) -> None:
        """Fold a generation's (rate, observations) per kind in, and write the file if there is one;
        a read-only prior ignores them."""
        if not self.learns:
            return
        for kind, (rate, weight) in observed.items():
            old_rate, old_weight = self._data.get(kind, [rate, 0.0])
            total = old_weight + weight
            self._data[kind] = [(old_rate * old_weight + rate * weight) / total, min(total, self.memory)]
        if self.path is not None:
            self.save(self.path)


def _canonical(data: dict[str, list[float]]) -> str:
    return json.dumps(data, sort_keys=True)
