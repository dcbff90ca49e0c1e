"""The step's work on the host side: how often it reads from the device, and what it reads.

On a GPU every read of a tensor's value (`item`, `tolist`, `cpu`, `numpy`, `int(t)`, `if t:`) waits
for the device to finish the queued work. A greedy step may read at most twice; hdlib's reads once
(the model's choices after every node and their probabilities, in one transfer; the accepted path
is walked from them on the host), twice where the two best tokens are tied. Counted here on the CPU
by a `TorchFunctionMode` that sees every such call, in the engine and in the model alike.
"""

from __future__ import annotations

import functools

import pytest
import torch
from oracle import OracleTier
from tiny import VOCAB, tiny_gemma3, tiny_llama
from torch.overrides import TorchFunctionMode

from hdlib.budget import FixedBudget
from hdlib.choices import TOP_BLOCK, SoftmaxBuffer, model_choices, settle_ties, top_tokens
from hdlib.decoding import Decoder, DecodeSettings, run
from hdlib.drafter import Drafter
from hdlib.forward_time import flat_profile
from hdlib.tiers import ContextTier, RecycledTier, Successors, Tier
from hdlib.value import ValueBudget

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


@functools.cache
def model(name: str):
    return {"llama": tiny_llama, "gemma3": tiny_gemma3}[name]()


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
    decoder = Decoder(m, PROMPT, Drafter(tiers), DecodeSettings(max_new_tokens=40), budget=FixedBudget(budget))
    per_step = reads_per_step(decoder)
    assert len(per_step) >= 3
    worst = max(per_step, key=len)
    assert len(worst) <= 2, f"a greedy step read from the device {len(worst)} times: {worst}"


def test_the_value_tree_step_reads_at_most_twice_too():
    m = model("llama")
    truth = list(PROMPT) + run(m, PROMPT, None, DecodeSettings(max_new_tokens=40)).tokens
    tiers = [ContextTier(), OracleTier(truth, VOCAB, seed=5, tier=Tier.STATISTICS), RecycledTier()]
    decoder = Decoder(
        m, PROMPT, Drafter(tiers), DecodeSettings(max_new_tokens=40), budget=ValueBudget(flat_profile([0.01] * 64))
    )
    assert max(len(calls) for calls in reads_per_step(decoder)) <= 2


def test_the_counter_sees_a_read():
    """The negative control: the mode counts what the engine used to do per step (`int(t)`, `tolist`)."""
    with HostReads() as counter:
        t = torch.arange(4)
        int(t[0]), t.tolist(), bool(t[1] > 0), t.numpy(), t.cpu()
    assert counter.calls == ["__int__", "tolist", "__bool__", "numpy", "cpu"]


def test_choices_put_the_argmax_first_on_exact_ties():
    """Greedy acceptance, the records and the recycled guesses take one token: the first of equal
    maxima, whatever order topk gives the ties (on this CPU topk(8) puts 7 before 3 in row 0)."""
    logits = torch.zeros(4, 50)
    logits[0, [7, 3, 30]] = 2.0  # a three-way tie
    logits[1, :] = 1.0  # every token tied
    logits[2, [40, 2]] = 5.0
    logits[3, 9] = 1.0  # no tie
    for k in (1, 2, 4, 8):
        indices, probs, tied = model_choices(logits, k)
        assert tied.tolist() == [True, True, True, False]
        settled = settle_ties(logits, indices)
        assert settled[:, 0].tolist() == logits.argmax(dim=-1).tolist() == [3, 0, 2, 9]
        assert all(len(set(row)) == len(row) for row in settled.tolist())  # nothing repeated
        assert torch.all(probs[:, :-1] >= probs[:, 1:])  # still best first
        assert torch.allclose(probs, torch.softmax(logits, dim=-1).gather(1, settled))


@pytest.mark.parametrize("k", [1, 2, 8])
def test_the_blocked_top_tokens_are_topk(k):
    """`top_tokens` looks only inside the k blocks with the largest maxima: the same values and
    tokens as `topk` over the whole row, wherever the best tokens lie (spread over many blocks, all
    in one block, or in the last), on a vocabulary large enough for the blocked search."""
    gen = torch.Generator().manual_seed(k)
    v = TOP_BLOCK * 100
    logits = torch.randn(6, v, generator=gen)
    logits[1, :k] += 10.0  # all in the first block
    logits[2, v - k :] += 10.0  # all in the last
    logits[3, torch.randperm(v, generator=gen)[:k]] += 10.0  # spread out
    logits[4, ::TOP_BLOCK] += 10.0  # every block holds one of the many good ones
    logits[5] = logits[5].round()  # many exact ties among the best
    values, indices = top_tokens(logits, k)
    want_values, want_indices = logits.topk(k, dim=-1)
    assert torch.equal(values, want_values)
    assert torch.equal(logits.gather(1, indices), values)  # the tokens hold those values
    assert torch.equal(indices[:5], want_indices[:5])  # no ties there: the same tokens
    assert all(len(set(row)) == k for row in indices.tolist())


def test_the_softmax_buffer_gives_the_same_choices_and_is_kept():
    logits = torch.randn(5, TOP_BLOCK * 40, generator=torch.Generator().manual_seed(0))
    buffer = SoftmaxBuffer()
    first = buffer.like(logits)
    got = model_choices(logits, 4, first)
    want = model_choices(logits, 4)
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
    assert buffer.like(logits[:3]).data_ptr() == first.data_ptr()  # a smaller tree reuses it
    assert buffer.like(torch.zeros(9, logits.shape[1])).shape == (9, logits.shape[1])  # a larger one grows it


def test_step_times_name_every_phase():
    m = model("llama")
    tiers = [ContextTier(), RecycledTier()]
    gen = run(m, PROMPT, Drafter(tiers), DecodeSettings(max_new_tokens=12), budget=ValueBudget(flat_profile()))
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
    gen = run(m, PROMPT, Drafter([ContextTier(), recycled]), DecodeSettings(max_new_tokens=12), budget=FixedBudget(8))
    assert gen.tokens == [0] * 12
    for step in gen.steps:
        assert [step.choices[n] for n in step.accepted_nodes] == list(step.tokens)
    assert recycled.table.guesses(0)[1][0][0] == 0


class CountingTable(Successors):
    """The generation's table, counting the passes it takes (the loop's, made by the test's hook)."""

    made: list[CountingTable] = []

    def __init__(self, width: int = 8) -> None:
        super().__init__(width)
        self.passes = 0
        CountingTable.made.append(self)

    def observe(self, guesses):
        self.passes += 1
        super().observe(guesses)


def test_the_loop_keeps_one_table_of_the_models_guesses_for_the_recycled_tier_and_the_value_tree(monkeypatch):
    """One table per generation, filled once per pass, handed to every reader: no reader keeps a
    second one, and no pass is counted twice."""
    import hdlib.decoding

    monkeypatch.setattr(hdlib.decoding, "Successors", CountingTable)
    CountingTable.made.clear()
    m = model("llama")
    tier, policy = RecycledTier(), ValueBudget(flat_profile())
    gen = run(m, PROMPT, Drafter([ContextTier(), tier]), DecodeSettings(max_new_tokens=16), budget=policy)
    [table] = CountingTable.made
    assert tier.table is table and policy.guesses is table and len(table.table) > 0
    assert table.passes == len(gen.steps)
    again = run(m, PROMPT, Drafter([ContextTier(), tier]), DecodeSettings(max_new_tokens=16), budget=policy)
    assert len(CountingTable.made) == 2 and tier.table is CountingTable.made[1]  # a new one per generation
    assert again.tokens == gen.tokens
