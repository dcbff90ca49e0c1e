"""Transformers' own decoding, as reference methods for the benchmark: `hf` and `hf-pld`.

`hf` is `model.generate` with greedy search (or plain sampling at temperature > 0); `hf-pld` is the
same call with prompt lookup decoding (`prompt_lookup_num_tokens=10`), which transformers runs as
assisted generation with a `PromptLookupCandidateGenerator` (greedy or sampled alike).

Steps are counted with a forward hook on the model, the public way to observe its calls: every
forward call is one step. Here the prefill is a step, because its logits give the first new token;
hdlib's own loop prefills all prompt tokens but the last without emitting anything and its first
step emits the first token. Both count N steps for N tokens of plain decoding, so MAT is 1.00 for
`hf` as for `ar`, and for `hf-pld` it is the mean tokens emitted per forward call.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from hdlib.engine.loop import check_prompt
from hdlib.engine.trace import cut_at_end
from hdlib.engine.verifier import synchronize
from hdlib.models.loading import LoadedModel

PROMPT_LOOKUP_TOKENS = 10  # Spec-Bench's setting for PLD


@dataclass(frozen=True)
class HFGeneration:
    """What one `model.generate` call produced, in the terms hdlib's records use."""

    tokens: list[int]  # the new tokens, cut after the first end token (kept), as hdlib does
    forward_calls: int  # steps: the prefill included
    wall_s: float  # around `generate`, prefill included
    forward_s: float  # inside the model's forward calls; the rest is transformers' own loop

    @property
    def mat(self) -> float:
        return len(self.tokens) / self.forward_calls if self.forward_calls else 0.0


class _ForwardMeter:
    """Counts and times a model's forward calls through hooks, removed on exit."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model, self.calls, self.seconds, self._start = model, 0, 0.0, 0.0
        self.device = next(model.parameters()).device

    def __enter__(self) -> None:
        self._handles = [
            self.model.register_forward_pre_hook(self._before),
            self.model.register_forward_hook(self._after),
        ]

    def __exit__(self, *exc: object) -> None:
        for handle in self._handles:
            handle.remove()

    def _before(self, module: torch.nn.Module, args: object) -> None:
        synchronize(self.device)
        self._start = time.perf_counter()

    def _after(self, module: torch.nn.Module, args: object, output: object) -> None:
        synchronize(self.device)  # hdlib's loop waits for the device once per step too
        self.seconds += time.perf_counter() - self._start
        self.calls += 1


def hf_generate(
    lm: LoadedModel,
    prompt_ids: Sequence[int],
    max_new_tokens: int,
    temperature: float = 0.0,
    seed: int | None = None,
    prompt_lookup: int | None = None,
) -> HFGeneration:
    """Answer `prompt_ids` with `lm.model.generate`: greedy at temperature 0, else plain sampling
    (no top-k, no top-p, seeded with `torch.manual_seed(seed)`); with `prompt_lookup`, prompt lookup
    decoding drafting that many tokens per step.

    Every sampling setting is passed explicitly, so that a model's own generation config (a
    repetition penalty, a default top-p) cannot make this differ from hdlib's plain decoding.
    """
    check_prompt(prompt_ids, lm.context_length)
    eos = sorted(lm.eos_token_ids)
    pad = lm.tokenizer.pad_token_id if lm.tokenizer.pad_token_id is not None else eos[0]
    input_ids = torch.tensor([list(prompt_ids)], dtype=torch.long, device=lm.device)  # (1, T)
    greedy = {"do_sample": False}
    sampling = {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0}
    options = {
        **(sampling if temperature > 0 else greedy),
        "repetition_penalty": 1.0,
        "max_new_tokens": min(max_new_tokens, lm.context_length - len(prompt_ids)),
        "eos_token_id": eos,
        "pad_token_id": pad,
        **({"prompt_lookup_num_tokens": prompt_lookup} if prompt_lookup else {}),
    }
    if temperature > 0 and seed is not None:
        torch.manual_seed(seed)
    meter = _ForwardMeter(lm.model)
    with torch.inference_mode(), meter:
        start = time.perf_counter()
        out = lm.model.generate(input_ids, attention_mask=torch.ones_like(input_ids), **options)
        synchronize(meter.device)
        wall = time.perf_counter() - start
    tokens = cut_at_end([int(t) for t in out[0, len(prompt_ids) :].tolist()], lm.eos_token_ids)
    return HFGeneration(tokens, meter.calls, wall, meter.seconds)
