"""Prompt formats: the chat template, FastChat's vicuna_v1.1 conversation (the paper's models, as
Spec-Bench runs them), raw text; `auto` picks the template when the tokenizer has one, else vicuna.

The model is a tiny random Llama whose word-level tokenizer has no chat template, knows the words
of the vicuna system message and, as Llama's, puts <s> first.
"""

from __future__ import annotations

import json

import pytest
from tiny import VICUNA_WORDS, save_tiny

from hdlib.bench import run_benchmark
from hdlib.bench.specbench import Question
from hdlib.cli import main
from hdlib.decoding import generate
from hdlib.errors import HDError
from hdlib.models.loading import VICUNA_SYSTEM, ModelText, load_model, vicuna_prompt

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

