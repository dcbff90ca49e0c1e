"""Verification: one forward pass of the target model over the draft tree, then acceptance.

The KV cache holds every committed token but the newest (the tree's root). The tree's nodes are
appended to it in one pass, each attending to the whole cache and to its own ancestors, at the
position it would have in the text. Afterwards the cache is compacted so it holds exactly the
accepted path: the entries of rejected branches are dropped, the accepted ones moved down.

Masks. Llama-style models take one 4D float mask. Models that mix sliding-window and full attention
layers (Gemma 3) take a dict of masks per attention type; the sliding one also hides keys that fall
outside the window as seen from each node's own position. The cache must then have full-length
layers everywhere (hdlib's `TreeCache`, or a plain `DynamicCache()`): a sliding cache would evict
keys before the engine knows which branch wins.

The cache. `Verifier(model, cache="own")`, the default, keeps the keys and values in hdlib's
`TreeCache` (hdlib.engine.cache): preallocated per layer, a pass written in place, compaction in place;
`cache="dynamic"` uses transformers' `DynamicCache`, which concatenates every layer on every pass.
Both give the same logits, bit for bit (tests/test_cache.py); benchmarks/cache_speed.py compares
their speed.

Backends. The tree mask is honoured by the attention implementations that add a given mask to the
scores (`sdpa`, `eager`); flash-attention kernels take a padding mask instead and would let every node
see its siblings, so they are refused (`check_model`).

transformers versions. The cache argument of a model's forward was `past_key_values` up to 5.23 and
is `cache` from 5.24 on (the old name deprecated); a model given a keyword it does not know ignores it
and runs without the cache. So the keyword is read from the model's own signature (`cache_keyword`),
and every pass checks that the cache grew by exactly the tokens it was given.

`Verifier` holds one generation's model side (its cache, mask layout and acceptance rule) and is
the one place that waits for the device: the decoding loop and the forward-time measurement
(`hdlib.engine.forward_time`) both time passes through it.
"""

from __future__ import annotations

import functools
import inspect
import time
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from transformers import DynamicCache, PreTrainedModel
from transformers.cache_utils import Cache

from hdlib.engine.cache import TreeCache
from hdlib.engine.choices import SoftmaxBuffer, model_choices, settle_ties
from hdlib.engine.sampling import Sampler
from hdlib.engine.tree import DraftTree, TreeBuffers, tree_buffers
from hdlib.errors import HDError
from hdlib.models.loading import context_length
from hdlib.tiers.rider import RiderRows


@dataclass(frozen=True)
class AttentionLayout:
    """How a model wants its masks: one tensor, or one per layer type with a sliding window."""

    layer_types: frozenset[str]
    sliding_window: int | None

    @classmethod
    def of(cls, model: PreTrainedModel) -> AttentionLayout:
        check_model(model)  # every pass that builds tree masks needs a backend that honours them
        config = model.config
        types = frozenset(getattr(config, "layer_types", None) or ["full_attention"])
        window = getattr(config, "sliding_window", None)
        unsupported = types - {"full_attention", "sliding_attention"}
        if unsupported:
            raise HDError(f"{type(model).__name__}: attention types {sorted(unsupported)} are not supported")
        if "sliding_attention" not in types and window is not None:
            # Mistral-style sliding window on every layer: not handled by the dict-of-masks route.
            raise HDError(f"{type(model).__name__}: a sliding window without per-layer types is not supported")
        return cls(types, window if "sliding_attention" in types else None)


TREE_MASK_BACKENDS = ("sdpa", "eager")  # attention implementations that honour a 4D additive mask


def check_model(model: PreTrainedModel) -> None:
    """Refuse a model whose attention backend would not honour the tree mask."""
    backend = getattr(model.config, "_attn_implementation", None) or "eager"
    if not isinstance(backend, str) or backend not in TREE_MASK_BACKENDS:
        raise HDError(
            f"{type(model).__name__} runs attention with {backend!r}, which does not honour the tree mask: "
            f"load it with attn_implementation='sdpa' (as hdlib.load_model does) or call "
            f"model.set_attn_implementation('sdpa'); verified backends: {', '.join(TREE_MASK_BACKENDS)}"
        )


def vocabulary_size(model: PreTrainedModel) -> int:
    """Token ids the model can both read and predict: the smaller of its embedding rows and its logits."""
    rows = int(model.get_input_embeddings().num_embeddings)
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    logits = getattr(config, "vocab_size", None)
    return min(rows, int(logits)) if logits else rows


def layer_count(model: PreTrainedModel) -> int | None:
    """The model's decoder layers, when its config says."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    n = getattr(config, "num_hidden_layers", None)
    return int(n) if n else None


def cache_keyword(model: PreTrainedModel) -> str:
    """The name under which this model's forward takes the KV cache (`cache` from transformers 5.24 on)."""
    return _cache_keyword(type(model))


@functools.cache
def _cache_keyword(model_class: type) -> str:
    parameters = inspect.signature(model_class.forward).parameters
    return "cache" if "cache" in parameters else "past_key_values"


def _forward(model: PreTrainedModel, cache: Cache, past_len: int, n: int, **inputs: object) -> object:
    """One forward pass over `n` new tokens that must extend the cache from `past_len` to `past_len + n`."""
    out = model(**inputs, **{cache_keyword(model): cache}, use_cache=True)
    got = cache.get_seq_length()
    if got != past_len + n:
        raise HDError(
            f"{type(model).__name__}: the KV cache holds {got} tokens after a pass over {n} new ones, "
            f"expected {past_len + n}: this transformers release does not take the cache as hdlib passes it"
        )
    return out


def tree_attention_mask(
    buffers: TreeBuffers,
    past_len: int,
    dtype: torch.dtype,
    sliding_window: int | None = None,
) -> torch.Tensor:
    """(1, 1, N, past_len + N) additive mask: 0 where a node may look, the dtype's minimum elsewhere."""
    n = buffers.input_ids.shape[0]
    device = buffers.input_ids.device
    mask = torch.zeros(n, past_len + n, dtype=dtype, device=device)
    if sliding_window is None:  # every cached token is visible: only the tree's block is masked
        mask[:, past_len:].masked_fill_(~buffers.ancestors, torch.finfo(dtype).min)
        return mask[None, None]
    visible = torch.ones(n, past_len + n, dtype=torch.bool, device=device)
    visible[:, past_len:] = buffers.ancestors
    key_pos = torch.cat([torch.arange(past_len, device=device), buffers.position_ids])
    visible &= buffers.position_ids[:, None] - key_pos[None, :] < sliding_window
    mask.masked_fill_(~visible, torch.finfo(dtype).min)
    return mask[None, None]


def model_masks(
    layout: AttentionLayout, buffers: TreeBuffers, past_len: int, dtype: torch.dtype
) -> torch.Tensor | dict[str, torch.Tensor]:
    if layout.sliding_window is None:
        return tree_attention_mask(buffers, past_len, dtype)
    return {
        "full_attention": tree_attention_mask(buffers, past_len, dtype),
        "sliding_attention": tree_attention_mask(buffers, past_len, dtype, layout.sliding_window),
    }


CacheKind = Literal["own", "dynamic"]
CACHE_KINDS: tuple[CacheKind, ...] = ("own", "dynamic")
# measured at least as fast as DynamicCache: benchmarks/results/epyc-avx2/cache_speed.json
DEFAULT_CACHE: CacheKind = "own"


def new_cache(kind: CacheKind = DEFAULT_CACHE, max_len: int | None = None, layers: int | None = None) -> Cache:
    """An empty KV cache with full-length layers everywhere (see the module docstring): hdlib's
    `TreeCache` ("own"; `max_len`, the model's context length, bounds its growth; `layers`, the
    model's layer count, lets it stack them), or transformers' `DynamicCache` ("dynamic", built
    without a config on purpose, so no layer slides)."""
    if kind == "own":
        return TreeCache(max_len, layers)
    if kind == "dynamic":
        return DynamicCache()
    raise HDError(f"unknown cache {kind!r}; choose one of {', '.join(CACHE_KINDS)}")


def prefill(model: PreTrainedModel, tokens: list[int], cache: Cache) -> None:
    """Put `tokens` into the (empty) cache with the model's own causal masks; no logits are needed."""
    if tokens:
        ids = torch.tensor([tokens], dtype=torch.long, device=model.device)
        _forward(model, cache, 0, len(tokens), input_ids=ids, logits_to_keep=1)


def tree_logits(
    model: PreTrainedModel,
    layout: AttentionLayout,
    buffers: TreeBuffers,
    cache: Cache,
    past_len: int,
) -> torch.Tensor:
    """(N, V) logits of every tree node: what the model predicts after that node."""
    masks = model_masks(layout, buffers, past_len, model.dtype)
    n = buffers.input_ids.shape[0]
    inputs = {"input_ids": buffers.input_ids[None], "position_ids": buffers.position_ids[None], "attention_mask": masks}
    return _forward(model, cache, past_len, n, **inputs).logits[0]


@torch.inference_mode()
def compact_cache(cache: Cache, past_len: int, keep: list[int]) -> None:
    """Keep, after the first `past_len` entries, only the tree nodes `keep` (ascending), in order.
    The index of the kept slots is made once on the host and moved once to each device."""
    if isinstance(cache, TreeCache):
        cache.compact(past_len, keep)
        return
    contiguous = keep == list(range(len(keep)))
    index = None if contiguous else torch.tensor(keep, dtype=torch.long) + past_len
    on_device: dict[torch.device, torch.Tensor] = {}
    end = past_len + len(keep)
    for layer in cache.layers:
        if layer.keys is None or layer.keys.numel() == 0:
            continue
        if index is not None:
            idx = on_device.get(layer.keys.device)
            if idx is None:
                idx = on_device[layer.keys.device] = index.to(layer.keys.device)
            layer.keys[:, :, past_len:end] = layer.keys.index_select(2, idx)
            layer.values[:, :, past_len:end] = layer.values.index_select(2, idx)
        layer.keys = layer.keys[:, :, :end]
        layer.values = layer.values[:, :, :end]


def synchronize(device: torch.device) -> None:
    """Wait for the device to finish what was queued (CUDA runs asynchronously), so a clock read
    afterwards times the work; nothing to wait for on the CPU."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclass(frozen=True)
class Scored:
    """One forward pass over a draft tree: its tensors, the (N, V) logits, and the seconds it took."""

    buffers: TreeBuffers  # the tree's rows, then a rider's (the Lookahead window's), if one rode in the pass
    logits: torch.Tensor  # the tree's rows only
    tree_s: float  # the tree's tensors, built on the host and copied once
    forward_s: float  # the forward pass (masks included), the device waited for
    rider_next: tuple[int, ...] = ()  # the model's next token after each of the rider's top rows


@dataclass(frozen=True)
class Acceptance:
    """What acceptance decided about one scored tree."""

    path: list[int]  # accepted node indices, root first
    bonus: int  # the model's own token after the last of them
    accept_s: float  # choosing the path, the model's top guesses, reading both from the device
    choices: list[int]  # per node: the model's most likely token after it
    choice_probs: list[float]  # ... and its probability (softmax of the logits)
    # Per node: the probability it had of being accepted once its parent was reached (greedy: 1 or
    # 0; sampling: the rule's); None for a node whose parent was not reached (not tried).
    accept_probs: list[float | None]
    # The model's most likely tokens after each node, with their probabilities; None unless asked for.
    top: tuple[list[list[int]], list[list[float]]] | None = None


class Verifier:
    """The model side of one generation: the KV cache, forward passes over draft trees, acceptance
    (greedy, or `sampler`'s rule), cache compaction. Every timed pass waits for the device.
    `cache`: "own" (hdlib's `TreeCache`) or "dynamic" (transformers' `DynamicCache`)."""

    def __init__(
        self, model: PreTrainedModel, sampler: Sampler | None = None, cache: CacheKind = DEFAULT_CACHE
    ) -> None:
        self.model = model
        self.vocab_size = vocabulary_size(model)
        self.device = model.device
        self.layout = AttentionLayout.of(model)
        self.cache = new_cache(cache, context_length(model), layer_count(model))
        self.sampler = sampler
        self.softmax = SoftmaxBuffer()

    def sync(self) -> None:
        synchronize(self.device)

    @torch.inference_mode()
    def prefill(self, tokens: list[int]) -> None:
        prefill(self.model, tokens, self.cache)

    @torch.inference_mode()
    def logits(self, tree: DraftTree, past_len: int) -> tuple[TreeBuffers, torch.Tensor]:
        """One pass over `tree` after `past_len` cached tokens: its buffers and (N, V) logits. The
        cache then holds the whole tree: `compact` keeps what was accepted."""
        buffers = tree_buffers(tree, past_len, self.device)
        return buffers, tree_logits(self.model, self.layout, buffers, self.cache, past_len)

    @torch.inference_mode()
    def compact(self, past_len: int, keep: list[int]) -> None:
        compact_cache(self.cache, past_len, keep)

    @staticmethod
    def _read_choices(
        logits: torch.Tensor, indices: torch.Tensor, probs: torch.Tensor, tied: torch.Tensor, k: int
    ) -> tuple[list[list[int]], list[list[float]]]:
        """The first `k` choices after every node and their probabilities, in one read from the device:
        [any row tied, the (N, K) token ids, the (N, K) probabilities as float32 bit patterns], as
        int32. A tie at the top somewhere (rare) puts the argmax first (`settle_ties`) and reads again."""
        n, width = indices.shape
        packed = torch.cat(
            [
                tied.any().reshape(1).to(torch.int32),
                indices.reshape(-1).to(torch.int32),
                probs.reshape(-1).view(torch.int32),
            ]
        ).tolist()
        if packed[0]:
            settled = settle_ties(logits, indices)
            packed = [0, *settled.reshape(-1).to(torch.int32).tolist(), *packed[1 + n * width :]]
        ids = packed[1 : 1 + n * width]
        floats = np.array(packed[1 + n * width :], dtype=np.int32).view(np.float32).tolist()
        rows = range(0, n * width, width)
        return [ids[r : r + k] for r in rows], [floats[r : r + k] for r in rows]

    @torch.inference_mode()
    def score(self, tree: DraftTree, past_len: int, rider: RiderRows | None = None) -> Scored:
        """One forward pass over `tree` after `past_len` cached tokens, with a rider's rows (the
        Lookahead window's, `hdlib.tiers.rider`) after the tree's when given (its next tokens read at
        once: the pass is waited for anyway). The cache then holds the whole pass: `compact` keeps
        what `accept` accepted."""
        start = time.perf_counter()
        buffers = tree_buffers(tree, past_len, self.device, rider)
        built = time.perf_counter()
        logits = tree_logits(self.model, self.layout, buffers, self.cache, past_len)
        rider_next: tuple[int, ...] = ()
        n = len(tree)
        if rider is not None:
            top = logits[len(logits) - rider.width :]
            rider_next = tuple(top.argmax(dim=-1).tolist())
            logits = logits[:n]
        self.sync()
        return Scored(buffers, logits, built - start, time.perf_counter() - built, rider_next)

    @torch.inference_mode()
    def accept(self, tree: DraftTree, scored: Scored, past_len: int, guesses: int = 0) -> Acceptance:
        """The accepted path of a scored tree and the bonus token, with the model's most likely token
        after every node for the records (and its `guesses` most likely, when asked for).

        Greedy: the choices after every node and their probabilities come back in one read (token ids
        and float32 bit patterns in one int32 tensor; on a GPU every read waits for the device), and
        the path is walked on the host from them (`DraftTree.accepted_path`). Sampling: the sampler's rule, which
        reads what it needs.
        """
        start = time.perf_counter()
        n, k = len(tree), max(guesses, 1)
        indices, probs, tied = model_choices(scored.logits, k, self.softmax.like(scored.logits))
        trials: dict[int, float] = {}
        if self.sampler is None:
            tops, top_probs = self._read_choices(scored.logits, indices, probs, tied, k)
            path = tree.accepted_path([g[0] for g in tops])
            bonus = tops[path[-1]][0]
        else:
            path, bonus = self.sampler.accept(tree, scored.logits, past_len, trials)
            tops = settle_ties(scored.logits, indices)[:, :k].tolist()
            top_probs = probs[:, :k].tolist()
        choices, choice_probs = [g[0] for g in tops], [p[0] for p in top_probs]
        if self.sampler is None:
            reached = set(path)
            trials = {i: float(tree.tokens[i] == choices[p]) for i, p in enumerate(tree.parents) if p in reached and i}
        accept_probs = [trials.get(i) for i in range(n)]
        accept_probs[0] = 1.0  # the root is the text itself
        top = (tops, top_probs) if guesses else None
        return Acceptance(path, bonus, time.perf_counter() - start, choices, choice_probs, accept_probs, top)
