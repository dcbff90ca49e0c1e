"""Tiny random models built from configs: no download, seconds to build, exact enough to test with.

The weights are drawn with a large standard deviation so that the logits are well separated: HD and
plain decoding run different matrix shapes, and near-ties in a near-uniform random model would let
rounding (not a bug) flip an argmax.
"""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace
from tokenizers.processors import TemplateProcessing
from transformers import (
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
)

VOCAB = 96
# What every tiny model shares: its sizes, the wide initialisation, the special tokens' ids.
TINY = dict(
    hidden_size=64,
    intermediate_size=128,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=512,
    initializer_range=0.3,
    bos_token_id=0,
    eos_token_id=1,
    pad_token_id=2,
)


def tiny_llama(vocab_size: int = VOCAB, seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(vocab_size=vocab_size, num_hidden_layers=2, **TINY)).eval()


def tiny_gemma3(vocab_size: int = VOCAB, seed: int = 0, sliding_window: int = 6) -> Gemma3ForCausalLM:
    """Gemma 3 with alternating sliding and full attention; the window is short so that tests cross it."""
    torch.manual_seed(seed)
    config = Gemma3TextConfig(
        vocab_size=vocab_size,
        num_hidden_layers=4,
        head_dim=16,
        sliding_window=sliding_window,
        layer_types=["sliding_attention", "full_attention"] * 2,
        **TINY,
    )
    return Gemma3ForCausalLM(config).eval()


WORDS = ["<s>", "</s>", "<pad>", "[UNK]", "<|im_end|>", "user", "assistant", "hello", "world", "how", "are", "you"]
TEMPLATE = (
    "{% for m in messages %}<s> {{ m['role'] }} {{ m['content'] }} <|im_end|> {% endfor %}"
    "{% if add_generation_prompt %}<s> assistant {% endif %}"
)
# The words of FastChat's vicuna_v1.1 conversation, so that a vicuna prompt tokenizes without [UNK].
VICUNA_WORDS = WORDS + (
    "USER ASSISTANT : A chat between a curious and an artificial intelligence . The gives helpful , detailed "
    "polite answers to the ' s questions"
).split()


def tiny_tokenizer(words: list[str] = WORDS, chat: bool = True, bos: bool = False) -> PreTrainedTokenizerFast:
    """A word-level tokenizer; `chat` gives it a chat template, `bos` makes it put <s> first as Llama's does."""
    backend = Tokenizer(WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    backend.pre_tokenizer = Whitespace()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        unk_token="[UNK]",
        extra_special_tokens=["<|im_end|>"],
    )
    if chat:
        tokenizer.chat_template = TEMPLATE
    if bos:
        tokenizer.backend_tokenizer.post_processor = TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    return tokenizer


def save_tiny(folder: Path, chat: bool = True, words: list[str] = WORDS, bos: bool = False) -> Path:
    """A tiny model folder as save_pretrained writes it; its generation config names a second end token."""
    model = tiny_llama()
    model.generation_config.eos_token_id = [1, 11]
    model.save_pretrained(folder)
    tiny_tokenizer(words, chat, bos).save_pretrained(folder)
    return folder
