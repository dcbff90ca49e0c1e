"""hdlib's HD as a vLLM speculative proposer: the tiers draft, vLLM verifies.

    from vllm import LLM
    llm = LLM(model=FOLDER, speculative_config={
        "method": "custom_class", "model": "hdlib.serving.proposer.HDProposer", "num_speculative_tokens": 16})

vLLM makes the class with its `VllmConfig` and, after every step, calls `propose` with the tokens
each batch row just emitted, each row's length and every row's tokens; it wants one list of draft
tokens per row, which it verifies as a chain, losslessly. Rows move between steps and vLLM names no
request, so a request's state (its context tier, its draft length) is found by its first tokens
and checked against the row's tokens; a row that matches none starts a new one.

Per request: the context tier over the row's own tokens, then the model tier's phrase database and
the statistics corpus (each opened once per worker process), asked in that order (`HDLIB_VLLM_TIERS`,
letters of C, M, S; default `CMS`); their drafts merge into hdlib's trie, which is reduced to one
chain, the hierarchy's: from the root, the first child, the draft of the highest tier that had one,
up to the request's draft length. That length follows what the request has had accepted: it doubles
after a chain accepted whole and halves after a refusal (not below the accepted drafts and one
more), at most `num_speculative_tokens`, so that a request whose drafts are refused drafts less; but
not below its share of the step's `FREE_TOKENS`, the drafts a pass verifies for about the price
of one, so that alone in a batch a request drafts what costs nothing and under load only what pays.

A failure in a tier (a damaged database, a bug) costs its row that step's draft, never the engine:
the row gets no draft, and the log says once which tier failed and why.

What it does not do: no recycled guesses (a proposer sees no logits) and no tree (vLLM verifies a
chain); the databases must be built for the served model's tokenizer (refused otherwise).
"""

from __future__ import annotations

import logging
import os
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hdlib.bench.serving import TIERS_ENV, tier_order
from hdlib.databases.modeldb import SHIPPED, default_model_db_path
from hdlib.databases.statsdb import default_statistics_path
from hdlib.engine.drafter import Drafter
from hdlib.errors import HDError
from hdlib.models.loading import ModelText, load_text
from hdlib.paths import data_dir
from hdlib.store import read_meta
from hdlib.tiers import ContextSettings, ContextTier, DraftTier, ModelTier, StatisticsTier

log = logging.getLogger(__name__)

KEY_TOKENS = 32  # a request is found by its first tokens (and checked against the row's)
CANDIDATES = 4  # draft tokens the tiers may offer per token of the chain asked for
# Draft tokens a step verifies nearly free: vLLM's CPU pass over a row and 4 drafts costs about what
# one over a row and 1 draft does (benchmarks/results/<machine>/vllm_step_cost.json); each of a
# step's rows drafts at least its share of them, however many of its drafts were refused.
FREE_TOKENS = 4
# The context tier as the proposer asks it: a key of one token too. Its guesses are often wrong, but
# in a chain's first few tokens a wrong draft costs next to nothing (FREE_TOKENS), a right one a step.
CONTEXT = ContextSettings(min_key=1)


@dataclass
class Request:
    """One request's drafting state: its context tier over the tokens it has, and its draft length."""

    context: ContextTier
    drafter: Drafter  # its context tier and the worker's offline tiers, in the order asked
    length: int  # tokens the context tier has seen
    draft_len: int
    proposed: int = 0  # draft tokens proposed at the last step (0: none)
    tail: tuple[int, ...] = field(default=())  # its last tokens, to check a row is this request

    def matches(self, tokens: np.ndarray) -> bool:
        n = len(self.tail)
        return self.length <= len(tokens) and tuple(tokens[self.length - n : self.length].tolist()) == self.tail


class ChainDrafter:
    """HD's tiers for one worker: the offline tiers shared, a context tier per request, one chain
    per row. Pure Python and numpy; vLLM is not imported here."""

    def __init__(
        self,
        offline: Sequence[DraftTier],
        order: str,
        max_len: int,
        max_requests: int = 1024,
        context: ContextSettings | None = None,
        free: int = FREE_TOKENS,
        vocab_size: int | None = None,
    ) -> None:
        self.offline = {t.tier.letter: t for t in offline}
        self.context = context or CONTEXT
        self.order = order
        self.max_len = max_len
        self.free = free
        self.max_requests = max_requests
        self.vocab_size = vocab_size  # a draft token outside 0..vocab_size - 1 is a tier's failure
        self.failures: set[tuple[str, str]] = set()  # the failures logged: (who failed, the error's type)
        # Requests by their first tokens (several may share them: a chat template's system prompt),
        # and all of them, the least recently seen first.
        self._buckets: dict[tuple[int, ...], list[Request]] = {}
        self._recent: OrderedDict[int, tuple[tuple[int, ...], Request]] = OrderedDict()
        self._key_lengths: set[int] = set()  # the lengths of the requests' keys

    def __len__(self) -> int:
        """The requests it keeps a state for."""
        return len(self._recent)

    def request(self, tokens: np.ndarray) -> Request:
        """The state of the request whose row holds `tokens`, brought up to date, or a new one. A
        request is found by its first tokens (as many as it had, up to KEY_TOKENS, when it began)
        and its last tokens, checked against the row's."""
        state = None
        for m in sorted(self._key_lengths, reverse=True):
            bucket = self._buckets.get(tuple(tokens[:m].tolist()), []) if len(tokens) >= m else []
            state = next((r for r in bucket if r.matches(tokens)), None)
            if state is not None:
                break
        if state is not None:
            self._recent.move_to_end(id(state))
            if len(tokens) > state.length:
                state.context.update(tokens[state.length :].tolist())
        else:
            context = ContextTier(self.context)
            context.begin(tokens.tolist())
            tiers = [context if letter == "C" else self.offline[letter] for letter in self.order]
            state = Request(context, Drafter(tiers), len(tokens), draft_len=self.max_len)
            key = tuple(tokens[:KEY_TOKENS].tolist())
            self._key_lengths.add(len(key))
            self._buckets.setdefault(key, []).append(state)
            self._recent[id(state)] = (key, state)
            if len(self._recent) > self.max_requests:
                old_key, old = self._recent.popitem(last=False)[1]
                self._buckets[old_key].remove(old)
                if not self._buckets[old_key]:
                    del self._buckets[old_key]
        state.length = len(tokens)
        state.tail = tuple(tokens[max(0, len(tokens) - 8) :].tolist())
        return state

    def propose_row(self, tokens: np.ndarray, emitted: int, floor: int = 1) -> list[int]:
        """The chain for a row of `tokens` that just emitted `emitted` tokens (the accepted drafts and
        one more): the request's draft length, at least `floor`, at most `max_len`."""
        state = self.request(tokens)
        if state.proposed:
            accepted = emitted - 1
            grown, halved = min(self.max_len, 2 * state.draft_len), max(accepted + 1, state.draft_len // 2)
            state.draft_len = grown if accepted >= state.proposed else min(halved, self.max_len)
        state.draft_len = max(state.draft_len, min(floor, self.max_len))
        tree, _ = state.drafter.draft(
            tokens.tolist(), CANDIDATES * state.draft_len, state.draft_len, vocab_size=self.vocab_size
        )
        chain, node = [], 0
        while len(chain) < state.draft_len and (children := tree.children(node)):
            node = children[0]  # the highest tier's draft: the trie keeps the order the tiers were asked in
            chain.append(tree.tokens[node])
        state.proposed = len(chain)
        return chain

    def propose(
        self, sampled_token_ids: Sequence[Sequence[int]], num_tokens: np.ndarray, token_ids: np.ndarray
    ) -> list[list[int]]:
        """One chain per row (empty for a row that emitted nothing, a partial prefill, or holds no
        token). The step's
        `free` draft tokens are shared by its rows: each row drafts at least its share of them."""
        rows = [i for i, sampled in enumerate(sampled_token_ids) if len(sampled) and int(num_tokens[i]) > 0]
        floor = max(1, self.free // max(len(rows), 1))
        chains: list[list[int]] = [[] for _ in sampled_token_ids]
        for i in rows:
            try:
                chains[i] = self.propose_row(token_ids[i, : int(num_tokens[i])], len(sampled_token_ids[i]), floor)
            except Exception as error:  # noqa: BLE001  (a tier's failure costs its row a draft, not the engine)
                self._say(error)
        return chains

    def _say(self, error: Exception) -> None:
        """Log a failure once per failing tier and kind of error."""
        who = culprit(error)
        if (who, type(error).__name__) not in self.failures:
            self.failures.add((who, type(error).__name__))
            log.warning(
                "hdlib: %s failed (%s: %s); its rows get no draft while it fails", who, type(error).__name__, error
            )


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


MODEL_DB_ENV = "HDLIB_VLLM_MODEL_DB"  # the model tier's database file (default: the served tokenizer's)
STATISTICS_DB_ENV = "HDLIB_VLLM_STATISTICS_DB"  # the statistics tier's (default: the tokenizer's, cached)
_OPENED: dict[tuple[str, str], DraftTier] = {}  # the offline tiers, opened once per worker process


def model_db_for(text: ModelText) -> Path:
    """The model database built for `text`'s tokenizer: `HDLIB_VLLM_MODEL_DB`, else the shipped one
    that was, else the cached one."""
    if os.environ.get(MODEL_DB_ENV):
        return Path(os.environ[MODEL_DB_ENV])
    for name in SHIPPED.values():
        path = data_dir() / "db" / name
        if path.is_file() and read_meta(path).get("tokenizer") == text.fingerprint:
            return path
    return default_model_db_path(text)


def offline_tiers(text: ModelText, order: str) -> list[DraftTier]:
    """The model and statistics tiers `order` names, for `text`'s tokenizer, each opened once."""
    where = {
        "M": (model_db_for(text), ModelTier, "hdlib build-db model --model MODEL"),
        "S": (
            Path(os.environ.get(STATISTICS_DB_ENV) or default_statistics_path(text)),  # type: ignore[arg-type]
            StatisticsTier,
            "hdlib warmup --model MODEL",
        ),
    }
    tiers = []
    for letter in order:
        if letter not in where:
            continue
        path, kind, build = where[letter]
        if not path.is_file():
            name = kind.__name__.removesuffix("Tier").lower()
            raise HDError(f"no {name} database for this model's tokenizer at {path}: build it with `{build}`")
        key = (str(path), text.fingerprint)
        if key not in _OPENED:
            _OPENED[key] = kind.from_file(path, text.fingerprint)  # refused when built for another tokenizer
        tiers.append(_OPENED[key])
    return tiers


class HDProposer:
    """HD's tiers as vLLM's `custom_class` proposer (see the module's docstring)."""

    def __init__(self, vllm_config: Any) -> None:
        spec, model = vllm_config.speculative_config, vllm_config.model_config
        order = tier_order(os.environ.get(TIERS_ENV))
        text = load_text(str(model.tokenizer or model.model))
        max_requests = 4 * int(getattr(vllm_config.scheduler_config, "max_num_seqs", 256))
        self.drafter = ChainDrafter(
            offline_tiers(text, order),
            order,
            int(spec.num_speculative_tokens),
            max_requests,
            vocab_size=int(model.get_vocab_size()),
        )

    def load_model(self, *args: Any, **kwargs: Any) -> None:
        """vLLM's CPU runner hands every drafter the target model: HD needs none."""

    def propose(
        self,
        sampled_token_ids: Sequence[Sequence[int]],
        num_tokens_no_spec: np.ndarray,
        token_ids_cpu: np.ndarray,
        slot_mappings: object = None,
    ) -> list[list[int]]:
        return self.drafter.propose(sampled_token_ids, num_tokens_no_spec, token_ids_cpu)
