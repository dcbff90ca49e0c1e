"""hdlib's own KV cache: preallocated per layer, written in place, compacted in place.

transformers' `DynamicCache` concatenates every layer's keys and values with the new tokens' on
every pass, so each step copies the whole cache once per layer (on a 7B model at 4k tokens about
2 GB a step), and the tree's rejected branches are then sliced away. `TreeCache` keeps, per layer,
one key and one value buffer (B, H, capacity, D):

- a pass over n tokens writes their keys and values in place at slots [length, length + n) and
  hands the attention views of [:length + n] (no copy of the past);
- `compact` keeps the accepted tree nodes: one index tensor for the step, built on the host and
  moved to the device once (not once per layer), gathers them and copies them down in place; the
  prefix of the path already in place (the common case: a chain along the first branch) is not
  touched; then the length is set. Nothing is concatenated. The layers of one shape (all of them,
  in the models hdlib knows) keep their buffers in one `LayerStack`, so the gather and the copy are
  one operation each for the whole model, not two per layer.

Capacity. A buffer too small for a pass is replaced by one with room for twice what is needed
(rounded up to `BLOCK` slots) and the filled part is copied over, so a generation copies each
token O(1) times in all, and `TreeCache` needs to know neither the prompt nor `max_new_tokens`.
Growth stops doubling at the model's context length plus one `BLOCK` (the text never passes the
context; the tree's slots may, by at most the tree's size), so a 4k-context model does not hold
8k slots. While a buffer (or the stack) grows the old and the new one are both alive for a moment.

Layers are full-length everywhere, sliding-window layers included (`is_sliding` is False): the
verifier applies the window through its own masks (see hdlib.engine.verifier's docstring), and during the
prefill transformers builds the sliding mask from the full cache's sizes, as it does for a plain
`DynamicCache()`. A cache that evicted keys would lose them before the engine knows which branch
wins.

The layer and cache classes implement what transformers' models and masking utilities call:
`update`, `get_seq_length`, `get_mask_sizes`, `is_sliding` (and `crop`, `reset`); `keys` and
`values` are the filled views, as a `DynamicLayer`'s tensors are.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

BLOCK = 256  # capacities are multiples of this many slots


def grown_capacity(needed: int, max_len: int | None = None) -> int:
    """Slots for a buffer that must hold `needed`: twice that, but not much past the model's context."""
    room = 2 * needed if max_len is None else min(2 * needed, max_len + BLOCK)
    return -(-max(room, needed) // BLOCK) * BLOCK


class TreeLayer(CacheLayerMixin):
    """One layer's keys and values in preallocated buffers (B, H, capacity, D); `length` slots filled."""

    is_sliding = False  # full length even in a sliding-window layer: the masks apply the window
    is_compileable = False
    is_croppable = True

    def __init__(self, max_len: int | None = None) -> None:
        # CacheLayerMixin.__init__ is not called: it assigns `keys` and `values`, which here are the
        # filled views of the buffers.
        self.max_len = max_len
        self.key_buffer: torch.Tensor | None = None
        self.value_buffer: torch.Tensor | None = None
        self.stack: LayerStack | None = None  # the stack holding this layer's buffers, if one does
        self.length = 0
        self.is_initialized = False

    @property
    def keys(self) -> torch.Tensor | None:
        return None if self.key_buffer is None else self.key_buffer[:, :, : self.length]

    @property
    def values(self) -> torch.Tensor | None:
        return None if self.value_buffer is None else self.value_buffer[:, :, : self.length]

    @property
    def capacity(self) -> int:
        return 0 if self.key_buffer is None else self.key_buffer.shape[2]

    @property
    def device(self) -> torch.device | None:
        return None if self.key_buffer is None else self.key_buffer.device

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor | None = None) -> None:
        self.is_initialized = True  # the buffers are made by `_reserve`, sized for the first pass

    def _reserve(self, needed: int, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        """Make room for `needed` slots, keeping the filled ones."""
        capacity = grown_capacity(needed, self.max_len)
        b, h, _, dk = key_states.shape
        # Plain tensors even when the pass runs in inference mode: inference tensors may not be
        # changed in place outside it, and a caller may compact (or prefill) outside it.
        with torch.inference_mode(False):
            keys = key_states.new_empty((b, h, capacity, dk))
            values = value_states.new_empty((b, h, capacity, value_states.shape[-1]))
        if self.length:
            keys[:, :, : self.length].copy_(self.key_buffer[:, :, : self.length])
            values[:, :, : self.length].copy_(self.value_buffer[:, :, : self.length])
        self.key_buffer, self.value_buffer = keys, values

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: object, **kwargs: object
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Write (B, H, n, D) new keys and values at [length, length + n); return the views of [:length + n]."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        end = self.length + key_states.shape[2]
        if end > self.capacity:
            if self.stack is not None:
                self.stack.grow(end)
            else:
                self._reserve(end, key_states, value_states)
        self.key_buffer[:, :, self.length : end].copy_(key_states)
        self.value_buffer[:, :, self.length : end].copy_(value_states)
        self.length = end
        return self.key_buffer[:, :, :end], self.value_buffer[:, :, :end]

    def move(self, source: torch.Tensor, start: int) -> None:
        """Copy the slots `source` (a 1-D index on this layer's device) to [start, start + len(source)).
        The gather is a copy, so sources and destinations may overlap."""
        end = start + source.shape[0]
        self.key_buffer[:, :, start:end].copy_(self.key_buffer.index_select(2, source))
        self.value_buffer[:, :, start:end].copy_(self.value_buffer.index_select(2, source))

    def get_seq_length(self) -> int:
        return self.length

    def get_mask_sizes(self, query: int | torch.Tensor) -> tuple[int, int]:
        """(kv_length, kv_offset) of the next pass: the whole cache and the new tokens, from slot 0.
        transformers passes the query length (older releases: the new tokens' cache positions)."""
        n = query if isinstance(query, int) else int(query.shape[0])
        return self.length + n, 0

    def get_max_length(self) -> int:
        return -1  # grows as needed

    get_max_cache_shape = get_max_length  # the name in older transformers releases

    def crop(self, tokens_to_remove: int) -> None:
        """Drop the last `-tokens_to_remove` tokens (transformers' convention: a negative count)."""
        if tokens_to_remove > 0:
            raise ValueError(f"crop takes a negative count of tokens to remove, got {tokens_to_remove}")
        self.length = max(self.length + tokens_to_remove, 0)

    def reset(self) -> None:
        self.length = 0  # the buffers are kept for the next generation's tokens


class LayerStack:
    """The buffers of layers of one shape in one tensor (L, 2, B, H, capacity, D), layer i's keys at
    [i, 0] and values at [i, 1], so compaction moves the slots of all of them in one gather and one
    copy (two per layer otherwise: a hundred small operations a step on a 30-layer model, and as
    many kernel launches on a GPU). It grows as a layer's buffers do, all layers at once;
    while it grows the old and the new stack are both alive."""

    def __init__(self, layers: int, max_len: int | None = None) -> None:
        self.layers = layers
        self.max_len = max_len
        self.buffer: torch.Tensor | None = None
        self.members: dict[int, TreeLayer] = {}

    def fits(self, index: int, key_states: torch.Tensor, value_states: torch.Tensor) -> bool:
        """Whether layer `index`'s first keys and values can live in the stack."""
        if not 0 <= index < self.layers or key_states.shape != value_states.shape:
            return False
        if key_states.dtype != value_states.dtype or key_states.device != value_states.device:
            return False
        if self.buffer is None:
            return True
        b, h, _, d = key_states.shape
        _, _, sb, sh, _, sd = self.buffer.shape
        return (
            (sb, sh, sd) == (b, h, d)
            and self.buffer.dtype == key_states.dtype
            and self.buffer.device == key_states.device
        )

    def join(self, index: int, layer: TreeLayer, key_states: torch.Tensor) -> None:
        layer.stack = self
        self.members[index] = layer
        if self.buffer is None:
            b, h, _, d = key_states.shape
            with torch.inference_mode(False):  # as in `TreeLayer._reserve`
                self.buffer = key_states.new_empty((self.layers, 2, b, h, 0, d))
        self._point(layer, index)

    def grow(self, needed: int) -> None:
        """Room for `needed` slots in every layer, keeping the filled ones."""
        old = self.buffer
        assert old is not None
        capacity = grown_capacity(needed, self.max_len)
        with torch.inference_mode(False):
            new = old.new_empty((*old.shape[:4], capacity, old.shape[5]))
        filled = max(layer.length for layer in self.members.values())
        if filled:
            new[:, :, :, :, :filled].copy_(old[:, :, :, :, :filled])
        self.buffer = new
        for index, layer in self.members.items():
            self._point(layer, index)

    def _point(self, layer: TreeLayer, index: int) -> None:
        assert self.buffer is not None
        layer.key_buffer, layer.value_buffer = self.buffer[index, 0], self.buffer[index, 1]

    def move(self, source: torch.Tensor, start: int) -> None:
        """`TreeLayer.move` for every layer of the stack at once."""
        assert self.buffer is not None
        end = start + source.shape[0]
        self.buffer[:, :, :, :, start:end].copy_(self.buffer.index_select(4, source))


class TreeCache(Cache):
    """A KV cache of `TreeLayer`s, made lazily on the first pass (one per attention layer); it grows
    by doubling, up to about `max_len` (the model's context length) when given, and is compacted in
    place (`compact`). With `layers` (the model's layer count), the layers whose keys and values
    share a shape keep them in one `LayerStack`."""

    def __init__(self, max_len: int | None = None, layers: int | None = None) -> None:
        super().__init__(layers=[])
        self.max_len = max_len
        self.stack = LayerStack(layers, max_len) if layers else None

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args: object, **kwargs: object
    ) -> tuple[torch.Tensor, torch.Tensor]:
        while len(self.layers) <= layer_idx:
            self.layers.append(TreeLayer(self.max_len))
        layer = self.layers[layer_idx]
        if not layer.is_initialized and self.stack is not None and self.stack.fits(layer_idx, key_states, value_states):
            self.stack.join(layer_idx, layer, key_states)
        return layer.update(key_states, value_states)

    def compact(self, past_len: int, keep: Sequence[int]) -> None:
        """Keep, after the first `past_len` entries, only the tree nodes `keep` (node indices, root
        first), in that order; every layer's length becomes `past_len + len(keep)`."""
        end = past_len + len(keep)
        length = self.get_seq_length()
        if end > length or any(not 0 <= k < length - past_len for k in keep):
            raise ValueError(f"cannot keep nodes {list(keep)} of a {length - past_len}-node pass after {past_len}")
        moved = next((i for i, k in enumerate(keep) if k != i), len(keep))  # the prefix in place stays
        if moved < len(keep):
            source = torch.tensor(keep[moved:], dtype=torch.long) + past_len  # host side, once
            on_device: dict[torch.device, torch.Tensor] = {}

            def index_on(device: torch.device) -> torch.Tensor:  # one transfer per device
                if device not in on_device:
                    on_device[device] = source.to(device)
                return on_device[device]

            if self.stack is not None and self.stack.members:
                self.stack.move(index_on(self.stack.buffer.device), past_len + moved)  # type: ignore[union-attr]
            for layer in self.layers:
                if layer.device is not None and layer.stack is None:
                    layer.move(index_on(layer.device), past_len + moved)
        for layer in self.layers:
            layer.length = end
