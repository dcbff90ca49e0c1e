"""Where two answers part, and the near-tie rule: positions, gaps against a direct forward pass, bounds."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from support.tiny import VOCAB, save_tiny, tiny_gemma3, tiny_llama

import hdlib.bench.run
from hdlib.bench import BenchResults, QuestionRuns, divergence_table, identical_line, run_benchmark, summary
from hdlib.bench.divergence import (
    DIVERGENCE,
    NEAR_TIE,
    Divergence,
    classify,
    explain,
    first_divergence,
    logit_gap,
    near_tie_bound,
    next_logits,
)
from hdlib.bench.specbench import Question
from hdlib.engine.loop import DecodeSettings, run
from hdlib.models.loading import load_model

PROMPT = [5, 9, 17, 5, 9, 30, 41]


def test_first_divergence_is_the_first_differing_index():
    assert first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert first_divergence([], []) is None
    assert first_divergence([1, 2, 3], [1, 7, 3]) == 1
    assert first_divergence([4, 2], [1, 2]) == 0
    assert first_divergence([1, 2], [1, 2, 3]) == 2  # a prefix parts where the shorter one ends
    assert first_divergence((1, 2, 3), [1, 2]) == 2


def test_the_bound_is_two_eps_of_the_best_logit_with_a_floor():
    assert near_tie_bound(torch.bfloat16, 20.0) == pytest.approx(2 * 2**-7 * 20)  # 0.3125: 2-4 bf16 ulps at 20
    assert near_tie_bound("bfloat16", -20.0) == near_tie_bound("torch.bfloat16", 20.0)
    assert near_tie_bound(torch.float16, 8.0) == pytest.approx(2 * 2**-10 * 8)
    assert near_tie_bound(torch.float32, 20.0) == 1e-4  # the floor: 2 eps at 20 is 4.8e-6
    assert near_tie_bound(torch.bfloat16, 0.0) == 1e-4
    assert classify(0.25, torch.bfloat16, 20.0) == NEAR_TIE
    assert classify(0.5, torch.bfloat16, 20.0) == DIVERGENCE
    assert classify(0.125, "bfloat16", 8.0) == NEAR_TIE and classify(0.126, "bfloat16", 8.0) == DIVERGENCE
    assert classify(5e-5, torch.float32, 20.0) == NEAR_TIE
    assert classify(1e-3, torch.float32, 20.0) == DIVERGENCE  # what bf16 would call a tie is a bug in fp32


def test_logit_gap_reads_the_two_best_and_the_other_tokens_rank():
    logits = torch.tensor([1.0, 5.0, 4.5, -2.0, 4.75])
    g = logit_gap(logits, expected=1, got=2)
    assert (g.best, g.second, g.gap) == (5.0, 4.75, 0.25)
    assert g.got_rank == 2 and g.distance == 0.5 and g.expected_logit == 5.0 and g.got_logit == 4.5
    assert logit_gap(logits, 1, 4).got_rank == 1 and logit_gap(logits, 1, 4).distance == g.gap
    assert logit_gap(logits.to(torch.bfloat16), 1, 4).gap == 0.25  # read exactly from bfloat16


def direct_row(model, tokens: list[int]) -> torch.Tensor:
    """The last row of one plain causal forward pass over `tokens`, no cache, no hdlib."""
    with torch.inference_mode():
        return model(input_ids=torch.tensor([tokens])).logits[0, -1].double()


@pytest.mark.parametrize("make", [tiny_llama, tiny_gemma3], ids=["llama", "gemma3"])
def test_a_forced_divergence_is_found_with_the_gap_of_a_direct_forward_pass(make):
    model = make()
    baseline = run(model, PROMPT, None, DecodeSettings(max_new_tokens=12)).tokens
    at = 7  # past the Gemma 3 window of 6: the recomputed row must honour it
    row = direct_row(model, PROMPT + baseline[:at])
    assert int(row.argmax()) == baseline[at]
    third = int(row.topk(3).indices[2])  # the baseline's third choice, forced in
    other = baseline[:at] + [third] + baseline[at + 1 :]

    d = explain(model, PROMPT, baseline, other)
    top = row.topk(2).values
    assert (d.position, d.expected, d.got, d.dtype) == (at, baseline[at], third, "float32")
    assert d.gap == pytest.approx(float(top[0] - top[1]), abs=1e-4)
    assert d.distance == pytest.approx(float(row[baseline[at]] - row[third]), abs=1e-4)
    assert d.got_rank == 2 and d.magnitude == pytest.approx(float(top[0].abs()), abs=1e-4)
    assert d.distance > d.bound == 1e-4 and d.kind == DIVERGENCE  # a real choice, not a tie
    assert explain(model, PROMPT, baseline, list(baseline)) is None
    assert Divergence.from_json(d.to_json()) == d


def test_next_logits_are_plain_decodings_row_in_the_models_dtype():
    model = tiny_llama().to(torch.bfloat16)
    context = PROMPT + [11, 12, 13]
    got = next_logits(model, context)
    assert got.dtype == torch.bfloat16 and got.shape == (VOCAB,)
    # Plain decoding's own step on the same context: prefill, then one one-token pass.
    settings = DecodeSettings(max_new_tokens=1)
    assert int(got.argmax()) == run(model, context, None, settings).tokens[0]
    d = explain(model, context, [int(got.argmax())], [int(got.topk(2).indices[1])])
    assert d.dtype == "bfloat16" and d.got_rank == 1
    assert d.bound == pytest.approx(max(1e-4, 2 * 2**-7 * d.magnitude))
    assert d.kind == (NEAR_TIE if d.gap <= d.bound else DIVERGENCE)


def test_an_answer_that_stops_early_parts_without_logits():
    model = tiny_llama()
    d = explain(model, PROMPT, [3, 4, 5], [3, 4])
    assert (d.position, d.expected, d.got, d.gap, d.kind) == (2, 5, -1, None, DIVERGENCE)
    assert "not compared" in d.describe()


# The bench's report ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    return load_model(str(save_tiny(tmp_path_factory.mktemp("tiny") / "m")))


def test_the_bench_reports_where_an_hd_answer_parts_from_ar(lm, monkeypatch):
    real = hdlib.bench.run.generate

    def corrupt(lm, prompt_ids, tiers, **kwargs):  # hd:C@8's third token replaced: a parting by construction
        g = real(lm, prompt_ids, tiers, **kwargs)
        if tiers:
            where = [(i, j) for i, step in enumerate(g.steps) for j in range(len(step.tokens))][2]
            step = g.steps[where[0]]
            tokens = list(step.tokens)
            tokens[where[1]] = (tokens[where[1]] + 1) % VOCAB
            g.steps[where[0]] = dataclasses.replace(step, tokens=tuple(tokens))
        return g

    monkeypatch.setattr(hdlib.bench.run, "generate", corrupt)
    seen: list[QuestionRuns] = []
    questions = [Question(1, "qa", ("hello world how", "how are you")), Question(2, "rag", ("you are hello",))]
    r = run_benchmark(lm, questions, ["hd:C@8"], max_new_tokens=10, on_question=lambda q, a: seen.append(a))

    parted = [(d.question_id, d.method, d.turn) for d in r.divergences]
    assert parted == [(1, "hd:C@8", 0), (1, "hd:C@8", 1), (2, "hd:C@8", 0)]
    for d in r.divergences:
        base = next(a for a in seen if a.question_id == d.question_id).runs["ar"][d.turn]
        v = d.divergence
        assert (v.position, v.expected, v.got) == (2, base.ids[2], (base.ids[2] + 1) % VOCAB)
        row = direct_row(lm.model, [*base.prompt_ids, *base.ids[:2]])
        top = row.topk(2).values
        assert v.gap == pytest.approx(float(top[0] - top[1]), abs=1e-4)
        assert v.distance == pytest.approx(float(row[v.expected] - row[v.got]), abs=1e-4)
        assert v.kind == DIVERGENCE  # the tiny model's logits are far apart
    assert r.methods["hd:C@8"].overall.identical_frac == 0.0
    said = identical_line(r)
    assert said.startswith("WARNING: not identical to ar in float32: hd:C@8 0 %")
    assert said.endswith("a bug, please report it")
    assert "3 answer(s) part from ar's, 0 at a near-tie, 3 beyond the near-tie bound" in said
    table = divergence_table(r)
    assert "q1 hd:C@8 turn 1: token 2:" in table and "(float32): divergence" in table
    assert table in summary(r)
    # Kept in the raw file and the results file alike.
    assert [QuestionRuns.from_json(json.loads(json.dumps(a.to_json()))).divergences for a in seen] == [
        a.divergences for a in seen
    ]
    assert BenchResults.from_json(json.loads(json.dumps(r.to_json()))).divergences == r.divergences


def test_identical_results_hold_no_report(lm):
    r = run_benchmark(lm, [Question(1, "qa", ("hello world how",))], ["hd:C@8"], max_new_tokens=10)
    assert r.divergences == [] and "divergences" not in r.to_json() and divergence_table(r) == ""
    assert identical_line(r) == "identical to ar: every method on 100 % of questions"


def results_with(kinds: list[str], dtype: str) -> dict:
    """A results file's JSON where `hd` parts from `ar` on one question per kind."""
    share = {"identical_frac": 1 - len(kinds) / 4}
    methods = {n: {"overall": {**NEUTRAL, **share}, "tasks": {}} for n in ("ar", "hd")}
    methods["ar"]["overall"]["identical_frac"] = 1.0
    head = {"model": "m", "device": "cuda", "dtype": dtype, "machine": {}, "temperature": 0.0, "max_new_tokens": 8}
    head["questions"] = 4
    rows = [
        {"question_id": i, "method": "hd", "turn": 0, **Divergence(3, 7, 8, dtype, 0.1, 0.1, 1, 20.0, 0.3, k).to_json()}
        for i, k in enumerate(kinds)
    ]
    return {**head, "methods": methods, "divergences": rows}


NEUTRAL = {"speedup": 1.0, "mat": 1.0, "tokens_per_s": 1.0, "draft_ms": 0.0, "overhead_frac": 0.0, "tier_share": {}}


def test_the_report_tells_a_near_tie_from_a_bug():
    ties = identical_line(results_with([NEAR_TIE, NEAR_TIE], "float32"))
    assert ties.startswith("identical to ar: hd 50 % of questions; 2 answer(s) part from ar's, 2 at a near-tie")
    assert "WARNING" not in ties
    bug = identical_line(results_with([NEAR_TIE, DIVERGENCE], "float32"))
    assert bug.startswith("WARNING: not identical to ar in float32: hd 50 %") and "1 beyond the near-tie bound" in bug
    half = identical_line(results_with([NEAR_TIE, DIVERGENCE], "bfloat16"))
    assert "WARNING" not in half and "1 beyond the near-tie bound" in half and "bfloat16" in half
    assert "q1 hd turn 0: token 3: 7 vs 8, gap 0.1 (2nd), bound 0.3 (float32): divergence" in divergence_table(
        results_with([NEAR_TIE, DIVERGENCE], "float32")
    )
