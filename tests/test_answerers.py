"""Who writes the model database's answers: an OpenAI-compatible server, stood in for by a small
HTTP server of our own answering with a tiny model, must give the build the same database as
transformers in this process; its failures (down, another model, another tokenizer, errors that
pass, errors that do not) are said or retried; an interrupted build resumes.

The real engines, vLLM's offline one and `vllm serve`, are in tests/test_vllm.py (slow)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest
from support.tiny import save_tiny

from hdlib.cli import main
from hdlib.databases import answerers, modeldb
from hdlib.databases.answerers import ServerAnswerer, TransformersAnswerer, generate_answers
from hdlib.errors import HDError
from hdlib.models.loading import load_model, load_text
from hdlib.store import read_db

PROMPTS = [" ".join(["hello", "world", "how", "are", "you"][i % 5 :] + ["hello"] * (i % 7)) for i in range(20)]
BUILD = {"n": 3, "top_k": 40, "max_new_tokens": 10, "max_prompt_tokens": 64, "shard_size": 8, "progress": False}


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory):
    return load_model(str(save_tiny(tmp_path_factory.mktemp("tiny") / "model")))


class FakeServer:
    """/v1/models, /tokenize and /v1/completions (prompt ids in, greedy answer ids out) on 127.0.0.1,
    answered by `lm`; `fail_next` requests get HTTP 503, `in_flight_max` is the most at once."""

    def __init__(self, lm, served: str = "tiny", tokenize=None, token_ids: bool = True, meet: int = 0) -> None:
        self.lm, self.served, self.token_ids = lm, served, token_ids
        # The first `meet` completions wait for one another (10 s at most): requests sent at once are
        # seen at once however slowly a loaded machine answers the first.
        self.meet, self.met = (threading.Barrier(meet, timeout=10) if meet else None), 0
        self.tokenize = tokenize or (lambda text: lm.tokenizer(text, add_special_tokens=False)["input_ids"])
        self.fail_next, self.completions, self.in_flight, self.in_flight_max = 0, 0, 0, 0
        self.lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def reply(self, code: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self.reply(200, {"data": [{"id": owner.served}]} if self.path == "/v1/models" else {})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path == "/tokenize":  # vLLM's form of the request
                    return self.reply(200, {"tokens": owner.tokenize(body["prompt"])})
                with owner.lock:
                    if owner.fail_next:
                        owner.fail_next -= 1
                        return self.reply(503, {"error": "busy"})
                    owner.in_flight += 1
                    owner.in_flight_max = max(owner.in_flight_max, owner.in_flight)
                    meet = owner.meet is not None and owner.met < owner.meet.parties
                    owner.met += meet
                try:
                    if meet:
                        owner.meet.wait()
                    (new,) = generate_answers(owner.lm, [body["prompt"]], body["max_tokens"])
                    choice = {"text": owner.lm.decode(new)}
                    if owner.token_ids:
                        choice["token_ids"] = new
                finally:
                    # no longer in flight once answered, before the answer goes out: a client may send its
                    # next request the moment it reads this one (counted after, it seemed one too many)
                    with owner.lock:
                        owner.in_flight -= 1
                with owner.lock:
                    owner.completions += 1
                self.reply(200, {"choices": [choice]})

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> FakeServer:  # noqa: PYI034
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()


def arrays(path):
    return read_db(path)[1]


def test_a_server_build_equals_the_transformers_build(tiny_lm, tmp_path):
    here = modeldb.build_model_db(tiny_lm, tmp_path / "here.npz", PROMPTS, work_dir=tmp_path / "w1", **BUILD)
    text = load_text(tiny_lm.source)  # the tokenizer side only: no weights loaded
    with FakeServer(tiny_lm, meet=2) as server:
        answerer = ServerAnswerer(text, server.url, concurrency=3)
        served = modeldb.build_model_db(
            text, tmp_path / "served.npz", PROMPTS, work_dir=tmp_path / "w2", answerer=answerer, **BUILD
        )
    for name in ("ngrams", "doc_freq"):
        np.testing.assert_array_equal(arrays(here)[name], arrays(served)[name])
    assert 1 < server.in_flight_max <= 3  # concurrent, and never more than asked
    meta = read_db(served)[0]
    assert meta["build"]["engine"] == {"name": "server", "engine": "server", "url": server.url, "served_model": "tiny"}
    assert meta["build"]["concurrency"] == 3 and meta["build"]["answers_from_text"] == 0
    assert read_db(here)[0]["build"]["engine"]["name"] == "transformers"


def test_answers_as_text_are_encoded_again_and_counted(tiny_lm):
    with FakeServer(tiny_lm, token_ids=False) as server:
        answerer = ServerAnswerer(load_text(tiny_lm.source), server.url)
        ids = [tiny_lm.encode_prompt(p) for p in PROMPTS[:4]]
        got = answerer.answer(ids, 10, lambda n: None)
    want = [
        tiny_lm.tokenizer(tiny_lm.decode(a), add_special_tokens=False)["input_ids"]
        for a in generate_answers(tiny_lm, ids, 10)
    ]
    assert got == want and answerer.retokenized == 4


def test_errors_that_pass_are_retried_and_others_are_said(tiny_lm):
    text = load_text(tiny_lm.source)
    with FakeServer(tiny_lm) as server:
        answerer = ServerAnswerer(text, server.url, retries=3, backoff_s=0.01)
        server.fail_next = 3  # three 503s: the fourth try answers
        assert answerer.answer([tiny_lm.encode_prompt("hello")], 5, lambda n: None)[0] is not None
        server.fail_next = 5
        with pytest.raises(HDError, match="HTTP 503"):
            answerer.answer([tiny_lm.encode_prompt("hello")], 5, lambda n: None)
        with pytest.raises(HDError, match=r"serves \['tiny'\], not 'other'"):
            ServerAnswerer(text, server.url, served_model="other")
    with pytest.raises(HDError, match="cannot reach an OpenAI-compatible server"):
        ServerAnswerer(text, server.url, retries=0)  # stopped: nobody answers there now


def test_a_server_with_another_tokenizer_is_refused(tiny_lm):
    def another(text):  # the same words, other ids: another vocabulary
        return [i + 1 for i in tiny_lm.tokenizer(text, add_special_tokens=False)["input_ids"]]

    with FakeServer(tiny_lm, tokenize=another) as server, pytest.raises(HDError, match="tokenizes otherwise"):
        ServerAnswerer(load_text(tiny_lm.source), server.url)


def test_an_interrupted_server_build_resumes_without_asking_again(tiny_lm, tmp_path, monkeypatch):
    text = load_text(tiny_lm.source)
    with FakeServer(tiny_lm) as server:
        answerer = ServerAnswerer(text, server.url, concurrency=2)
        real, calls = answerer.answer, []

        def interrupted(prompts, *args):
            calls.append(1)
            if len(calls) == 2:
                raise KeyboardInterrupt  # Ctrl-C in the second shard
            return real(prompts, *args)

        monkeypatch.setattr(answerer, "answer", interrupted)
        with pytest.raises(KeyboardInterrupt):
            modeldb.build_model_db(
                text, tmp_path / "db.npz", PROMPTS, work_dir=tmp_path / "w", answerer=answerer, **BUILD
            )
        asked = server.completions
        monkeypatch.setattr(answerer, "answer", real)
        modeldb.build_model_db(text, tmp_path / "db.npz", PROMPTS, work_dir=tmp_path / "w", answerer=answerer, **BUILD)
        assert server.completions - asked == len(PROMPTS) - BUILD["shard_size"]  # the first shard was kept
    whole = modeldb.build_model_db(tiny_lm, tmp_path / "whole.npz", PROMPTS, work_dir=tmp_path / "w2", **BUILD)
    np.testing.assert_array_equal(arrays(whole)["ngrams"], arrays(tmp_path / "db.npz")["ngrams"])


def test_shards_of_one_engine_are_never_resumed_by_another(tiny_lm):
    transformers = TransformersAnswerer(tiny_lm, batch_size=4).identity()
    assert set(transformers) == {"model", "batch_size", "device", "dtype"}  # the keys shards had before engines
    assert "engine" not in transformers


def test_the_cli_says_what_does_not_go_together(tiny_lm, capsys):
    for argv, said in [
        (["--engine", "vllm", "--server", "http://127.0.0.1:9"], "two ways to answer"),
        (["--engine-arg", "dtype=float32"], "add --engine vllm"),
        (["--engine-arg", "no equals"], "expected KEY=VALUE"),
    ]:
        try:
            code = main(["build-db", "model", "--model", tiny_lm.source, "--limit", "2", *argv])
        except SystemExit as stop:  # argparse's own errors
            code = stop.code
        assert code == 2 and said in capsys.readouterr().err
    assert answerers.VLLM_MISSING.startswith("--engine vllm needs vLLM")
