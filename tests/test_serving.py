"""HD as vLLM's proposer (hdlib.serving), without vLLM: the runner's calls simulated.

A batch of requests is decoded as vLLM decodes with a proposer: after each step, one `propose` call
with every row's emitted tokens, lengths and tokens, the rows shuffled between steps (vLLM moves
them), each row's chain verified greedily by a tiny model. The answers must be plain greedy
decoding's, token for token, and the drafts must have been accepted somewhere.
"""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from support.outcome import appended
from support.tiny import tiny_llama

from hdlib.engine.loop import DecodeSettings, run
from hdlib.errors import HDError
from hdlib.serving.chain import ChainDrafter
from hdlib.serving.index import REACH, ContextIndex
from hdlib.serving.length import EXPLORE, FADE, SCALE, StepClock, StepCost
from hdlib.serving.proposer import HDProposer, cost_scale, state_bytes, tier_order
from hdlib.tiers import ContextSettings, ContextTier, DraftTier, StatisticsSettings, StatisticsTier, Tier

ROOT = Path(__file__).resolve().parent.parent
MAX_LEN = 96  # vLLM's token_ids_cpu: one row of max_model_len per request


def greedy_next(model, tokens: list[int]) -> list[int]:
    """The model's argmax after every position of `tokens`."""
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([tokens])).logits[0]
    return logits.argmax(dim=-1).tolist()


def serve(model, prompts: list[list[int]], drafter: ChainDrafter, new: int, seed: int = 0, ids: bool = False):
    """Decode `prompts` together as vLLM does with a proposer; the answers and the draft tokens accepted.
    With `ids`, the rows' request ids are passed, as the proposer reads them from vLLM's runner."""
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
        names = [f"request-{r}" for r in order] if ids else None
        proposals = drafter.propose([emitted[r] for r in order], lengths, token_ids, names, names)
        for row, r in enumerate(order):
            assert len(proposals[row]) <= drafter.max_len
            chains[r] = proposals[row] if emitted[r] else []
    return [t[len(p) : len(p) + new] for t, p in zip(texts, prompts)], accepted


PROMPTS = [[5, 6, 7, 8] * 3, [40, 41, 9, 3, 70], [9, 2, 3, 4, 5, 9], [11, 12, 13, 11, 12]]


@pytest.mark.parametrize("order, ids", [("CMS", False), ("CMS", True), ("C", False), ("SC", True)])
def test_a_batch_served_with_hd_chains_is_plain_greedy_decoding(order, ids):
    model = tiny_llama()
    plain = [run(model, p, None, DecodeSettings(max_new_tokens=24)).tokens for p in PROMPTS]
    statistics = StatisticsTier.from_documents([list(plain[0]), [5, 6, 7, 8] * 3], StatisticsSettings())
    from support.paper import model_tier

    phrases = model_tier(*[((t, t + 1, t + 2, t + 3, t + 4), 10) for t in range(3, 80)])
    offline = [t for t in (phrases, statistics) if t.tier.letter in order]
    drafter = ChainDrafter(offline, order, max_len=6)
    got, accepted = serve(model, PROMPTS, drafter, new=24, ids=ids)
    assert got == [list(p) for p in plain]
    # A random model repeats nothing, so the context tier alone is seldom right; the statistics tier
    # holds the first answer's start and drafts it where the answer comes.
    assert accepted > 0 or "S" not in order
    assert len(drafter) == len(PROMPTS)  # each request found again, wherever its row went


def test_a_row_that_emitted_nothing_gets_no_draft_and_what_was_accepted_is_learned():
    drafter = ChainDrafter([], "C", max_len=5, scale=0)  # no cost: the whole chain, every step
    tokens = np.array([[1, 2, 3, 1, 2, 3, 1, 2, 0, 0]], dtype=np.int32)
    assert drafter.propose([[]], np.array([8]), tokens) == [[]]  # a partial prefill
    assert drafter.propose([[2]], np.array([8]), tokens) == [[3, 1, 2, 3, 1]]  # the context copies itself
    state = drafter.request(tokens[0, :8], 0)
    assert state.proposed == 5 and state.sources == ["C5"] * 5 and state.last == 0  # after a match of 5 (to 7)
    tokens[0, 8:] = 3  # the model accepted the first draft (3), refused the second (1) and said 3
    drafter.propose([[3, 3]], np.array([10]), tokens)
    assert state.last == 1  # part accepted
    learned = {("C5", 1, 0): 1, ("C", 1, 0): 1, ("C5", 2, 0): 1, ("C", 2, 0): 1}  # (the third was never reached)
    assert drafter.acceptance.tries == learned  # each for its source and for its tier
    assert drafter.acceptance.hits == {("C5", 1, 0): 1, ("C", 1, 0): 1, ("C5", 2, 0): 0, ("C", 2, 0): 0}


def test_a_draft_costs_less_after_a_step_its_drafts_made_slower():
    """A step that emits E tokens in `load` times a plain step's time yields E / load tokens per plain
    step: what a draft costs, in tokens, falls by the last step's load."""
    drafter = ChainDrafter([], "C", max_len=4, scale=1.0)
    text = np.array([[1, 2, 3, 1, 2, 3, 1, 2]] * 16, dtype=np.int32)
    before = drafter.costs(16, 32)
    assert before == pytest.approx([32 * c for c in drafter.marginal(16)]) and drafter.load == 1.0
    chains = drafter.propose([[2]] * 16, np.array([8] * 16), text)
    assert drafter.load == pytest.approx(1 + sum(drafter.spent(16, len(c)) for c in chains)) and drafter.load > 1
    assert drafter.costs(16, 32) == pytest.approx([c / drafter.load for c in before])


def test_the_drafter_times_only_steps_that_decoded_and_weighs_drafts_by_what_they_cost_served():
    """With a clock, the time from one call's return to the next is the step that verified the first
    call's drafts; it is seen only where no request entered (its prompt was in that step) and no row
    was part of a prefill. Once the clock has learned that drafts cost rho times the measured, a
    draft's cost is rho c_k E / (1 + rho M)."""
    now = [0.0]
    cost = StepCost.measured()
    clock = StepClock(cost, now=lambda: now[0])
    drafter = ChainDrafter([], "C", max_len=4, clock=clock)
    text = np.array([[1, 2, 3, 1, 2, 3, 1, 2, 3, 1]] * 40, dtype=np.int32)
    ids = [f"r{i}" for i in range(40)]

    def step(rows: int, seconds: float, emitted: list[list[int]] | None = None) -> None:
        now[0] += seconds
        drafter.propose(emitted or [[2]] * rows, np.array([10] * rows), text[:rows], ids[:rows], set(ids))

    step(32, 1.0)  # the first call: nothing to time
    step(32, 0.5)  # the same requests: seen
    step(33, 0.5)  # r32 entered: its prefill was in this step
    step(33, 0.5, [[2]] * 32 + [[]])  # a row emitted nothing: a prefill's chunk
    step(32, 0.5)  # seen
    assert clock.seen(32) == pytest.approx(1 + FADE)  # two steps seen, the older faded
    plain = ChainDrafter([], "C", max_len=4)
    plain.load = drafter.load
    clock.fit = lambda rows: (1.0, 2.0)  # (as though it had learned that drafts cost twice the measured)
    doubled = [2 * c for c in plain.costs(40, 60, load=1 + 2 * (drafter.load - 1))]
    assert drafter.costs(40, 60) == pytest.approx(doubled)


def test_a_row_verifies_the_prefix_its_drafts_pay_for_at_the_batch_size():
    """The chain is cut where its drafts stop paying: free drafts are all verified, drafts dearer
    than any chance of acceptance none, and alone in a batch a row drafts more than among many."""
    text = [2, 5, 7, 7] + [5, 1, 2, 3] * 3 + [5]
    free = StepCost({1: {0: 100.0, 8: 100.0}, 64: {0: 100.0, 8: 100.0}})
    dear = StepCost({1: {0: 100.0, 8: 1700.0}, 64: {0: 100.0, 8: 1700.0}})
    assert ChainDrafter([], "C", max_len=6, cost=free).propose([[5]], np.array([17]), np.array([text]))[0] == [
        1, 2, 3, 5, 1, 2
    ]  # fmt: skip
    assert ChainDrafter([], "C", max_len=6, cost=dear).propose([[5]], np.array([17]), np.array([text]))[0] == []
    assert ChainDrafter([], "C", max_len=6, cost=dear, scale=0).propose([[5]], np.array([17]), np.array([text]))[0]
    # With this machine's measured step times and nothing learned yet (every draft's chance 0.5 of the
    # one before's), a row alone verifies more of its chain than each of 64 rows does (but the one
    # chain in EXPLORE verified whole).
    alone = ChainDrafter([], "C", max_len=6).propose([[5]], np.array([17]), np.array([text]))[0]
    chains = ChainDrafter([], "C", max_len=6).propose([[5]] * 64, np.array([17] * 64), np.array([text] * 64))
    assert len(chains[EXPLORE - 1]) == 6
    assert all(len(chain) < len(alone) for i, chain in enumerate(chains) if i != EXPLORE - 1)


def test_the_cost_settings_are_read_and_checked(tmp_path):
    assert cost_scale(None) == SCALE and cost_scale("0") == 0 and cost_scale("2.5") == 2.5
    for bad in ("-1", "x", "inf", "nan"):
        with pytest.raises(HDError, match="HDLIB_VLLM_COST_SCALE"):
            cost_scale(bad)
    measured = tmp_path / "cost.json"
    measured.write_text('{"step_ms": {"1": {"0": 10, "1": 10}, "64": {"0": 100, "1": 100}}}')
    drafter = proposer(env={"HDLIB_VLLM_STEP_COST": str(measured), "HDLIB_VLLM_COST_SCALE": "3"}).drafter
    assert drafter.cost.ms == {1: {0: 10.0, 1: 10.0}, 64: {0: 100.0, 1: 100.0}} and drafter.scale == 3
    assert drafter.costs(64, 96) == [0.0] * 4  # drafts free on that machine: a row of 64 drafts all it has


def test_the_tier_order_is_checked():
    assert tier_order(None) == "CMS" and tier_order("sc") == "SC"
    for bad in ("X", "CX", "CC"):
        with pytest.raises(HDError, match="HDLIB_VLLM_TIERS"):
            tier_order(bad)


def test_the_databases_come_from_the_environment_or_the_tokenizers_and_a_missing_one_is_said(monkeypatch, tmp_path):
    from hdlib.serving.proposer import MODEL_DB_ENV, STATISTICS_DB_ENV, model_db_for, offline_tiers

    monkeypatch.setenv(MODEL_DB_ENV, str(tmp_path / "model.npz"))
    assert model_db_for("f" * 16) == tmp_path / "model.npz"
    with pytest.raises(HDError, match="no model database .*hdlib build-db model"):
        offline_tiers("f" * 16, "CM")
    monkeypatch.setenv(STATISTICS_DB_ENV, str(tmp_path / "statistics.npz"))
    with pytest.raises(HDError, match="no statistics database .*hdlib warmup"):
        offline_tiers("f" * 16, "CS")
    assert offline_tiers("f" * 16, "C") == []  # the context tier needs no file


def test_the_shipped_model_database_is_found_by_the_served_tokenizers_fingerprint(monkeypatch):
    from hdlib.serving.proposer import MODEL_DB_ENV, model_db_for
    from hdlib.store import read_meta

    monkeypatch.delenv(MODEL_DB_ENV, raising=False)
    shipped = ROOT / "data" / "db" / "smollm2-135m.model.npz"
    assert model_db_for(read_meta(shipped)["tokenizer"]) == shipped
    assert model_db_for("0" * 16).name == "model-0000000000000000.npz"  # another tokenizer's: the cache's


@settings(max_examples=200, deadline=None)
@given(
    prompt=st.lists(st.integers(0, 4), max_size=30),
    steps=st.lists(st.lists(st.integers(0, 4), min_size=1, max_size=5), min_size=1, max_size=12),
)
def test_the_context_index_drafts_what_the_context_tier_drafts_first(prompt, steps):
    """The index (its hash table grown from 64 slots as the text grows) drafts the engine's context
    tier's first draft: the longest earlier suffix match's continuation, round a loop."""
    index = ContextIndex(np.array(prompt, dtype=np.int64), 1, 4)
    tier, text = ContextTier(ContextSettings(min_key=1, max_key=4, draft_len=10)), list(prompt)
    tier.begin(text)
    for new in steps:
        text += new
        index.extend(np.array(new, dtype=np.int32))
        tier.update(appended(new))
        first = tier.propose(text, 40)
        assert index.draft(10).tolist() == (list(first[0].tokens) if first else [])
        assert index.tokens.tolist() == text
        # How long the match is: its key, followed back as far as the text repeats itself (REACH at most)
        m, end = index.match_length, index._match
        assert (m == 0) == (not first) and (not first or first[0].key_length <= m <= REACH)
        stops = m == REACH or end == m or (first and text[end - m - 1] != text[-m - 1])  # it could go no further
        assert not first or (text[end - m : end] == text[-m:] and stops)


def test_the_keys_hashes_differ_in_their_high_bits_which_place_them_in_the_table():
    """Distinct keys of one and of four tokens land apart in the high bits that choose their slot (a
    polynomial alone leaves every one-token key's high bits zero: every key in one slot's run), and
    keys of the same tokens but another length hash apart."""
    from hdlib.serving.index import key_hash, quiet

    tokens = np.arange(5_000, dtype=np.int32)
    with quiet():
        for m in (1, 4):
            high = {int(key_hash(tokens, end, m)) >> 32 for end in range(m, len(tokens) + 1)}
            assert len(high) == len(tokens) - m + 1
        same = np.array([7, 7, 7, 7], dtype=np.int32)
        assert len({int(key_hash(same, 4, m)) for m in (1, 2, 3, 4)}) == 4


def test_states_are_kept_by_request_id_and_let_go_when_the_request_is_no_longer_alive():
    drafter = ChainDrafter([], "C", max_len=4)
    system = list(range(100, 140))  # a system prompt every request shares, longer than any key
    a, b = np.array(system + [1, 2, 3, 1, 2]), np.array(system + [1, 2, 7, 1, 2])  # alike at the end
    rows = np.stack([a, b])
    chains = drafter.propose([[2], [2]], np.array([45, 45]), rows, ["a", "b"], {"a", "b"})
    assert chains[0][:1] == [3] and chains[1][:1] == [7]  # each request drafts from its own text only
    chains = drafter.propose([[2], [2]], np.array([45, 45]), rows[::-1], ["b", "a"], {"a", "b"})
    assert chains[1][:1] == [3] and len(drafter) == 2
    drafter.propose([[2]], np.array([45]), rows[1:], ["b"], {"b"})  # a finished (or was aborted)
    assert len(drafter) == 1
    # An id used again for other tokens starts over rather than drafting from the old text.
    drafter.propose([[5]], np.array([3]), np.array([[5, 6, 5]]), ["b"], {"b"})
    assert len(drafter) == 1 and drafter.request(np.array([5, 6, 5]), 0, "b").context.tokens.tolist() == [5, 6, 5]


def test_without_ids_a_row_takes_only_a_state_that_holds_its_whole_beginning():
    """Two requests with one system prompt and questions of one length ending alike do not take each
    other's state (found by a sample of its tokens, they did); two rows holding the same tokens (an
    n > 1 request's siblings) get a state each."""
    drafter = ChainDrafter([], "C", max_len=4, scale=0)
    system = list(range(100, 140))
    a, b = system + [1, 2, 3, 1, 2], system + [7, 8, 9, 1, 2]
    drafter.propose([[2], [2]], np.array([45, 45]), np.array([a, b]))
    a, b = a + [3], b + [9]  # each emitted one token
    chains = drafter.propose([[9], [3]], np.array([46, 46]), np.array([b, a]))
    assert chains[1][:2] == [1, 2] and chains[0][:2] == [1, 2]  # a: "3" went on "1 2"; b: "9" did too
    assert [drafter.request(np.array(t), 0).context.tokens.tolist() for t in (a, b)] == [a, b]
    assert len(drafter) == 2
    twins = drafter.propose([[4], [4]], np.array([3, 3]), np.array([[4, 5, 4], [4, 5, 4]]))
    assert twins[0] == twins[1] == [5, 4, 5, 4] and len(drafter) == 4


def test_the_states_bytes_stay_within_the_bound():
    rng = np.random.default_rng(0)
    drafter = ChainDrafter([], "C", max_len=4, max_bytes=100_000)
    for _ in range(120):  # requests one after another, each seen at two steps
        tokens = rng.integers(0, 50_000, 300)
        drafter.propose([[1]], np.array([299]), tokens[None, :299])
        drafter.propose([[1]], np.array([300]), tokens[None, :])
        assert drafter.nbytes <= 100_000
    assert 1 <= len(drafter) <= 100_000 // (300 * 4)
    assert drafter.nbytes == sum(s.context.nbytes for s in drafter._states.values())  # counted right
    assert state_bytes(None) == 1 << 30 and state_bytes("2048") == 2048
    for bad in ("0", "-1", "1GB"):
        with pytest.raises(HDError, match="HDLIB_VLLM_STATE_BYTES"):
            state_bytes(bad)


def test_importing_the_proposer_loads_no_torch_transformers_or_bench():
    """Every vLLM worker imports the proposer's module: it stays light."""
    heavy = ["torch", "transformers", "hdlib.bench", "hdlib.engine", "hdlib.models"]
    code = f"import sys, hdlib.serving.proposer; print([m for m in {heavy!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


class Runner:
    """vLLM's model runner as the proposer sees it: its input batch and the requests alive."""

    def __init__(self, drafter):
        self.drafter, self.requests = drafter, {}
        self.input_batch = SimpleNamespace(req_ids=[], token_ids_cpu=np.zeros((4, 64), np.int32))
        self.input_batch.num_tokens_no_spec = np.zeros(4, np.int32)

    def propose_draft_token_ids(self, sampled, rows=None):  # as vLLM's runner calls a custom_class proposer
        batch = self.input_batch
        lengths, tokens = (batch.num_tokens_no_spec, batch.token_ids_cpu) if rows is None else rows
        return self.drafter.propose(sampled, lengths, tokens, slot_mappings=None)


def proposer(max_len: int = 4, env: dict[str, str] | None = None) -> HDProposer:
    """HDProposer with the context tier only, drafting all the tiers give (unless `env` says otherwise)."""
    config = SimpleNamespace(
        speculative_config=SimpleNamespace(num_speculative_tokens=max_len),
        model_config=SimpleNamespace(get_vocab_size=lambda: 1000),
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HDLIB_VLLM_TIERS", "C")  # no database: no tokenizer is read
        patch.setenv("HDLIB_VLLM_COST_SCALE", "0")  # every draft the tiers give, whatever the batch
        for name, value in (env or {}).items():
            patch.setenv(name, value)
        return HDProposer(config)


def test_the_proposer_reads_the_request_ids_from_the_runner_that_calls_it(caplog):
    hd = proposer()
    runner = Runner(hd)
    runner.requests = {"x": None, "y": None}
    runner.input_batch.req_ids = ["x", "y"]
    runner.input_batch.token_ids_cpu[:2, :5] = [[1, 2, 3, 1, 2], [4, 5, 6, 4, 5]]
    runner.input_batch.num_tokens_no_spec[:2] = 5
    assert runner.propose_draft_token_ids([[2], [5]]) == [[3, 1, 2, 3], [6, 4, 5, 6]]
    assert hd.unbound is None and set(hd.drafter._states) == {"x", "y"}
    del runner.requests["x"]  # finished: vLLM's runner pops it
    runner.input_batch.req_ids = ["y"]
    runner.input_batch.token_ids_cpu[0] = runner.input_batch.token_ids_cpu[1]
    runner.input_batch.num_tokens_no_spec[0] = 5
    runner.propose_draft_token_ids([[5]])
    assert set(hd.drafter._states) == {"y"}
    # Given arrays that are not the runner's batch, it says why once and finds states by their tokens.
    with caplog.at_level("WARNING", logger="hdlib.serving.proposer"):
        rows = (np.array([5]), np.array([[1, 2, 3, 1, 2]]))
        assert runner.propose_draft_token_ids([[2]], rows) == [[3, 1, 2, 3]]
        runner.propose_draft_token_ids([[2]], rows)
    assert "input batch is not the rows propose was given" in hd.unbound
    assert len([r for r in caplog.records if "request ids cannot be had" in r.getMessage()]) == 1
    runner.propose_draft_token_ids([[5]])  # called by the runner again: its ids again, the others let go
    assert set(hd.drafter._states) == {"y"}


def test_a_caller_without_an_input_batch_leaves_the_proposer_matching_by_tokens():
    hd = proposer()
    assert hd.propose([[2]], np.array([5]), np.array([[1, 2, 3, 1, 2]])) == [[3, 1, 2, 3]]
    assert "has no input batch and requests" in hd.unbound


class Broken(DraftTier):
    """A tier whose database is damaged: every lookup raises."""

    tier = Tier("broken", "B", "#332288")

    def propose(self, context, budget):
        raise OSError("the database file is truncated")


class Wild(DraftTier):
    """A tier built for another tokenizer: it drafts token ids the model does not have."""

    tier = Tier("wild", "W", "#332288")

    def propose(self, context, budget):
        return [(10_000, 10_001)]


def test_a_failing_tier_costs_its_row_a_draft_and_is_said_once_and_the_engine_goes_on(caplog):
    for bad, said in ((Broken(), "the broken tier (Broken) failed (OSError: the database file is truncated)"),
                      (Wild(), "the wild tier (Wild) failed (HDError: ")):  # fmt: skip
        drafter = ChainDrafter([bad], "SC", max_len=4, vocab_size=1000)
        drafter.offline["S"] = bad  # asked first, as the statistics tier would be
        rows = np.array([[1, 2, 3, 1, 2], [4, 5, 6, 7, 8]], dtype=np.int64)
        with caplog.at_level("WARNING", logger="hdlib.serving.chain"):
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


def test_the_gate_asks_a_tier_while_its_gain_pays_for_its_lookup_at_the_batchs_rate():
    from hdlib.serving.gate import RETRY, Gate

    now = [0.0]
    gate = Gate(clock=lambda: now[0])
    assert gate.ask("S")  # nothing measured: ask
    gate.step(1)
    gate.took("S", 0.001)  # a millisecond a lookup
    now[0] += 0.1
    gate.step(1)  # one row, 10 tokens a second: a lookup costs the batch 0.01 tokens
    assert gate.rate == pytest.approx(10) and gate.ask("S")
    for _ in range(200):
        gate.credit("S", 0)  # it never helps ...
    assert gate.gain["S"] < 0.02 and gate.ask("S")  # ... but costs less than it might add: still asked
    now[0] += 0.01
    gate.step(1000)  # a thousand rows in 10 ms: a lookup costs the batch ~20 tokens
    asked = sum(gate.ask("S") for _ in range(10 * RETRY))
    assert asked == 10  # left out, but for one row in RETRY


class Counting(StatisticsTier):
    """The statistics tier, counting its lookups."""

    lookups = 0

    def propose(self, context, budget):
        Counting.lookups += 1
        return super().propose(context, budget)


@pytest.mark.parametrize("rows, step_s, asked", [(1, 0.06, "all"), (64, 0.02, "few")])
def test_a_proposer_with_a_gate_asks_the_statistics_tier_alone_and_seldom_among_many_rows(rows, step_s, asked):
    """No row here has a context match (each row's tokens are new), so every chain would come from the
    statistics tier: alone in a batch, with a step of 60 ms, its lookups pay; among 64 rows whose step
    takes 20 ms, a lookup of the same cost holds up 64 rows and seldom pays."""
    from hdlib.serving.gate import Gate

    statistics = Counting.from_documents([list(range(3000))], StatisticsSettings())
    now = [0.0]
    drafter = ChainDrafter([statistics], "CS", max_len=4, gate=Gate(clock=lambda: now[0]))
    Counting.lookups = 0
    steps, start = 40, 0
    for step in range(steps):
        now[0] += step_s
        token_ids = np.array([[r * 40 + i for i in range(start + step + 1)] for r in range(rows)]) % 3000
        drafter.propose([[1]] * rows, np.full(rows, start + step + 1), token_ids)
    if asked == "all":
        assert Counting.lookups == steps
    else:
        assert Counting.lookups < steps * rows / 4
