"""The model database answered by the real vLLM CPU engine, offline and as a server.

Both builds run in .venv-vllm (`make setup-vllm`; `make test` makes it), vLLM's own environment,
on the packaged model and the first 16 ShareGPT prompts, and are compared with the transformers
build in this environment: the answers may differ where the engines' numerics differ (another
kernel, another summation order, a near-tie of the argmax), so the n-gram sets are compared and
their overlap reported, expected high. The server test starts `vllm serve` on a free local port and
stops it, it and only it (`hdlib.bench.serving.vllm_server`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest

from hdlib.bench.serving import vllm_server
from hdlib.cli import main
from hdlib.databases.statsdb import ensure_statistics_db
from hdlib.models.loading import DEFAULT_MODEL, load_text
from hdlib.store import read_db

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
VLLM_VENV = ROOT / ".venv-vllm"
PROMPTS, MAX_NEW = 16, 64
# vLLM on the CPU: float32 as hdlib runs the model, a context that fits prompt and answer, no graph
# capture, 2 GiB of KV cache (VLLM_CPU_KVCACHE_SPACE).
ENGINE = {"dtype": "float32", "max_model_len": 1024, "enforce_eager": True}
ENV = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "2", "TOKENIZERS_PARALLELISM": "false"}
COMMON = ["--limit", str(PROMPTS), "--max-new-tokens", str(MAX_NEW), "--max-prompt-tokens", "512", "--n", "5"]


@pytest.fixture(scope="module")
def vllm_python() -> Path:
    python = VLLM_VENV / "bin" / "python"
    if not python.exists():
        pytest.skip(f"{VLLM_VENV} is missing: `make setup-vllm` makes it (make test does)")
    return python


@pytest.fixture(scope="module")
def transformers_db(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("transformers")
    assert main(["build-db", "model", *COMMON, "--out", str(out / "db.npz"), "--work-dir", str(out / "w")]) == 0
    return out / "db.npz"


def ngram_set(path: Path) -> set[tuple[int, ...]]:
    _, arrays = read_db(path)
    return {tuple(row) for row in arrays["ngrams"].tolist()}


def answers(work: Path) -> list[list[int]]:
    out = []
    for shard in sorted(work.glob("shard-*.npz")):
        _, arrays = read_db(shard)
        offsets, tokens = arrays["offsets"].tolist(), arrays["tokens"].tolist()
        out += [tokens[a:b] for a, b in pairwise(offsets)]
    return out


def compare(request, name: str, built: Path, reference: Path) -> float:
    """The share of n-grams the two databases hold in common (Jaccard), and how many answers agree."""
    a, b = ngram_set(built), ngram_set(reference)
    overlap = len(a & b) / len(a | b)
    same = sum(x == y for x, y in zip(answers(built.parent / "w"), answers(reference.parent / "w")))
    line = (
        f"{name}: n-gram overlap with transformers {overlap:.3f} ({len(a)} vs {len(b)}); "
        f"{same}/{PROMPTS} answers identical"
    )
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(line)
    return overlap


def test_the_offline_engine_builds_the_database(vllm_python, transformers_db, tmp_path, request):
    engine = [f"--engine-arg={k}={json.dumps(v)}" for k, v in ENGINE.items()]
    out = tmp_path / "db.npz"
    command = [str(vllm_python), "-m", "hdlib", "build-db", "model", "--engine", "vllm", *engine, *COMMON]
    done = subprocess.run(
        [*command, "--out", str(out), "--work-dir", str(tmp_path / "w")],
        cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=1200, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    meta = read_db(out)[0]
    assert meta["build"]["engine"]["name"] == "vllm" and meta["build"]["engine"]["engine_args"] == ENGINE
    assert meta["tokenizer"] == read_db(transformers_db)[0]["tokenizer"] and meta["counts"]["answers"] == PROMPTS
    assert compare(request, "vLLM offline", out, transformers_db) > 0.6


def test_vllm_serve_builds_the_database_through_the_server(vllm_python, transformers_db, tmp_path, request):
    folder = load_text(DEFAULT_MODEL).source  # the packaged model's converted folder
    args = ["--dtype", "float32", "--max-model-len", "1024"]
    with vllm_server(folder, "vllm", tmp_path / "serve.log", args) as url:
        out = tmp_path / "db.npz"
        code = main(["build-db", "model", *COMMON, "--server", url, "--concurrency", "8",
                     "--out", str(out), "--work-dir", str(tmp_path / "w")])  # fmt: skip
        assert code == 0
    meta = read_db(out)[0]
    assert meta["build"]["engine"]["name"] == "server" and meta["build"]["answers_from_text"] == 0
    assert compare(request, "vllm serve", out, transformers_db) > 0.6
    assert np.all(read_db(out)[1]["doc_freq"] >= 1)


def test_the_vllm_methods_run_in_a_second_pass_identical_to_ar(vllm_python, tmp_path, monkeypatch):
    """`hdlib bench` here with vLLM's methods: hdlib's methods in this run, then the same command in
    .venv-vllm with `ar` and vLLM's (ar side by side there), every answer identical to ar's: here
    `vllm-hd`, hdlib's tiers as vLLM's proposer. (`vllm`, `vllm-ngram` and `vllm-suffix` take the path
    `vllm-hd` takes, with another speculative_config or none, and plain vLLM's answers are checked
    against HD's in test_hd_as_vllms_proposer_under_a_servers_workloads_answers_as_plain_vllm: left
    out here for the suite's time.)"""
    questions = tmp_path / "q.jsonl"
    asked = {"summarization": "Repeat this line five times: the cat sat on the mat.", "qa": "Count from 1 to 20."}
    rows = [{"question_id": i, "category": task, "turns": [text]} for i, (task, text) in enumerate(asked.items(), 1)]
    questions.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "r.json"
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    ensure_statistics_db(load_text(DEFAULT_MODEL), progress=False)  # vllm-hd's statistics tier, built here
    code = main(["bench", "--questions", str(questions), "--max-new-tokens", "32", "--methods",
                 "hd:C,vllm-hd", "--out", str(out)])  # fmt: skip
    assert code == 0
    assert list(json.loads(out.read_text())["methods"]) == ["ar", "hd:C"]
    served = json.loads((tmp_path / "r-vllm.json").read_text())
    assert list(served["methods"]) == ["ar", "vllm-hd"]
    assert "--methods vllm-hd" in served["command"]
    for name, result in served["methods"].items():
        assert result["overall"]["identical_frac"] == 1.0, name
    # The speculative engine accepted drafts where the answer repeats the question.
    assert served["methods"]["vllm-hd"]["tasks"]["summarization"]["mat"] > 1.5
    # Each pass says what made it, in its own environment: hd:C read the forward profile here; ar and
    # vLLM's engine there read none
    here, there = json.loads(out.read_text())["provenance"], served["provenance"]
    assert here["versions"]["vllm"] is None and there["versions"]["vllm"] is not None
    assert here["forward_profile"] is not None and there["forward_profile"] is None
    assert here["commit"] == there["commit"]


def test_hd_as_vllms_proposer_under_a_servers_workloads_answers_as_plain_vllm(vllm_python, tmp_path, request):
    """tests/vllm_workloads.py on vLLM's CPU engine (AsyncLLM, as `vllm serve` runs it), plain and with
    hdlib's tiers as its proposer, a KV cache of 16 blocks: five repetitive prompts together; 32
    questions together behind one shared system prompt (the cache too small: requests are preempted
    and recomputed), then the same 32 each behind a system prompt of its own; eight streams dropped by
    their clients midway; n=4 sampling; 24 requests one at a time. Every greedy answer is plain vLLM's,
    HD's MAT with the shared prompt is at most 10 % below its MAT with prompts of their own (requests
    that took each other's state behind a shared prompt would draft another's text: fewer tokens
    accepted; a higher MAT there is no such defect: measured 1.75 against 1.58 once), and the
    proposer holds a state only for requests of the engine's last step: the dropped streams' states go
    at the step after."""
    text = load_text(DEFAULT_MODEL)
    ensure_statistics_db(text, progress=False)

    # One engine after the other (two starting together on this machine can fail), in one process.
    script = ROOT / "tests" / "vllm_workloads.py"
    command = [str(vllm_python), str(script), text.source, str(tmp_path / "got"), "plain,hd"]
    with open(tmp_path / "engines.log", "w") as log:
        run = subprocess.run(command, env=ENV, stdout=subprocess.DEVNULL, stderr=log, timeout=1500)
    said = (tmp_path / "engines.log").read_text()
    assert run.returncode == 0, said[-3000:]
    got = json.loads((tmp_path / "got").read_text())
    assert "request ids cannot be had" not in said, said[-3000:]  # the proposer found vLLM's runner and ids
    assert "hdlib:" not in said, said[-3000:]  # no tier failed
    plain, hd = got["plain"], got["hd"]
    for phase in ("batch", "shared", "own", "after_cancel", "sequential"):
        assert hd[phase] == plain[phase], phase
    assert len(hd["shared"]) == len(hd["own"]) == 32 and len(hd["sequential"]) == 24
    assert hd["shared_counts"]["preemptions"] > 0  # the small cache forced preemption, and the answers held
    mat = {p: c["tokens"] / (c["tokens"] - c["accepted"]) for p in ("shared", "own") for c in [hd[f"{p}_counts"]]}
    line = f"vLLM + HD: MAT {mat['shared']:.2f} with a shared system prompt, {mat['own']:.2f} with one of each's own"
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(line)
    assert mat["own"] > 1.2 and mat["shared"] >= 0.9 * mat["own"], line
    assert all(seen == 4 for seen in hd["cancelled"]) and len(hd["siblings"]) == 4
    assert all(len(a) <= 32 for a in hd["siblings"]) and len({tuple(a) for a in hd["siblings"]}) > 1
    states = hd["states"]
    assert states["start"] == 0 and 1 <= states["batch"] <= 5 and 1 <= states["siblings"] <= 4
    assert states["cancelled"] >= 1 and states["after_cancel"] == 1 and states["sequential"] == 1


def test_vllm_serve_starts_with_hds_proposer_and_answers_under_a_bounded_load(vllm_python, tmp_path):
    """benchmarks/served_load.py on eight repetitive questions, once over: a fresh `vllm serve` with
    plain decoding and one with hdlib's proposer (started by `hdlib serve`, as a user starts it), up
    side by side (`--together`), each sent an untimed warm-up request and then 4 requests by `vllm
    bench serve` at concurrency 1 and 4 others at 4, stopped after; every question sent once per
    method. With HD the server accepted drafts at both and answered every
    request as plain decoding did at concurrency 1, and the paired comparison covers every question.
    (Its numbers are no measurement: the served benchmark's committed run is.)"""
    questions = tmp_path / "q.jsonl"
    asked = [
        "Repeat this line five times: the cat sat on the mat.", "Count from 1 to 20.",
        "Write the alphabet twice, letters separated by spaces.", "Say 'hello world' three times.",
        "List the days of the week, then list them again.", "Count from 10 to 30.",
        "Repeat this line four times: red, green, blue.", "List the months of the year twice.",
    ]  # fmt: skip
    rows = [{"question_id": i, "category": "qa", "turns": [text]} for i, text in enumerate(asked, 1)]
    questions.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ensure_statistics_db(load_text(DEFAULT_MODEL), progress=False)
    out = tmp_path / "served.json"
    run = subprocess.run(
        [sys.executable, "-m", "benchmarks.served_load", "--questions", str(questions), "--per-task", "8",
         "--max-new-tokens", "32", "--methods", "vllm,vllm-hd", "--concurrency", "1,4", "--requests", "4",
         "--repeats", "1", "--together", "--out", str(out)],
        cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=1500,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    data = json.loads(out.read_text())
    served = data["summary"]
    for method, levels in served.items():
        for c, level in levels.items():
            assert level["requests"] == 4 and level["failed"] == 0 and level["tokens_per_s"]["value"] > 0, (method, c)
            sent = [a["question_id"] for r in data["runs"][method][c]["repeats"] for a in r["answers"]]
            assert len(set(sent)) == 4, (method, c)
        repeats = [r for level in data["runs"][method].values() for r in level["repeats"]]
        asked_once = [a["question_id"] for r in repeats for a in r["answers"]]
        assert sorted(asked_once) == list(range(1, 9)), method  # every question once per method
    assert served["vllm"]["1"]["mat"]["value"] == 1.0 and served["vllm"]["1"]["identical_frac"] is None
    # Four answers of 32 tokens per level, the first few tokens with nothing to copy yet
    # (measured: MAT 1.45 at concurrency 1): HD's drafts are accepted at both levels.
    assert served["vllm-hd"]["1"]["identical_frac"] == 1.0 and served["vllm-hd"]["1"]["mat"]["value"] > 1.2
    assert served["vllm-hd"]["4"]["mat"]["value"] > 1.2  # other prompts, in flight together: still accepted
    [compared] = data["comparisons"]
    assert (compared["a"], compared["b"]) == ("vllm-hd", "vllm")
    assert {e["n"] for e in compared["levels"].values()} == {4}
    # both servers up, the order the design's first row; one repeat of two rows: not balanced, and said so
    assert data["together"] and len(data["orders"]) == 1 and sorted(data["orders"][0]) == ["vllm", "vllm-hd"]
    assert data["orders"][0] in data["design"] and len(data["design"]) == 2 and data["balanced"] is False
    assert "do not balance the methods' order" in run.stderr


def test_importing_the_proposer_in_vllms_environment_loads_no_numba(vllm_python):
    """numba (llvmlite) loads when the first context index is made, not at import: vLLM 0.32's CPU
    worker, as it starts, reads every imported module's objects and fails on llvmlite's
    (`'_lib_fn_wrapper' object has no attribute 'get'`), so a script that imports hdlib before it
    starts an engine (tests/vllm_workloads.py does) must not have loaded it. Once an index is made,
    the index is numba's."""
    code = (
        "import sys, numpy, hdlib.serving.proposer, hdlib.bench.serving\n"
        "before = sorted({'numba', 'llvmlite'} & set(sys.modules))\n"
        "import hdlib.serving.index as index\n"
        "index.ContextIndex(numpy.arange(8))\n"
        "print(before, index.COMPILED)\n"
    )
    run = subprocess.run([str(vllm_python), "-c", code], env=ENV, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.split() == ["[]", "True"]


def test_hdlib_bench_serve_runs_vllms_load_generator_from_its_environment(vllm_python):
    """`vllm bench serve` as docs/serving.md has a user run it, from .venv-vllm: vLLM's own parser
    answers (its options listed), where vllm-cpu's `vllm` command fails on its package metadata."""
    run = subprocess.run([str(vllm_python.parent / "hdlib"), "bench-serve", "--", "--help"],
                         env=ENV, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert "--max-concurrency" in run.stdout and "--dataset-name" in run.stdout


# What hdlib's proposer expects of vLLM's runner (hdlib.serving.proposer.HDProposer.propose).
PROPOSE_ARGS = ["sampled_token_ids", "self.input_batch.num_tokens_no_spec", "self.input_batch.token_ids_cpu"]


def custom_class_call(source: str) -> tuple[list[str], list[str]]:
    """The arguments and keywords of the runner's `propose` call in its `custom_class` branch."""
    import ast

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.If) and "custom_class" in ast.unparse(node.test):
            for call in ast.walk(ast.Module(body=node.body, type_ignores=[])):
                if isinstance(call, ast.Call) and getattr(call.func, "attr", None) == "propose":
                    return [ast.unparse(a) for a in call.args], [k.arg or "**" for k in call.keywords]
    return [], []


def test_the_installed_vllm_calls_a_custom_proposer_as_hdlib_expects(vllm_python):
    """vLLM's runner and what HDProposer takes: a release that changes the call fails here, saying how."""
    site = subprocess.run(
        [str(vllm_python), "-c", "import vllm, pathlib; print(pathlib.Path(vllm.__file__).parent)"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    runner = Path(site) / "v1" / "worker" / "gpu_model_runner.py"
    args, keywords = custom_class_call(runner.read_text())
    said = f"{runner}: the custom_class proposer is now called with {args}; hdlib expects {PROPOSE_ARGS}"
    assert args == PROPOSE_ARGS, said
    assert set(keywords) <= {"slot_mappings"}, f"{runner}: new keywords for propose: {keywords}"
    cpu = (Path(site) / "v1" / "worker" / "cpu_model_runner.py").read_text()
    assert "self.drafter.load_model(self.model)" in cpu, "vLLM's CPU runner no longer calls drafter.load_model(model)"


def test_vllms_own_runner_method_gives_the_proposer_its_request_ids(vllm_python):
    """vLLM's `propose_draft_token_ids`, called on a stand-in runner of two requests: the proposer
    binds to its caller, keys the states by the requests' ids and lets a finished one's go."""
    run = subprocess.run([str(vllm_python), str(ROOT / "tests" / "vllm_runner_contract.py")],
                         env=ENV, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["unbound"] is None, f"vLLM's runner is no longer the caller hdlib binds to: {got['unbound']}"
    assert got["named"] == ["x", "y"] and got["left"] == ["y"]
    assert got["drafts"] == [[[3, 1, 2, 3], [6, 4, 5, 6]], [[6, 4, 5, 6]]]


def test_the_contract_check_names_a_changed_call():
    changed = 'if spec_config.method == "custom_class":\n    d = self.drafter.propose(sampled_token_ids, req_ids)\n'
    assert custom_class_call(changed) == (["sampled_token_ids", "req_ids"], [])
    assert custom_class_call("x = 1\n") == ([], [])
