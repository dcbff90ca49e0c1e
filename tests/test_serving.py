"""HD as vLLM's proposer (hdlib.serving.proposer), without vLLM: the runner's calls simulated.

A batch of requests is decoded as vLLM decodes with a proposer: after each step, one `propose` call
with every row's emitted tokens, lengths and tokens, the rows shuffled between steps (vLLM moves
them), each row's chain verified greedily by a tiny model. The answers must be plain greedy
decoding's, token for token, and the drafts must have been accepted somewhere.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tiny import tiny_llama

from hdlib.bench.serving import tier_order
from hdlib.engine.loop import DecodeSettings, run
from hdlib.errors import HDError
from hdlib.serving.proposer import ChainDrafter
from hdlib.tiers import DraftTier, StatisticsSettings, StatisticsTier, Tier

MAX_LEN = 96  # vLLM's token_ids_cpu: one row of max_model_len per request


def greedy_next(model, tokens: list[int]) -> list[int]:
    """The model's argmax after every position of `tokens`."""
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([tokens])).logits[0]
    return logits.argmax(dim=-1).tolist()


def serve(model, prompts: list[list[int]], drafter: ChainDrafter, new: int, seed: int = 0):
    """Decode `prompts` together as vLLM does with a proposer; the answers and the draft tokens accepted."""
    rng = random.Random(seed)
    texts = [list(p) for p in prompts]
    emitted: list[list[int]] = [[] for _ in prompts]  # the prefill: no token emitted yet
    chains = [[] for _ in prompts]
    accepted = 0
    while any(len(t) - len(p) < new for t, p in zip(texts, prompts)):
        # the step: each request's chain verified, the accepted drafts and one more token emitted
        for r, (text, chain) in enumerate(zip(texts, chains)):
            if len(text) - len(prompts[r]) >= new:
                emitted[r] = []
                continue
            wanted = greedy_next(model, text + chain)[len(text) - 1 :]
            keep = 0
            while keep < len(chain) and chain[keep] == wanted[keep]:
                keep += 1
            out = [*chain[:keep], wanted[keep]]
            accepted += keep
            text.extend(out)
            emitted[r] = out
        # the runner's call, rows in an order of its own
        order = list(range(len(prompts)))
        rng.shuffle(order)
        token_ids = np.zeros((len(order), MAX_LEN), dtype=np.int32)
        for row, r in enumerate(order):
            token_ids[row, : len(texts[r])] = texts[r]
        lengths = np.array([len(texts[r]) for r in order], dtype=np.int32)
        proposals = drafter.propose([emitted[r] for r in order], lengths, token_ids)
        for row, r in enumerate(order):
            assert len(proposals[row]) <= drafter.max_len
            chains[r] = proposals[row] if emitted[r] else []
    return [t[len(p) : len(p) + new] for t, p in zip(texts, prompts)], accepted


PROMPTS = [[5, 6, 7, 8] * 3, [40, 41, 9, 3, 70], [9, 2, 3, 4, 5, 9], [11, 12, 13, 11, 12]]


@pytest.mark.parametrize("order", ["CMS", "C", "SC"])
def test_a_batch_served_with_hd_chains_is_plain_greedy_decoding(order):
    model = tiny_llama()
    plain = [run(model, p, None, DecodeSettings(max_new_tokens=24)).tokens for p in PROMPTS]
    statistics = StatisticsTier.from_documents([list(plain[0]), [5, 6, 7, 8] * 3], StatisticsSettings())
    from test_paper import model_tier

    phrases = model_tier(*[((t, t + 1, t + 2, t + 3, t + 4), 10) for t in range(3, 80)])
    offline = [t for t in (phrases, statistics) if t.tier.letter in order]
    drafter = ChainDrafter(offline, order, max_len=6)
    got, accepted = serve(model, PROMPTS, drafter, new=24)
    assert got == [list(p) for p in plain]
    # A random model repeats nothing, so the context tier alone is seldom right; the statistics tier
    # holds the first answer's start and drafts it where the answer comes.
    assert accepted > 0 or "S" not in order
    assert len(drafter) == len(PROMPTS)  # each request found again, wherever its row went


def test_a_row_that_emitted_nothing_gets_no_draft_and_the_draft_length_follows_acceptance():
    drafter = ChainDrafter([], "C", max_len=5, free=1)
    tokens = np.array([[1, 2, 3, 1, 2, 3, 1, 2, 0, 0]], dtype=np.int32)
    assert drafter.propose([[]], np.array([8]), tokens) == [[]]  # a partial prefill
    assert drafter.propose([[2]], np.array([8]), tokens) == [[3, 1, 2, 3, 1]]  # the context copies itself
    state = drafter.request(tokens[0, :8])
    assert state.draft_len == 5 and state.proposed == 5
    tokens[0, 8] = 9  # the model refused every draft and said 9
    drafter.propose([[9]], np.array([9]), tokens)
    assert state.draft_len == 2  # halved
    tokens[0, 9] = 3
    drafter.propose([[3]], np.array([10]), tokens)
    assert state.draft_len == 2 and state.length == 10  # nothing was drafted after 9: nothing learned


def test_a_steps_free_draft_tokens_are_shared_by_its_rows():
    """However many of its drafts were refused, a request drafts at least its share of the tokens a
    step verifies nearly free: all of them alone in the batch, one each among four rows."""
    drafter = ChainDrafter([], "C", max_len=6, free=4)
    text = [2, 5, 7, 7] + [5, 1, 2, 3] * 3 + [5]
    assert drafter.propose([[5]], np.array([17]), np.array([text]))[0] == [1, 2, 3, 5, 1, 2]
    state = drafter.request(np.array(text))
    text += [1, 2, 5]  # two accepted, then refused: halved to 3, but a row alone drafts 4
    assert drafter.propose([[1, 2, 5]], np.array([20]), np.array([text]))[0] == [7, 7, 5, 1]  # after 2 5
    assert state.draft_len == 4
    others = [[9, 8, *range(20, 39)], [9, 7, *range(40, 59)], [9, 6, *range(60, 79)]]
    rows = np.array([[*text, 9], *others])
    drafter.propose([[9], [1], [1], [1]], np.array([21] * 4), rows)  # refused again, now among four rows
    assert state.draft_len == 2  # halved: among four rows the floor is 1


def test_the_tier_order_is_checked():
    assert tier_order(None) == "CMS" and tier_order("sc") == "SC"
    for bad in ("X", "CX", "CC"):
        with pytest.raises(HDError, match="HDLIB_VLLM_TIERS"):
            tier_order(bad)


def test_the_databases_come_from_the_environment_or_the_tokenizers_and_a_missing_one_is_said(monkeypatch, tmp_path):
    from types import SimpleNamespace

    from hdlib.serving.proposer import MODEL_DB_ENV, STATISTICS_DB_ENV, model_db_for, offline_tiers

    text = SimpleNamespace(name="folder", fingerprint="f" * 16)
    monkeypatch.setenv(MODEL_DB_ENV, str(tmp_path / "model.npz"))
    assert model_db_for(text) == tmp_path / "model.npz"
    with pytest.raises(HDError, match="no model database .*hdlib build-db model"):
        offline_tiers(text, "CM")
    monkeypatch.setenv(STATISTICS_DB_ENV, str(tmp_path / "statistics.npz"))
    with pytest.raises(HDError, match="no statistics database .*hdlib warmup"):
        offline_tiers(text, "CS")
    assert offline_tiers(text, "C") == []  # the context tier needs no file


def test_requests_that_share_their_first_tokens_keep_states_of_their_own_and_old_ones_are_let_go():
    drafter = ChainDrafter([], "C", max_len=4, max_requests=2)
    system = list(range(100, 140))  # a chat template's system prompt: longer than the key
    a, b = np.array(system + [1, 2, 3]), np.array(system + [7, 8, 9])
    for _ in range(3):  # rows swap at every step
        drafter.propose([[1], [1]], np.array([43, 43]), np.stack([a, b]))
        drafter.propose([[1], [1]], np.array([43, 43]), np.stack([b, a]))
    assert len(drafter) == 2
    assert drafter.request(a) is not drafter.request(b)
    drafter.propose([[1]], np.array([3]), np.array([[5, 6, 7]]))  # a third request: the oldest let go
    assert len(drafter) == 2


class Broken(DraftTier):
    """A tier whose database is damaged: every lookup raises."""

    tier = Tier("broken", "B", "#332288")

    def lookup(self, context, budget):
        raise OSError("the database file is truncated")


class Wild(DraftTier):
    """A tier built for another tokenizer: it drafts token ids the model does not have."""

    tier = Tier("wild", "W", "#332288")

    def lookup(self, context, budget):
        return [(10_000, 10_001)]


def test_a_failing_tier_costs_its_row_a_draft_and_is_said_once_and_the_engine_goes_on(caplog):
    for bad, said in ((Broken(), "the broken tier (Broken) failed (OSError: the database file is truncated)"),
                      (Wild(), "the wild tier (Wild) failed (HDError: ")):  # fmt: skip
        drafter = ChainDrafter([bad], "CS", max_len=4, vocab_size=1000)
        drafter.offline["S"] = bad  # asked after the context tier, as the statistics tier would be
        rows = np.array([[1, 2, 3, 1, 2], [4, 5, 6, 7, 8]], dtype=np.int64)
        with caplog.at_level("WARNING", logger="hdlib.serving.proposer"):
            caplog.clear()
            for _ in range(3):
                chains = drafter.propose([[2], [8]], np.array([5, 5]), rows)
        assert chains == [[], []]
        assert [r.getMessage() for r in caplog.records if said in r.getMessage()] != []
        assert len(caplog.records) == 1  # once, not once a step or a row


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(
        st.tuples(st.lists(st.integers(0, 63), max_size=12), st.lists(st.integers(0, 63), max_size=3)),
        min_size=1,
        max_size=5,
    ),
    wide=st.booleans(),
    max_len=st.integers(1, 6),
    shuffles=st.integers(1, 3),
)
def test_propose_takes_any_batch_and_returns_chains_within_the_vocabulary_and_the_length(rows, wide, max_len, shuffles):
    """Empty rows, one-token rows, rows reordered between calls, int32 and int64: never an exception,
    never a token outside the vocabulary, never a chain longer than asked."""
    statistics = StatisticsTier.from_documents([[1, 2, 3, 4, 5] * 4, list(range(60))], StatisticsSettings())
    drafter = ChainDrafter([statistics], "CS", max_len=max_len, vocab_size=64)
    dtype = np.int64 if wide else np.int32
    rng = random.Random(len(rows))
    for _ in range(shuffles):
        rng.shuffle(rows)
        width = max([len(t) for t, _ in rows] + [1])
        token_ids = np.zeros((len(rows), width + 2), dtype=dtype)
        for i, (tokens, _) in enumerate(rows):
            token_ids[i, : len(tokens)] = tokens
        lengths = np.array([len(t) for t, _ in rows], dtype=dtype)
        chains = drafter.propose([emitted for _, emitted in rows], lengths, token_ids)
        assert len(chains) == len(rows)
        for chain, (_, emitted) in zip(chains, rows):
            assert len(chain) <= max_len and all(0 <= t < 64 for t in chain)
            assert chain == [] or emitted  # a row that emitted nothing gets no draft
    assert drafter.failures == set()  # (a failure would be contained: none may have been)
