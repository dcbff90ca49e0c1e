"""hdlib's own KV cache (`TreeCache`) against transformers' `DynamicCache`: the same logits, bit for
bit, on the tiny Llama and Gemma 3 (prompts longer than its sliding window) and on the packaged
model; compaction of non-contiguous accepted paths, and growth, checked on their own.
"""

from __future__ import annotations

import functools
import random

import pytest
import torch
from support.oracle import OracleTier
from support.tiny import VOCAB, tiny_gemma3, tiny_llama

from hdlib import decoding
from hdlib.engine import cache as cache_module
from hdlib.engine import loop
from hdlib.engine.budget import FixedBudget
from hdlib.engine.cache import BLOCK, LayerStack, TreeCache, TreeLayer, grown_capacity
from hdlib.engine.drafter import Drafter
from hdlib.engine.loop import DecodeSettings, run
from hdlib.engine.tree import DraftTree, tree_buffers
from hdlib.engine.verifier import AttentionLayout, Verifier, compact_cache, layer_count, new_cache, prefill, tree_logits
from hdlib.errors import HDError
from hdlib.tiers import ContextTier, Tier

MODELS = {"llama": tiny_llama, "gemma3": tiny_gemma3}  # Gemma 3's window: 6 tokens


@functools.cache
def model(name: str):
    return MODELS[name]()


def slots(past: int, n: int) -> torch.Tensor:
    """(1, 2, past + n, 3) keys whose every entry is its slot number: where a slot went is readable."""
    return torch.arange(past + n, dtype=torch.float32).view(1, 1, -1, 1).expand(1, 2, -1, 3).contiguous()


def filled(past: int, n: int, max_len: int | None = None) -> TreeCache:
    cache = TreeCache(max_len)
    cache.update(slots(past, 0)[:, :, :past], -slots(past, 0)[:, :, :past], 0)
    cache.update(slots(past, n)[:, :, past:], -slots(past, n)[:, :, past:], 0)
    return cache


@pytest.mark.parametrize(
    "keep", [[0], [0, 1, 2], [0, 2], [0, 1, 4, 6], [0, 3, 5, 9], [0, 9]], ids=lambda k: "-".join(map(str, k))
)
def test_compaction_moves_the_kept_nodes_down_in_order(keep):
    past, n = 5, 10
    cache = filled(past, n)
    cache.compact(past, keep)
    layer = cache.layers[0]
    want = list(range(past)) + [past + k for k in keep]
    assert cache.get_seq_length() == layer.length == past + len(keep)
    assert layer.keys[0, 1, :, 2].tolist() == want
    assert layer.values[0, 0, :, 0].tolist() == [-w for w in want]
    # The same as DynamicCache's compaction.
    reference = new_cache("dynamic")
    reference.update(slots(past, n), -slots(past, n), 0)
    compact_cache(reference, past, keep)
    assert torch.equal(reference.layers[0].keys, layer.keys)
    assert torch.equal(reference.layers[0].values, layer.values)
    # The next pass writes right after the kept path.
    keys, _ = cache.update(torch.full((1, 2, 2, 3), 99.0), torch.full((1, 2, 2, 3), 99.0), 0)
    assert keys[0, 0, :, 0].tolist() == want + [99.0, 99.0]


def test_compaction_uses_one_index_for_every_layer(monkeypatch):
    cache = TreeCache()
    for layer in range(4):
        cache.update(slots(3, 6), slots(3, 6), layer)
    moves = []
    original = TreeLayer.move
    monkeypatch.setattr(
        TreeLayer, "move", lambda self, index, start: moves.append(index) or original(self, index, start)
    )
    cache.compact(3, [0, 1, 4])
    assert len(moves) == 4 and all(m is moves[0] for m in moves)  # made once, moved to the device once
    assert moves[0].tolist() == [3 + 4]  # the prefix already in place is not copied
    moves.clear()
    cache.compact(3, [0, 1])  # a chain along the first branch: nothing to move
    assert moves == [] and cache.get_seq_length() == 5


def test_a_stack_compacts_its_layers_in_one_move_and_a_layer_of_another_shape_on_its_own(monkeypatch):
    stacked, plain = TreeCache(layers=4), TreeCache()
    for cache in (stacked, plain):
        for layer in range(4):
            shape = slots(3, 6) if layer != 2 else slots(3, 6)[..., :1].expand(1, 2, 9, 5).contiguous()  # layer 2: D 5
            cache.update(shape * (layer + 1), -shape * (layer + 1), layer)
    assert sorted(stacked.stack.members) == [0, 1, 3] and stacked.layers[2].stack is None
    moves = {"stack": 0, "layer": 0}
    original_stack, original_layer = LayerStack.move, TreeLayer.move
    monkeypatch.setattr(
        LayerStack, "move", lambda *a: moves.__setitem__("stack", moves["stack"] + 1) or original_stack(*a)
    )
    monkeypatch.setattr(
        TreeLayer, "move", lambda *a: moves.__setitem__("layer", moves["layer"] + 1) or original_layer(*a)
    )
    stacked.compact(3, [0, 2, 5])
    assert moves == {"stack": 1, "layer": 1}  # the stack at once, layer 2 on its own
    plain.compact(3, [0, 2, 5])
    for a, b in zip(stacked.layers, plain.layers, strict=True):
        assert torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values)
    # Growing the stack keeps every layer's entries (the next pass needs more than its capacity).
    more = stacked.layers[0].capacity
    for cache in (stacked, plain):
        for layer in range(4):
            shape = torch.ones(1, 2, more, 3 if layer != 2 else 5)
            cache.update(shape * layer, -shape * layer, layer)
    assert stacked.stack.buffer.shape[4] == stacked.layers[0].capacity > more
    for a, b in zip(stacked.layers, plain.layers, strict=True):
        assert torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values)


def test_compaction_refuses_nodes_the_pass_did_not_hold():
    cache = filled(4, 3)
    with pytest.raises(ValueError, match="cannot keep"):
        cache.compact(4, [0, 3])
    with pytest.raises(ValueError, match="cannot keep"):
        cache.compact(5, [0, 1, 2])


def test_capacity_doubles_and_stops_near_the_context_length():
    assert grown_capacity(1) == BLOCK
    assert grown_capacity(BLOCK) == 2 * BLOCK
    assert grown_capacity(1000) == 2048
    assert grown_capacity(1000, max_len=1024) == 1024 + BLOCK
    assert grown_capacity(5000, max_len=1024) == 5120  # past the context (a tree's slots): what is needed


def test_growth_keeps_every_entry(monkeypatch):
    monkeypatch.setattr(cache_module, "BLOCK", 4)
    cache = TreeCache(max_len=40)
    written = torch.randn(1, 2, 0, 3)
    capacities = []
    for n in [3, 1, 5, 2, 9, 1, 14, 6]:
        new = torch.randn(1, 2, n, 3)
        keys, values = cache.update(new, 2 * new, 0)
        written = torch.cat([written, new], dim=2)
        assert torch.equal(keys, written) and torch.equal(values, 2 * written)
        capacities.append(cache.layers[0].capacity)
    # Filled 3, 4, 9, 11, 20, 21, 35, 41: twice what was needed, then no more than the context + a block.
    assert capacities == [8, 8, 20, 20, 20, 44, 44, 44]
    cache.compact(35, [0, 2, 5])
    assert torch.equal(cache.layers[0].keys, torch.cat([written[:, :, :35], written[:, :, [35, 37, 40]]], dim=2))


def test_the_cache_is_chosen_by_name():
    m = model("llama")
    assert isinstance(Verifier(m).cache, TreeCache)
    assert type(Verifier(m, cache="dynamic").cache).__name__ == "DynamicCache"
    assert Verifier(m).cache.max_len == m.config.max_position_embeddings
    with pytest.raises(HDError, match="unknown cache"):
        Verifier(m, cache="static")  # type: ignore[arg-type]


def random_tree(rng: random.Random, root: int) -> DraftTree:
    tree = DraftTree(root=root)
    for _ in range(rng.randrange(1, 6)):  # small tokens: drafts share prefixes
        tree.add([rng.randrange(3, 8) for _ in range(rng.randrange(1, 6))], Tier.CONTEXT, 100, 100)
    return tree


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("block", [4, BLOCK])
@pytest.mark.parametrize("stacked", [True, False], ids=["stacked", "per-layer"])
def test_tree_passes_give_bit_identical_logits_with_either_cache(name, block, stacked, monkeypatch):
    """Passes over random trees after a prompt longer than Gemma 3's window; each step keeps a random
    root path (most of them not contiguous); block 4 makes the own cache grow every few steps. The
    own cache keeps its layers in one stack (as `Verifier` makes it) or each on its own."""
    monkeypatch.setattr(cache_module, "BLOCK", block)
    m = model(name)
    layout = AttentionLayout.of(m)
    rng = random.Random(3)
    context = [rng.randrange(3, VOCAB) for _ in range(23)]
    caches = {kind: new_cache(kind, 64, layer_count(m) if stacked else None) for kind in ("own", "dynamic")}
    assert (caches["own"].stack is not None) == stacked
    with torch.inference_mode():
        for cache in caches.values():
            prefill(m, context[:-1], cache)
        moved = 0
        for _ in range(12):
            tree = random_tree(rng, context[-1])
            past = len(context) - 1
            buffers = tree_buffers(tree, past, "cpu")
            logits = {kind: tree_logits(m, layout, buffers, cache, past) for kind, cache in caches.items()}
            assert torch.equal(logits["own"], logits["dynamic"])
            keep = tree.path_to(rng.randrange(len(tree)))
            moved += keep != list(range(len(keep)))
            for cache in caches.values():
                compact_cache(cache, past, keep)
            context += [tree.tokens[n] for n in keep[1:]] + [rng.randrange(3, VOCAB)]
            for own, dyn in zip(caches["own"].layers, caches["dynamic"].layers):
                assert torch.equal(own.keys, dyn.keys) and torch.equal(own.values, dyn.values)
    assert moved >= 4 and len(context) > 40
    if block == 4:
        assert caches["own"].layers[0].capacity > 32  # it grew
    if stacked:
        assert len(caches["own"].stack.members) == len(caches["own"].layers)


def decode_with(kind: str, monkeypatch, *args, **kwargs):
    monkeypatch.setattr(loop, "Verifier", functools.partial(Verifier, cache=kind))
    return run(*args, **kwargs)


def same_records(a, b) -> bool:
    """Tokens, trees, accepted paths and the model's choices with their probabilities (bits of the logits)."""
    return a.tokens == b.tokens and all(
        (x.tree.tokens, x.accepted_nodes, x.choices, x.choice_probs)
        == (y.tree.tokens, y.accepted_nodes, y.choices, y.choice_probs)
        for x, y in zip(a.steps, b.steps, strict=True)
    )


class DecoyFirst(OracleTier):
    """Every other step a wrong token first, then the true continuation: paths off the first branch."""

    def propose(self, context, budget):
        true = tuple(self.truth[len(context) : len(context) + 3])
        if not true or self.rng.random() < 0.5:
            return []
        wrong = 3 + (true[0] - 3 + 1) % (VOCAB - 3)  # another token than the true one
        return [(wrong,), true]  # the drafter cuts what passes the budget


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("block", [4, BLOCK])
def test_greedy_hd_is_the_same_with_either_cache(name, seed, block, monkeypatch):
    """Three tiers (a decoy, the context tier and an oracle that lies on purpose) over prompts longer
    than Gemma 3's window: accepted and rejected branches, paths off the first branch."""
    monkeypatch.setattr(cache_module, "BLOCK", block)
    rng = random.Random(seed)
    unit = [rng.randrange(3, VOCAB) for _ in range(rng.randrange(3, 8))]
    prompt = tuple(unit * 3 + [rng.randrange(3, VOCAB) for _ in range(rng.randrange(2, 12))])
    settings = DecodeSettings(max_new_tokens=40)
    plain = decode_with("dynamic", monkeypatch, model(name), prompt, None, settings)
    truth = list(prompt) + plain.tokens
    got = {
        kind: decode_with(
            kind,
            monkeypatch,
            model(name),
            prompt,
            Drafter([DecoyFirst(truth, VOCAB, seed, Tier.STATISTICS), ContextTier(), OracleTier(truth, VOCAB, seed)]),
            settings,
            (),
            FixedBudget(12),
        )
        for kind in ("own", "dynamic")
    }
    assert same_records(got["own"], got["dynamic"])
    assert got["own"].tokens == plain.tokens
    paths = [s.accepted_nodes for s in got["own"].steps]
    assert any(list(p) != list(range(len(p))) for p in paths)  # compaction moved entries
    assert got["own"].mat > 1.0 and len(prompt) > 6


@pytest.mark.slow
def test_the_packaged_model_decodes_the_same_with_either_cache(monkeypatch):
    """The default tiers at budgets 16 and 64, and the context tier on a prompt of its own source."""
    import json
    from pathlib import Path

    from hdlib.models.loading import load_model

    lm = load_model()
    root = Path(__file__).resolve().parents[1]
    question = json.loads((root / "data/prompts/prompts.jsonl").read_text().splitlines()[1])["turns"][0]
    long = "Explain what this Python code does:\n\n" + (root / "hdlib/engine/cache.py").read_text()
    for prompt, tiers, budget in [(question, None, 16), (question, None, 64), (long, "context", 16)]:
        got = {}
        for kind in ("own", "dynamic"):
            monkeypatch.setattr(loop, "Verifier", functools.partial(Verifier, cache=kind))
            kwargs = {} if tiers is None else {"tiers": tiers}
            got[kind] = decoding.generate(lm, prompt, max_new_tokens=64, budget=budget, **kwargs)
        assert same_records(got["own"], got["dynamic"]), (tiers, budget)
        assert any(list(s.accepted_nodes) != list(range(len(s.accepted_nodes))) for s in got["own"].steps) or (
            tiers == "context"
        )
