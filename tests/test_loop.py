"""The decoding loop (`hdlib.engine.loop`). The contract: HD's greedy output is plain greedy decoding's
output, token for token.

Tiny random Llama and Gemma 3 models (built from configs, no download), random prompts with
repetition (so the context tier finds matches), random tiers, orders, budgets and lengths. The
oracle tier makes long accepted runs and rejected branches common.

The step's work on the host side: how often it reads from the device, and what it reads. On a GPU
every read of a tensor's value (`item`, `tolist`, `cpu`, `numpy`, `int(t)`, `if t:`) waits for the
device to finish the queued work. A greedy step may read at most twice; hdlib's reads once (the
model's choices after every node and their probabilities, in one transfer; the accepted path is
walked from them on the host), twice where the two best tokens are tied. Counted here on the CPU by a
`TorchFunctionMode` that sees every such call, in the engine and in the model alike.
"""

from __future__ import annotations

import functools

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.oracle import OracleTier, TruthTier, prompts
from support.tiny import VOCAB, tiny_gemma3, tiny_llama
from torch.overrides import TorchFunctionMode

from hdlib.engine.budget import FixedBudget
from hdlib.engine.drafter import Drafter
from hdlib.engine.forward_time import ForwardProfile, flat_profile
from hdlib.engine.loop import Decoder, DecodeSettings, run
from hdlib.engine.value import ValueBudget
from hdlib.errors import HDError
from hdlib.tiers import BONUS, ContextSettings, ContextTier, RecycledTier, Tier
from hdlib.tiers.guesses import GUESSES

MODELS = {"llama": tiny_llama, "gemma3": tiny_gemma3}


@functools.cache
def model(name: str):
    return MODELS[name]()


@functools.cache
def plain(name: str, prompt: tuple[int, ...], max_new: int, eos: frozenset[int] = frozenset()) -> list[int]:
    return run(model(name), prompt, None, DecodeSettings(max_new_tokens=max_new), eos).tokens


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(sorted(MODELS)),
    prompt=prompts,
    order=st.sampled_from(["C", "O", "CO", "OC"]),
    budget=st.integers(0, 24),
    keys=st.tuples(st.integers(1, 4), st.integers(0, 3)),
    draft_len=st.integers(1, 8),
    max_new=st.integers(1, 40),
    seed=st.integers(0, 1000),
)
def test_hd_equals_plain_greedy(name, prompt, order, budget, keys, draft_len, max_new, seed):
    max_key, min_key = keys[0], max(1, keys[0] - keys[1])
    want = plain(name, prompt, max_new)
    truth = list(prompt) + want
    make = {
        "C": lambda: ContextTier(ContextSettings(max_key=max_key, min_key=min_key, draft_len=draft_len)),
        "O": lambda: OracleTier(truth, VOCAB, seed),
    }
    drafter = Drafter([make[c]() for c in order])
    got = run(model(name), prompt, drafter, DecodeSettings(max_new_tokens=max_new), (), FixedBudget(budget))
    assert got.tokens == want
    # Provenance: every emitted token carries the tier of the node it came from; the last is the model's.
    for step in got.steps:
        assert step.tiers[-1] is BONUS
        assert list(step.tiers[:-1]) == [step.tree.tiers[n] for n in step.accepted_nodes[1 : len(step.tiers)]]
        assert step.tree.n_drafted <= budget
    # The record adds up: every step emits its accepted drafts and one token of the model's own.
    assert all(len(step.tokens) == len(step.accepted_nodes) for step in got.steps)
    if budget and "O" in order and max_new > 8:
        assert got.mat > 1.0  # the oracle's truths were accepted: the test exercised acceptance


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("prompt", [(5, 6, 7, 8, 9) * 3, (40, 12, 77, 3, 3, 61, 29, 90, 14)])
def test_plain_decoding_equals_transformers_generate(name, prompt):
    """The reference the whole contract rests on, checked against an independent implementation:
    transformers' own greedy `generate` (its own cache, masks and, for Gemma 3, sliding-window cache)."""
    import torch
    from transformers import GenerationConfig

    m = MODELS[name]()
    m.generation_config.eos_token_id = None  # no end token: 48 tokens whatever they are
    config = GenerationConfig(max_new_tokens=48, do_sample=False, pad_token_id=2)
    with torch.inference_mode():
        ref = m.generate(torch.tensor([prompt]), generation_config=config)[0, len(prompt) :].tolist()
    assert len(ref) == 48
    assert plain(name, prompt, 48) == ref
    hd = run(m, prompt, Drafter([ContextTier(), OracleTier(list(prompt) + ref, VOCAB)]),
             DecodeSettings(max_new_tokens=48), (), FixedBudget(12))
    assert hd.tokens == ref and hd.mat > 1.5


@pytest.mark.parametrize("name", sorted(MODELS))
def test_stops_at_end_of_sequence_inside_an_accepted_run(name):
    prompt = (5, 6, 7, 8, 9) * 3
    full = plain(name, prompt, 30)
    eos = frozenset({full[6]})
    want = plain(name, prompt, 30, eos)
    assert want[-1] in eos and len(want) <= 7
    truth = list(prompt) + full
    drafter = Drafter([TruthTier(truth)])  # drafts the plain answer exactly: the path runs past the end token
    got = run(model(name), prompt, drafter, DecodeSettings(max_new_tokens=30), eos, FixedBudget(16))
    assert got.tokens == want and got.stop_reason == "eos"
    last = got.steps[-1]
    accepted = [last.tree.tokens[n] for n in last.accepted_nodes[1:]]
    # The step's accepted path ran past the end token, and the answer was cut there.
    assert len(accepted) > len(last.tokens) and list(last.tokens) == accepted[: len(last.tokens)]


@pytest.mark.parametrize("name", sorted(MODELS))
def test_stops_before_the_context_length(name):
    m = MODELS[name]()
    m.config.max_position_embeddings = 24
    prompt = (5, 6, 7, 8) * 4  # 16 tokens: 8 fit
    plain_run = run(m, prompt, None, DecodeSettings(max_new_tokens=50))
    assert len(plain_run.tokens) == 8 and plain_run.stop_reason == "context_length"
    drafter = Drafter([OracleTier(list(prompt) + plain_run.tokens, VOCAB, seed=1)])
    got = run(m, prompt, drafter, DecodeSettings(max_new_tokens=50), (), FixedBudget(16))
    assert got.tokens == plain_run.tokens and got.stop_reason == "context_length"
    with pytest.raises(HDError, match="context holds 24"):
        run(m, tuple(range(3, 27)), None, DecodeSettings(max_new_tokens=5))


PROFILES = {"flat": flat_profile(), "cpu": ForwardProfile(tuple([1.0] + [1.5 + 0.05 * k for k in range(63)]), 0, "cpu")}


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(sorted(MODELS)),
    prompt=prompts,
    order=st.sampled_from(["CO", "OC", "CR", "RC", "ROC", "R", "CRMO", "MRC"]),
    profile=st.sampled_from(sorted(PROFILES)),
    candidates=st.integers(0, 24),
    max_new=st.integers(1, 40),
    seed=st.integers(0, 1000),
    gate=st.booleans(),
)
def test_the_value_ranked_tree_its_gate_and_the_recycled_tier_equal_plain_greedy(
    name, prompt, order, profile, candidates, max_new, seed, gate
):
    """R drafts only what the model's own logits said in earlier passes; M a few phrases; with the
    gate, a tier after the first is asked only where it pays (on the flat profile, often not)."""
    import numpy as np

    from hdlib.tiers import ModelTier, RecycledTier

    want = plain(name, prompt, max_new)
    truth = list(prompt) + want
    make = {
        "C": lambda: ContextTier(),
        "O": lambda: OracleTier(truth, VOCAB, seed, tier=Tier.STATISTICS),
        "R": lambda: RecycledTier(),
        "M": lambda: ModelTier(np.array([[5, 6, 7], [6, 7, 8]]), np.array([2, 1])),
    }
    drafter = Drafter([make[c]() for c in order])
    policy = ValueBudget(PROFILES[profile], candidates=candidates, gate=gate)
    got = run(model(name), prompt, drafter, DecodeSettings(max_new_tokens=max_new), (), policy)
    assert got.tokens == want
    order_asked = [t.tier for t in drafter.tiers]
    generated = 0
    for step in got.steps:
        assert step.estimates is not None and len(step.estimates) == len(step.tree) and step.estimates[0] == 1.0
        assert all(0 <= e <= 1 for e in step.estimates)
        assert list(step.tiers[:-1]) == [step.tree.tiers[n] for n in step.accepted_nodes[1 : len(step.tiers)]]
        # The first tier is asked at every step with room for a draft; without the gate every tier is.
        if candidates > 0 and max_new - generated > 1:
            assert step.asked[0] == order_asked[0] and set(step.asked) <= set(order_asked)
            assert gate or list(step.asked) == order_asked
        else:
            assert step.asked == ()
        generated += len(step.tokens)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_recycled_tier_drafts_the_models_own_guesses(name):
    from hdlib.tiers import RecycledTier

    prompt = (5, 6, 7, 8, 9) * 3
    want = plain(name, prompt, 40)
    tier = RecycledTier()
    got = run(model(name), prompt, Drafter([tier]), DecodeSettings(max_new_tokens=40), (), ValueBudget(flat_profile()))
    assert got.tokens == want
    recycled = [n for s in got.steps for n in s.accepted_nodes[1:] if s.tree.tiers[n] == Tier.RECYCLED]
    assert len(recycled) >= 5  # the model's guesses of earlier passes were drafted and accepted
    assert len(tier.table.table) > 0  # the generation's table, handed to the tier, was filled


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(sorted(MODELS)),
    prompt=prompts,
    order=st.permutations("CMS"),
    budget=st.integers(1, 20),
    seed=st.integers(0, 1000),
)
def test_hd_with_all_three_tiers_equals_plain_greedy(name, prompt, order, budget, seed):
    """Real model and statistics tiers, built from small corpora: one of them the model's own output."""
    import numpy as np

    from hdlib.tiers.model import ModelTier
    from hdlib.tiers.statistics import StatisticsSettings, StatisticsTier

    want = plain(name, prompt, 30)
    rng = np.random.default_rng(seed)
    answer = list(prompt) + want  # the model's own text: its n-grams are what the model tier holds
    ngrams = np.array([answer[i : i + 5] for i in range(len(answer) - 4)] or [[3, 4, 5, 6, 7]], dtype=np.int32)
    noise = rng.integers(3, VOCAB, size=(20, 5), dtype=np.int32)
    model_tier = ModelTier(np.concatenate([ngrams, noise]), rng.integers(1, 9, size=len(ngrams) + 20))
    corpus = [answer[i : i + 12] for i in range(0, len(answer), 5)] + rng.integers(3, VOCAB, size=(10, 30)).tolist()
    stats_tier = StatisticsTier.from_documents(corpus, StatisticsSettings(max_key=3, draft_len=5))
    tiers = {"C": ContextTier(), "M": model_tier, "S": stats_tier}
    drafter = Drafter([tiers[c] for c in order])
    got = run(model(name), prompt, drafter, DecodeSettings(max_new_tokens=30), (), FixedBudget(budget))
    assert got.tokens == want
    if order[0] == "M" and budget >= 4 and len(want) == 30:
        assert got.tier_counts[Tier.MODEL] > 0  # the model's own n-grams were drafted and accepted


def test_the_stop_reason_is_typed_and_keeps_its_plain_value():
    from hdlib.engine.trace import STOP_REASONS, StopReason

    got = run(model("llama"), (5, 6, 7), None, DecodeSettings(max_new_tokens=4))
    assert got.stop_reason is StopReason.MAX_NEW_TOKENS and got.stop_reason == "max_new_tokens"
    assert got.summary()["stop_reason"] == "max_new_tokens" and got.stop_message == "reached max_new_tokens"
    assert STOP_REASONS == ("eos", "max_new_tokens", "context_length")
    assert [StopReason(r).message for r in STOP_REASONS] == [
        "the model ended its answer", "reached max_new_tokens", "stopped at the model's context length"
    ]


def test_each_step_records_what_the_model_wanted_at_every_node():
    prompt = (5, 6, 7, 8) * 3
    want = plain("llama", prompt, 30)
    drafter = Drafter([ContextTier(), OracleTier(list(prompt) + want, VOCAB, seed=3)])
    got = run(model("llama"), prompt, drafter, DecodeSettings(max_new_tokens=30), (), FixedBudget(12))
    assert got.tokens == want
    rejections = 0
    for step in got.steps:
        tree, path = step.tree, step.accepted_nodes
        assert len(step.choices) == len(step.choice_probs) == len(step.accept_probs) == len(tree)
        assert all(0 < p <= 1 for p in step.choice_probs)
        assert step.choices[path[-1]] == step.tokens[-1]  # the bonus token is the model's choice after the path
        for node, parent in enumerate(tree.parents[1:], start=1):
            tried = parent in path
            assert (step.accept_probs[node] is not None) == tried
            if tried:  # greedy: accepted exactly when the draft is the model's choice after its parent
                assert step.accept_probs[node] == float(tree.tokens[node] == step.choices[parent])
                assert (node in path) == (tree.tokens[node] == step.choices[parent])
        assert all(tree.tokens[n] != step.choices[tree.parents[n]] for n in step.rejected())
        rejections += len(step.rejected())
    assert rejections > 0  # the oracle's wrong branches were tried and refused


def test_sampled_steps_record_each_tried_nodes_acceptance_probability():
    prompt = (5, 6, 7, 8) * 3
    drafter = Drafter([ContextTier()])
    got = run(model("llama"), prompt, drafter, DecodeSettings(30, 1.0, seed=2), (), FixedBudget(12))
    tried = [(s, n) for s in got.steps for n, a in enumerate(s.accept_probs) if a is not None and n]
    assert tried
    for step, node in tried:
        assert step.tree.parents[node] in step.accepted_nodes and 0 <= step.accept_probs[node] <= 1
        if node in step.accepted_nodes:
            assert step.accept_probs[node] > 0


# The step's work on the host side ---------------------------------------------------------------------

READS = frozenset({"item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__float__", "__index__"})
PROMPT = (5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5, 6, 7)


class HostReads(TorchFunctionMode):
    """Counts the calls that read a tensor's values back to the host."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in READS:
            self.calls.append(name)
        return func(*args, **(kwargs or {}))


def reads_per_step(decoder: Decoder) -> list[list[str]]:
    """The reads of each step after the first (the first also prefills the prompt)."""
    per_step, steps = [], iter(decoder)
    while True:
        with HostReads() as counter:
            try:
                next(steps)
            except StopIteration:
                break
        per_step.append(counter.calls)
    return per_step[1:]


@pytest.mark.parametrize("name", ["llama", "gemma3"])
@pytest.mark.parametrize("budget", [16, 64])
def test_a_greedy_step_reads_from_the_device_at_most_twice(name, budget):
    m = model(name)
    truth = list(PROMPT) + run(m, PROMPT, None, DecodeSettings(max_new_tokens=40)).tokens
    tiers = [ContextTier(), OracleTier(truth, VOCAB, seed=3, tier=Tier.STATISTICS), RecycledTier()]
    decoder = Decoder(m, PROMPT, Drafter(tiers), DecodeSettings(max_new_tokens=40), policy=FixedBudget(budget))
    per_step = reads_per_step(decoder)
    assert len(per_step) >= 3
    worst = max(per_step, key=len)
    assert len(worst) <= 2, f"a greedy step read from the device {len(worst)} times: {worst}"


def test_the_value_tree_step_reads_at_most_twice_too():
    m = model("llama")
    truth = list(PROMPT) + run(m, PROMPT, None, DecodeSettings(max_new_tokens=40)).tokens
    tiers = [ContextTier(), OracleTier(truth, VOCAB, seed=5, tier=Tier.STATISTICS), RecycledTier()]
    decoder = Decoder(
        m, PROMPT, Drafter(tiers), DecodeSettings(max_new_tokens=40), policy=ValueBudget(flat_profile([0.01] * 64))
    )
    assert max(len(calls) for calls in reads_per_step(decoder)) <= 2


def test_the_counter_sees_a_read():
    """The negative control: the mode counts what the engine used to do per step (`int(t)`, `tolist`)."""
    with HostReads() as counter:
        t = torch.arange(4)
        int(t[0]), t.tolist(), bool(t[1] > 0), t.numpy(), t.cpu()
    assert counter.calls == ["__int__", "tolist", "__bool__", "numpy", "cpu"]


def test_step_times_name_every_phase():
    m = model("llama")
    tiers = [ContextTier(), RecycledTier()]
    gen = run(m, PROMPT, Drafter(tiers), DecodeSettings(max_new_tokens=12), policy=ValueBudget(flat_profile()))
    for step in gen.steps:
        t = step.times
        assert t.policy > 0 and t.draft > 0 and t.forward > 0 and t.accept > 0 and t.update > 0
        assert t.total == pytest.approx(t.draft + t.tree + t.forward + t.accept + t.update + t.policy)
    assert Tier.RECYCLED in gen.tier_order
    assert [x.tier for x in gen.steps[0].lookups] == [Tier.CONTEXT, Tier.RECYCLED]


def test_records_and_recycled_guesses_agree_with_acceptance_on_ties():
    """Every token tied (all rows of the output layer equal): greedy decoding takes token 0, the
    first of the maxima; the step's records and the guesses the model tier recycles must say so too.
    Before, they came from `topk`, which put another of the tied tokens first."""
    m = tiny_llama()
    with torch.no_grad():
        m.lm_head.weight[:] = m.lm_head.weight[0].clone()
    recycled = RecycledTier()
    gen = run(m, PROMPT, Drafter([ContextTier(), recycled]), DecodeSettings(max_new_tokens=12), policy=FixedBudget(8))
    assert gen.tokens == [0] * 12
    for step in gen.steps:
        assert [step.choices[n] for n in step.accepted_nodes] == list(step.tokens)
    assert recycled.table.guesses(0)[1][0][0] == 0


def test_every_learner_reads_the_models_guesses_from_the_one_record_of_each_step():
    """The model's guesses are read once per pass into the step's record (plain decoding reads none),
    and the recycled tier and the value-ranked tree each learn them from it: their tables hold the
    same guesses, and a second generation's recycled table starts empty."""
    m = model("llama")
    tier, policy = RecycledTier(), ValueBudget(flat_profile())
    gen = run(m, PROMPT, Drafter([ContextTier(), tier]), DecodeSettings(max_new_tokens=16), policy=policy)
    assert all(s.guesses is not None and len(s.guesses.tokens) == len(s.tree) for s in gen.steps)
    assert all(len(row) == GUESSES for s in gen.steps for row in s.guesses.successors)  # type: ignore[union-attr]
    assert len(tier.table.table) > 0 and tier.table.table == policy.guesses.table
    assert all(s.guesses is None for s in run(m, PROMPT, Drafter([]), DecodeSettings(max_new_tokens=4)).steps)
    again = run(m, PROMPT, Drafter([ContextTier(), tier]), DecodeSettings(max_new_tokens=16), policy=FixedBudget(8))
    assert again.tokens == gen.tokens
    tier.begin(PROMPT)
    assert not tier.table.table  # each request starts afresh
