"""The target model: `loading` (a packaged short name, a local folder or a Hub id, its prompt
formats), `packaged` (the GGUF files shipped on PyPI, converted once) and `cpu` (a cheaper forward
pass on the CPU)."""

from hdlib.models.loading import (
    DEFAULT_MODEL,
    DTYPE_CHOICES,
    PROMPT_FORMATS,
    LoadedModel,
    ModelText,
    context_length,
    get_device,
    load_model,
    load_text,
)

__all__ = [
    "DEFAULT_MODEL",
    "DTYPE_CHOICES",
    "PROMPT_FORMATS",
    "LoadedModel",
    "ModelText",
    "context_length",
    "get_device",
    "load_model",
    "load_text",
]
