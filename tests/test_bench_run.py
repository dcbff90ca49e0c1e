"""Answering (`hdlib.bench.run`): every method on every question of a tiny random model (tests/support/tiny.py),
lossless, seeded, repeated in a shuffled order, each hd method from the same prior; `hdlib bench`'s
settings reach the run, and bad ones are refused before the model loads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.arctic import needs_arctic_inference
from support.bench_inputs import METHODS, bench_argv, write_questions

import hdlib
import hdlib.bench.run
from hdlib.bench import QuestionRuns, run_benchmark
from hdlib.bench.log import raw_path
from hdlib.bench.specbench import Question, load_questions
from hdlib.cli import main
from hdlib.tiers.other_methods import SuffixDecodingTier, TokenRecyclingTier


def test_a_fixed_budget_reaches_generate(lm, monkeypatch):
    steps: dict[int | None, list[tuple[int, int]]] = {}  # budget asked for -> (budget, drafted) of each step
    real = hdlib.bench.run.generate

    def spy(*args, budget=None, **kwargs):
        g = real(*args, budget=budget, **kwargs)
        steps.setdefault(budget, []).extend((s.budget, s.tree.n_drafted) for s in g.steps)
        return g

    monkeypatch.setattr(hdlib.bench.run, "generate", spy)
    questions = [Question(1, "qa", ("hello how hello how hello how",))]
    r = run_benchmark(lm, questions, ["hd:C@0", "hd:C@8"], max_new_tokens=64)
    assert set(steps) == {None, 0, 8}  # None: ar, whose empty drafter never drafts
    assert {k for k, _ in steps[0]} == {0} and sum(n for _, n in steps[0]) == 0
    assert {k for k, _ in steps[8]} == {8} and sum(n for _, n in steps[8]) > 0  # the model repeats itself
    methods = r.methods
    assert methods["hd:C@0"].overall.mat == 1.0 and methods["hd:C@0"].overall.tier_share == {"bonus": 1.0}
    assert methods["hd:C@8"].overall.identical_frac == 1.0 and methods["hd:C@8"].overall.mat >= 1.0


OWN = (TokenRecyclingTier, SuffixDecodingTier)


def test_the_fields_drafters_run_as_methods_each_with_a_table_of_its_own(lm, monkeypatch):
    """`recycling` alone and in an HD order, and `suffix`, verified by hdlib's engine: identical to
    `ar`, and no method drafts from the table another method filled answering the same question."""
    tables: dict[int | None, set[int]] = {}  # by budget (each method's differs): its recycling or suffix tables
    real = hdlib.bench.run.generate

    def spy(lm, prompt_ids, tiers, **kwargs):
        g = real(lm, prompt_ids, tiers, **kwargs)
        tables.setdefault(kwargs["budget"], set()).update(id(t) for t in tiers if isinstance(t, OWN))
        return g

    needs_arctic_inference()
    monkeypatch.setattr(hdlib.bench.run, "generate", spy)
    questions = [Question(1, "qa", ("hello how hello how hello how",)), Question(2, "qa", ("how are you",))]
    r = run_benchmark(lm, questions, ["recycling", "recycling@8", "hd:CT@16", "suffix"], max_new_tokens=48)
    for name in ("recycling", "recycling@8", "hd:CT@16", "suffix"):
        assert r.methods[name].overall.identical_frac == 1.0
    assert r.methods["recycling"].overall.tier_share.get("recycling", 0) > 0  # the model repeats itself
    assert {k: len(ids) for k, ids in tables.items()} == {None: 0, 80: 1, 8: 1, 16: 1, 24: 1}  # ar: none
    assert len(set.union(*tables.values())) == 4  # one table per method, kept across its questions


def test_a_method_named_twice_runs_as_an_aa_pair_with_tables_of_its_own_and_is_compared_unasked(lm, monkeypatch):
    """`suffix,suffix`: two arms, each with its own SuffixDecoding tree, answering alike; the run
    compares the second arm with the first, over questions and, with five repeats, over repeats."""
    tables: dict[str, dict[int, object]] = {}  # the tables themselves are held: a freed one's id could come back
    real = hdlib.bench.run.answer_question

    def spy(lm, question, method, *args, **kwargs):
        tables.setdefault(method.name, {}).update((id(t), t) for t in method.tiers if isinstance(t, OWN))
        return real(lm, question, method, *args, **kwargs)

    needs_arctic_inference()
    monkeypatch.setattr(hdlib.bench.run, "answer_question", spy)
    questions = [Question(i, "qa", (f"hello how hello how {i}",)) for i in range(1, 7)]
    r = run_benchmark(lm, questions, "suffix,suffix", max_new_tokens=12, repeats=5)
    assert list(r.methods) == ["ar", "suffix", "suffix#2"]
    assert all(r.methods[n].overall.identical_frac == 1.0 for n in ("suffix", "suffix#2"))
    assert len(tables["suffix"]) == len(tables["suffix#2"]) == 5 and tables["suffix"].keys().isdisjoint(
        tables["suffix#2"])  # fmt: skip
    aa = r.comparison("suffix#2", "suffix")
    assert aa is not None and aa.overall.n == 6 and aa.by_repeat is not None and aa.by_repeat.n == 5


def test_lossless_methods_reproduce_ar_and_plain_methods_take_one_token_per_step(results):
    methods = results.to_json()["methods"]
    for name in ["ar", *METHODS]:
        assert methods[name]["overall"]["identical_frac"] == 1.0, name
    assert methods["ar"]["overall"]["speedup"] == 1.0
    assert methods["ar"]["overall"]["mat"] == 1.0 and methods["hf"]["overall"]["mat"] == 1.0
    assert methods["hf-pld"]["overall"]["mat"] >= 1.0 and methods["hd:C"]["overall"]["mat"] >= 1.0
    assert methods["ar"]["overall"]["tier_share"] == {"bonus": 1.0}
    assert methods["hf"]["overall"]["tier_share"] == {} and methods["hf"]["overall"]["draft_ms"] == 0.0
    assert sum(methods["hd:C"]["overall"]["tier_share"].values()) == pytest.approx(1.0)
    assert 0.0 < methods["hf"]["overall"]["overhead_frac"] < 1.0


def test_sampled_runs_are_seeded(lm):
    questions = [Question(1, "qa", ("hello world how",))]
    seen: list[dict[str, list[str]]] = []

    def keep(question, answered):
        seen.append({name: [t.digest for t in turns] for name, turns in answered.runs.items()})

    for _ in range(2):
        r = run_benchmark(lm, questions, ["hf", "hd:C"], max_new_tokens=8, on_question=keep, temperature=1.5)
        assert r.temperature == 1.5 and r.methods["hf"].overall.mat == 1.0
    assert seen[0] == seen[1]  # the same seeds give the same samples, method by method


def test_repeats_run_every_method_on_every_question_in_a_recorded_shuffled_order(lm):
    questions = load_questions(write_questions(Path(lm.source).parent / "rq.jsonl"))[:3]
    seen = []
    r = run_benchmark(lm, questions, ["hf", "hd:C"], 6, lambda q, a: seen.append(a), repeats=2, order_seed=7)
    assert [a.key for a in seen] == [(q.question_id, rep) for rep in (0, 1) for q in questions]  # repeat by repeat
    for a in seen:
        assert sorted(a.order) == ["ar", "hd:C", "hf"] and list(a.runs) == ["ar", "hf", "hd:C"]
        assert a.order == hdlib.bench.run.method_order(["ar", "hf", "hd:C"], 7, a.question_id, a.repeat)
        assert QuestionRuns.from_json(json.loads(json.dumps(a.to_json()))) == a
    assert len({tuple(a.order) for a in seen}) > 1  # shuffled, not one fixed order
    assert r.repeats == 2 and r.order_seed == 7 and r.methods["hd:C"].overall.identical_frac == 1.0
    assert r.methods["hd:C"].overall.intervals["speedup"].n == 3  # repeats pooled within a question
    orders = [hdlib.bench.run.method_order(["a", "b", "c", "d"], 0, q, 0) for q in range(40)]
    assert {o[0] for o in orders} == {"a", "b", "c", "d"}  # every method is sometimes first


def test_reversing_the_methods_leaves_each_hd_methods_first_budget_and_prior_unchanged(lm, tmp_path, monkeypatch):
    monkeypatch.setenv("HDLIB_CACHE", str(tmp_path / "cache"))
    hdlib.generate(lm, "hello world how are you", "C", max_new_tokens=24, prior="learned")  # a prior with history
    learned = sorted((tmp_path / "cache" / "acceptance").glob("*.json"))
    assert len(learned) == 1
    before = learned[0].read_text()
    questions = load_questions(write_questions(tmp_path / "q.jsonl"))
    names = ["hd:C", "hf-pld", "hd:C+window", "hf"]
    firsts, priors = [], []
    for order in (names, names[::-1]):
        answered = []
        r = run_benchmark(lm, questions, order, 10, lambda q, a: answered.append(a), prior="learned")
        firsts.append({(a.question_id, n, i): t.first_budget for a in answered for n in ("hd:C", "hd:C+window")
                       for i, t in enumerate(a.runs[n])})  # fmt: skip
        priors.append(r.prior)
    assert firsts[0] == firsts[1] and all(v is not None for v in firsts[0].values())
    assert priors[0] == priors[1] and priors[0]["source"] == "learned"
    assert learned[0].read_text() == before  # the run read the prior, and never wrote it


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--methods", "hf,pld"], "unknown method 'pld'"),
        (["--methods", "hd:CQ"], "unknown tier 'Q'"),
        (["--methods", "hf@8"], "only the methods hdlib verifies take a fixed budget @N"),
        (["--methods", "hd:C@x"], "the budget after @ must be a non-negative integer"),
        (["--per-task", "0"], "must be at least 1"),
        (["--tasks", "rag,poetry"], "unknown task(s) ['poetry']: choose from mt_bench, translation"),
        (["--tasks", "qa"], "holds no question of the task(s) qa"),
        (["--max-new-tokens", "0"], "must be at least 1"),
        (["--temperature", "-1"], "temperature must be a finite number >= 0"),
        (["--out", "/no/such/folder/r.json"], "does not exist"),
        (["--repeats", "0"], "must be at least 1"),
        (["--split", "half"], "invalid choice: 'half'"),
        (["--compare", "hf"], "two different method names, A,B, are needed"),
        (["--compare", "hf,suffix"], "--compare hf,suffix: two different methods of the same pass are needed"),
        (["--methods", "hd,vllm-hd", "--compare", "hd,vllm-hd"], "two different methods of the same pass"),
    ],
)
def test_cli_refuses_bad_arguments_before_loading_the_model(capsys, tmp_path, no_model_load, extra, message):
    questions = write_questions(tmp_path / "q.jsonl")
    argv = ["bench", "--questions", str(questions), "--out", str(tmp_path / "r.json"), *extra]
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.strip().splitlines()[-1].startswith("hdlib: error: ") and message in err, err


def test_cli_repeats_split_and_compare_reach_the_results(capsys, folder, tmp_path):
    rows = [{"question_id": i, "category": "qa", "turns": [f"hello world how {i}"]} for i in range(1, 7)]
    questions = write_questions(tmp_path / "q.jsonl", rows)
    out = tmp_path / "r.json"
    argv = bench_argv(folder, questions, out, "--split", "report", "--repeats", "2", "--compare", "hf,hf-pld")
    assert main(argv) == 0
    printed = capsys.readouterr().out
    data = json.loads(out.read_text())
    assert data["questions"] == 3 and data["split"] == "report" and data["repeats"] == 2
    raw = [json.loads(line) for line in raw_path(out).read_text().splitlines()[1:]]
    assert [(r["question_id"], r.get("repeat", 0)) for r in raw] == [(q, rep) for rep in (0, 1) for q in (4, 5, 6)]
    assert [(c["a"], c["b"]) for c in data["comparisons"]] == [("hf", "hf-pld"), ("hd:C", "hf-pld")]
    assert "run: 2 repeats of every method on every question" in printed and "the report half" in printed
    assert "hf against hf-pld: " in printed and "over 3 questions" in printed and "qa (3)" in printed
