"""HD's tiers drafting one chain per row of a served batch, each request with a state of its own.

A request's state is its context index (`hdlib.serving.index`: a hash table that numba compiles
where vLLM runs) and how its last chain fared. States are kept by the engine's request id where the engine
names its rows, and freed as soon as the request is no longer alive; where it does not, a row finds
its state by the length and last tokens it had at the step before, and the state is taken only if
everything it holds is the row's own beginning, token for token. Either way a state serves one row a
step: two rows holding the same tokens (the siblings of an n > 1 request, say) get two states. The
states' bytes are bounded: past `max_bytes`, the least recently seen go (a request that comes back
is indexed again).

The chain follows the hierarchy: the first tier in the order with a draft gives it (the context tier:
the continuation of the longest earlier suffix match, `CONTEXT_DRAFT` tokens at most); each later
tier may extend it with a draft that begins with the whole chain, which is the path hdlib's trie
would take through the tiers' drafts (the first child at every node). A later tier whose drafts are
never longer than the chain is not asked, nor, with a `Gate`, one whose lookup does not pay at the
batch's rate (`hdlib.serving.gate`). The offline tiers read the row's last `TAIL` tokens. Of the
chain, the row verifies the prefix whose drafts are worth their verification at this batch size
(`hdlib.serving.length`).

A failure in a tier (a damaged database, a bug) costs its row that step's draft, never the engine:
the row gets no draft, and the log says once which tier failed and why.
"""

from __future__ import annotations

import functools
import logging
import time
from collections import OrderedDict
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

import numpy as np

from hdlib.errors import HDError
from hdlib.serving.gate import Gate
from hdlib.serving.index import ContextIndex
from hdlib.serving.length import EXPLORE, SCALE, Acceptance, StepClock, StepCost, outcome, worth
from hdlib.tiers import DraftTier, ModelTier, StatisticsTier
from hdlib.tiers.base import check_tokens, proposal

log = logging.getLogger(__name__)

CONTEXT_DRAFT = 10  # the context tier's draft, as the engine's context tier drafts (ContextSettings)
CONTEXT_KEYS = (1, 4)  # its shortest and longest key: one token too, as a wrong draft costs little here
TAIL = 32  # tokens of the row the offline tiers read: more than their longest key (8)
LAST = 4  # tokens that, with its length, file a state that has no request id
MAX_BYTES = 1 << 30  # the states' bytes, at most (60 to 120 a token: 1 GiB holds 9M tokens of context or more)


@dataclass(eq=False)
class Request:
    """One request's drafting state: its context index and how its last chain fared."""

    context: ContextIndex
    key: str | int  # its request id, or (with none) a number of its own
    proposed: int = 0  # draft tokens proposed at the last step (0: none)
    sources: list[str] = field(default_factory=list)  # where each of them came from (`source`)
    last: int = 0  # how the chain before them fared (`hdlib.serving.length.outcome`)
    nbytes: int = 0  # its bytes, as last counted
    end: tuple[int, tuple[int, ...]] = (0, ())  # with no id: its length and last tokens, where rows look
    asked: list[str] = field(default_factory=list)  # the offline tiers asked at the last step

    @property
    def length(self) -> int:
        """Tokens of the request it has seen."""
        return self.context.n


class ChainDrafter:
    """HD's tiers for one worker: the offline tiers shared, a context index per request, one chain
    per row. Pure Python and numpy; vLLM is not imported here."""

    def __init__(
        self,
        offline: Sequence[DraftTier],
        order: str,
        max_len: int,
        max_bytes: int = MAX_BYTES,
        cost: StepCost | None = None,
        scale: float = SCALE,
        vocab_size: int | None = None,
        keys: tuple[int, int] = CONTEXT_KEYS,
        gate: Gate | None = None,
        clock: StepClock | None = None,
    ) -> None:
        if max_len < 1 or max_bytes < 1 or not scale >= 0:
            raise HDError(
                f"the proposer needs max_len and max_bytes of at least 1 and a scale of at least 0, got {max_len}, "
                f"{max_bytes} and {scale}"
            )
        self.offline = {t.tier.letter: t for t in offline}
        self.order = order
        self.max_len = max_len
        self.max_bytes = max_bytes
        self.cost = cost or StepCost.measured()  # a step's marginal cost of a draft token, by batch size
        self.scale = scale  # that cost's weight in the rule (1: as derived; 0: every draft the tiers give)
        self.acceptance = Acceptance()  # a_j, learned from every request's chains
        self.chains = 0  # chains drafted
        self.made = 0  # states made (a request new to the drafter: its prompt was in the step before)
        self._marginal: dict[int, list[float]] = {}  # by batch size: c_k for k = 1..max_len
        self.load = 1.0  # the last step's time over a step with no drafts, as the step cost models it
        self.clock = clock  # what the served steps cost, learned from their times (None: as measured)
        self._ended: float | None = None  # when the last call returned (the engine's step runs until the next)
        self.vocab_size = vocab_size  # a draft token outside 0..vocab_size - 1 is a tier's failure
        self.keys = keys  # the context index's shortest and longest key
        self.gate = gate  # whether an offline tier's lookup pays at this batch's rate (None: always ask)
        self.failures: set[tuple[str, str]] = set()  # the failures logged: (who failed, the error's type)
        self.nbytes = 0  # the states' bytes
        self._states: OrderedDict[str | int, Request] = OrderedDict()  # by key, the least recently seen first
        self._ends: dict[tuple[int, tuple[int, ...]], list[Request]] = {}  # the states with no id, by end
        ContextIndex(np.arange(8))  # (the index's compiled functions, compiled or loaded now, not at a step)

    def __len__(self) -> int:
        """The requests it keeps a state for."""
        return len(self._states)

    def propose(
        self,
        sampled_token_ids: Sequence[Sequence[int]],
        num_tokens: np.ndarray,
        token_ids: np.ndarray,
        req_ids: Sequence[str] | None = None,
        alive: Collection[str] | None = None,
    ) -> list[list[int]]:
        """One chain per row (empty for a row that emitted nothing, a partial prefill, or holds no
        token). `req_ids` names the rows' requests and `alive` every request the engine still holds
        (None: unknown, the states are found by their tokens and let go by the byte bound). A row's chain
        is what its drafts are worth at this batch's size and the tokens it emitted."""
        began = self.clock.now() if self.clock is not None else 0.0
        emitted = sum(len(sampled) for sampled in sampled_token_ids)
        if self.gate is not None:
            self.gate.step(emitted)
        if alive is not None:
            for state in [s for k, s in self._states.items() if not isinstance(k, str) or k not in alive]:
                self._drop(state)  # (one found by its tokens, at a call without ids, is let go too)
        rows = [i for i, sampled in enumerate(sampled_token_ids) if len(sampled) and int(num_tokens[i]) > 0]
        cost = self.costs(len(rows), emitted)
        chains: list[list[int]] = [[] for _ in sampled_token_ids]
        taken: set[int] = set()  # the states given a row this step
        made = self.made
        for i in rows:
            try:
                tokens = token_ids[i, : int(num_tokens[i])]
                state = self.request(tokens, len(sampled_token_ids[i]), req_ids[i] if req_ids else None, taken)
                chains[i] = self.chain(state, tokens, len(sampled_token_ids[i]), cost)
            except Exception as error:  # noqa: BLE001  (a tier's failure costs its row a draft, not the engine)
                self._say(error)
        if self.clock is not None and self._ended is not None and self.made == made and len(rows) == len(chains):
            self.clock.see(len(rows), self.load - 1, began - self._ended)  # a step that only decoded: its time
        self._bound(len(taken))
        self.load = 1 + sum(self.spent(len(rows), len(chains[i])) for i in rows)
        self._ended = self.clock.now() if self.clock is not None else None
        return chains

    def request(
        self, tokens: np.ndarray, emitted: int, req_id: str | None = None, taken: set[int] | None = None
    ) -> Request:
        """The state of the request whose row holds `tokens` (the last `emitted` of them new since the
        step before), brought up to date, or a new one."""
        taken = set() if taken is None else taken
        n = len(tokens)
        state: Request | None = None
        if req_id is not None:
            state = self._states.get(req_id)
            held = state.context.tokens if state is not None else None
            if held is not None and (len(held) > n or tokens[0] != held[0] or tokens[len(held) - 1] != held[-1]):
                self._drop(state)  # type: ignore[arg-type]  (not this request's tokens: an id used again)
                state = None
        else:
            before = n - emitted
            for other in self._ends.get((before, tuple(tokens[max(0, before - LAST) : before].tolist())), ()):
                if id(other) not in taken and np.array_equal(other.context.tokens, tokens[: other.length]):
                    state = other  # all it holds is the row's beginning, and no other row has it
                    break
        if state is None:
            self.made += 1
            state = Request(ContextIndex(tokens, *self.keys), req_id if req_id is not None else 0)
            if req_id is None:
                state.key = id(state)
        elif state.length < n:
            self._unfile(state)
            state.context.extend(tokens[state.length :])
        self._file(state)
        taken.add(id(state))
        return state

    def costs(self, rows: int, emitted: int, load: float | None = None) -> list[float]:
        """What the k-th draft of a row costs, k = 1..max_len, in the tokens of a step of `rows` rows
        that emitted `emitted` tokens in `load` times a step with no drafts (None: the last step's):
        c_k(rows) E / load, times `scale`. (A step that takes T = load T0 yields E / T tokens a second,
        and the k-th draft adds c_k(rows) T0 to it.) Where the clock has learned that the served steps'
        drafts cost rho times c_k, each cost is rho times more, and the last step's load 1 + rho M."""
        fit = self.clock.fit(rows) if self.clock is not None else None
        rho = 1.0 if fit is None else fit[1]  # the served step's draft cost over the measured, where learned
        load = 1 + rho * (self.load - 1) if load is None else load
        weight = self.scale * rho * max(emitted, 1) / load
        return [weight * c for c in self.marginal(rows)]

    def marginal(self, rows: int) -> list[float]:
        """c_k(rows) for k = 1..max_len."""
        if rows not in self._marginal:
            self._marginal[rows] = [self.cost.marginal(rows, k) for k in range(1, self.max_len + 1)]
        return self._marginal[rows]

    def spent(self, rows: int, drafts: int) -> float:
        """What a row's `drafts` draft tokens add to a step of `rows` rows, over the step with no drafts."""
        return self.cost.spent(rows, drafts)

    def chain(self, state: Request, tokens: np.ndarray, emitted: int, cost: Sequence[float] | None = None) -> list[int]:
        """The chain for a request whose row holds `tokens` and just emitted `emitted` of them (the
        accepted drafts and one more): the prefix of the tiers' chain whose drafts are worth verifying,
        the k-th costing `cost[k - 1]` of the step's tokens (None: nothing), at most `max_len`."""
        accepted = min(emitted - 1, state.proposed) if state.proposed else 0
        if state.proposed:
            self.acceptance.learn(state.sources, accepted, state.last)
            state.last = outcome(state.proposed, accepted)
        if self.gate is not None:
            for letter in state.asked:  # what the lookups of the step before led to: only the first tier's count
                self.gate.credit(letter, accepted if state.sources and letter == state.sources[0][0] else 0)
        state.asked = []
        want = self.max_len
        chain: list[int] = []
        sources: list[str] = []
        tail: list[int] | None = None
        for letter in self.order:
            if len(chain) >= want:
                break
            if letter == "C":
                offers: list[tuple[Sequence[int], int]] = [
                    (state.context.draft(min(want, CONTEXT_DRAFT)).tolist(), state.context.match_length)
                ]
            else:
                tier = self.offline[letter]
                if chain and len(chain) >= longest_draft(tier):
                    continue  # none of its drafts could extend the chain
                if self.gate is not None and not self.gate.ask(letter):
                    continue  # at this batch's rate, its lookup costs more than it adds
                tail = tokens[-TAIL:].tolist() if tail is None else tail
                start = time.perf_counter()
                offers = [(p.tokens, p.key_length) for p in map(proposal, tier.propose(tail, want))]
                if self.gate is not None:
                    self.gate.took(letter, time.perf_counter() - start)
                    state.asked.append(letter)
                if self.vocab_size is not None:
                    check_tokens(tier, [t for offer, _ in offers for t in offer], self.vocab_size)
            for offer, matched in offers:
                if len(offer) > len(chain) and list(offer[: len(chain)]) == chain:
                    sources += [source(letter, matched)] * (min(len(offer), want) - len(chain))
                    chain = list(offer[:want])
        self.chains += 1
        whole = cost is None or self.chains % EXPLORE == 0  # (now and then, to learn what is seldom drafted)
        keep = len(chain) if whole else worth(sources, state.last, self.acceptance, cost)
        state.proposed, state.sources = keep, sources[:keep]
        return chain[:keep]

    def _file(self, state: Request) -> None:
        """Keep `state` as the most recently seen, its bytes counted, filed by its end if it has no id."""
        self._states[state.key] = state
        self._states.move_to_end(state.key)
        self.nbytes += state.context.nbytes - state.nbytes
        state.nbytes = state.context.nbytes
        if not isinstance(state.key, str):
            n = state.length
            state.end = (n, tuple(state.context.tokens[max(0, n - LAST) :].tolist()))
            bucket = self._ends.setdefault(state.end, [])
            if state not in bucket:
                bucket.append(state)

    def _unfile(self, state: Request) -> None:
        bucket = self._ends.get(state.end, [])
        if state in bucket:
            bucket.remove(state)
            if not bucket:
                del self._ends[state.end]

    def _drop(self, state: Request) -> None:
        if self._states.pop(state.key, None) is not None:
            self.nbytes -= state.nbytes
            self._unfile(state)

    def _bound(self, keep: int) -> None:
        """Let the least recently seen states go while their bytes pass the bound (this step's stay)."""
        while self.nbytes > self.max_bytes and len(self._states) > keep:
            self._drop(next(iter(self._states.values())))

    def _say(self, error: Exception) -> None:
        """Log a failure once per failing tier and kind of error."""
        who = culprit(error)
        if (who, type(error).__name__) not in self.failures:
            self.failures.add((who, type(error).__name__))
            log.warning(
                "hdlib: %s failed (%s: %s); its rows get no draft while it fails", who, type(error).__name__, error
            )


@functools.cache
def source(letter: str, matched: int) -> str:
    """Where a draft came from, as its chance of acceptance is learned (`Acceptance`): the tier's
    letter and how long a match its draft followed (`matched` tokens, in classes 1, 2, 3, 4, then 5
    for 5 to 7, 8 for 8 to 15 and 16 for more; nothing where the tier does not say: 0)."""
    if not matched:
        return letter
    return f"{letter}{matched if matched <= 4 else 5 if matched < 8 else 8 if matched < 16 else 16}"


def longest_draft(tier: DraftTier) -> float:
    """The longest draft `tier` can offer (inf: unknown)."""
    if isinstance(tier, ModelTier):
        return tier.n - 1
    if isinstance(tier, StatisticsTier):
        return tier.settings.draft_len
    return float("inf")


def culprit(error: BaseException) -> str:
    """Who raised `error`: the innermost tier in its traceback (a tier's own method, or the drafter
    asking it, or the check of its tokens), else the proposer itself."""
    who = "the proposer"
    frame = error.__traceback__
    while frame is not None:
        names = frame.tb_frame.f_locals
        tier = names.get("self") if isinstance(names.get("self"), DraftTier) else names.get("tier")
        if isinstance(tier, DraftTier):
            who = f"the {tier.tier.name} tier ({type(tier).__name__})"
        frame = frame.tb_next
    return who
