"""The served benchmark's design and its numbers (benchmarks/served_load.py), on answers made up here:
the methods' order balanced over repeats, which questions each repeat and level asks, a question's
repeats as one cluster, the three paired ratios, the margin an A/A arm sets, the fillers that load a
server without being measured, and a run interrupted and resumed. (tests/test_vllm.py runs it
against real servers.)"""

from __future__ import annotations

import json
import sys
from collections import Counter
from datetime import datetime
from itertools import pairwise
from types import SimpleNamespace

import pytest

from benchmarks.served_load import compare, margins, orders, question_slices, rates, summarize, tables, williams


@pytest.mark.parametrize("n", [2, 3, 4, 5])
def test_the_williams_design_puts_every_method_in_every_place_and_after_every_other_equally_often(n):
    rows = williams(n)
    assert len(rows) == (n if n % 2 == 0 else 2 * n) and all(sorted(r) == list(range(n)) for r in rows)
    places = Counter((t, i) for r in rows for i, t in enumerate(r))
    assert len(set(places.values())) == 1 and len(places) == n * n
    follows = Counter(p for r in rows for p in pairwise(r))
    assert len(follows) == n * (n - 1) and len(set(follows.values())) == 1


def test_three_methods_take_six_repeats_to_balance_and_the_seed_only_relabels():
    methods = ["vllm", "vllm-suffix", "vllm-hd"]
    design = orders(methods, 0)
    assert len(design) == 6 and all(sorted(r) == sorted(methods) for r in design)
    assert Counter(r[0] for r in design) == Counter({m: 2 for m in methods})
    other = orders(methods, 1)  # the letters given to the methods otherwise: the same balance, in other rows
    assert other != design and Counter(r[0] for r in other) == Counter({m: 2 for m in methods})
    assert orders(methods, 0) == design  # a string seed: the same on every machine


def test_each_repeat_asks_its_own_questions_the_same_ones_or_with_fresh_servers_from_its_first():
    questions = [SimpleNamespace(question_id=i, task="ab"[i % 2]) for i in range(20)]
    own = question_slices(questions, [1, 4], [2, 3], repeats=2)
    ids = {k: [q.question_id for q in v] for k, v in own.items()}
    assert ids == {(0, 1): [0, 1], (0, 4): [2, 3, 4], (1, 1): [5, 6], (1, 4): [7, 8, 9]}  # each asked once
    same = question_slices(questions, [1, 4], [2, 3], repeats=3, same=True)
    assert all(same[r, c] == own[0, c] for r in range(3) for c in (1, 4))
    fresh = question_slices(questions, [1, 4], [2, 3], repeats=2, same=True, fresh=True)
    assert [q.question_id for q in fresh[1, 4]] == [0, 1, 2] and fresh[1, 1] == fresh[0, 1] == fresh[0, 4][:2]
    short = question_slices(questions[:4], [64], [6], repeats=1, same=True, fresh=True)
    assert len(short[0, 64]) == 4  # fewer than asked: the run tops it up with fillers


def answers(rates_by_question: dict[int, float], repeat: int, filler: int | None = None) -> list[dict]:
    rows = [{"question_id": q, "task": "qa", "repeat": repeat, "tokens": 10, "latency_s": 10 / rate, "ttft_s": 0.1,
             "tpot_s": 0.01, "digest": "d", "error": ""} for q, rate in rates_by_question.items()]  # fmt: skip
    return rows + ([{**rows[0], "question_id": filler, "latency_s": 100.0, "filler": True}] if filler else [])


def level(per_repeat: list[dict[int, float]], filler: int | None = None, slow: float = 1.0) -> dict:
    return {"repeats": [{"repeat": r, "tokens": 10 * len(q), "accepted": 5 * len(q), "duration_s": slow * (10 + r),
                         "answers": answers(q, r, filler)} for r, q in enumerate(per_repeat)]}  # fmt: skip


def test_a_questions_repeats_are_one_cluster_and_a_repeats_questions_one_value():
    """Four questions asked in five repeats: by question they are four (too few for an interval),
    by repeat five (a t-interval); a repeat that moves as a whole widens only the second."""
    plain = level([{q: 1.0 for q in range(4)} for _ in range(5)])
    drift = [1.5, 0.95, 1.45, 0.9, 1.2]
    drifting = level([{q: d * (1 + 0.01 * q) for q in range(4)} for d in drift])
    [cmp] = compare({"vllm": {"8": plain}, "vllm-hd": {"8": drifting}}, [("vllm-hd", "vllm")], [8])
    by_question, by_repeat = cmp["levels"]["8"], cmp["by_repeat"]["8"]
    assert by_question["n"] == 4 and by_question["low"] is None and len(by_question["values"]) == 4
    assert by_repeat["n"] == 5 and by_repeat["over"] == "repeats" and by_repeat["low"] < 1 < by_repeat["high"]
    assert by_repeat["value"] == pytest.approx(by_question["value"])


def test_the_throughput_ratio_weighs_tokens_where_the_paired_ratio_weighs_requests():
    """A method that speeds every request but the last (whose latency is the level's wall time) is
    faster by the paired ratio and on par by throughput; the table prints both, each with its verdict."""

    def run(latencies: list[float], r: int) -> dict:
        answered = [{"question_id": q, "repeat": r, "tokens": 10, "latency_s": t} for q, t in enumerate(latencies)]
        return {"repeat": r, "tokens": 10 * len(latencies), "duration_s": max(latencies), "answers": answered}

    plain = [4.0, 6.0, 8.0, 10.0, 5.0, 7.0]
    quick = [2.0, 3.0, 4.0, 10.0, 2.5, 3.5]
    runs = {"vllm": {"4": {"repeats": [run([t * (1 + r / 10) for t in plain], r) for r in range(5)]}},
            "vllm-hd": {"4": {"repeats": [run([t * (1 + r / 10) for t in quick], r) for r in range(5)]}}}  # fmt: skip
    [cmp] = compare(runs, [("vllm-hd", "vllm")], [4])
    assert cmp["levels"]["4"]["low"] > 1 and cmp["by_repeat"]["4"]["low"] > 1
    assert cmp["throughput"]["4"]["value"] == pytest.approx(1.0) and cmp["throughput"]["4"]["n"] == 5
    summary = {m: {"4": {"tokens_per_s": {"value": 1.0, "low": 1.0, "high": 1.0, "n": 5}, "tpot_ms_p50": 1.0,
                         "tpot_ms_p99": 1.0, "ttft_ms_p50": 1.0, "mat": {"value": 1.0, "low": 1.0, "high": 1.0, "n": 5},
                         "requests": 6, "identical_frac": None}} for m in runs}  # fmt: skip
    data = {"concurrency": [4], "summary": summary, "comparisons": [cmp], "requests": {"4": 6}, "model": "m",
            "server_args": [], "repeats": 5, "questions": 6, "max_new_tokens": 8, "runs": runs}  # fmt: skip
    printed = "\n".join(tables(data))
    assert "| verdict | questions x repeats | verdict on both | throughput | verdict on throughput |" in printed
    row = [cell.strip() for cell in next(line for line in printed.splitlines()
                                         if line.startswith("| `vllm-hd` / `vllm` | 4 |")).split("|")]  # fmt: skip
    assert (row[-6], row[-4], row[-2]) == ("faster", "faster", "on par")


def test_an_aa_arm_sets_the_margin_where_it_spread_further_than_5_percent():
    noisy = [1.0, 1.12, 0.9, 1.1, 0.92]
    runs = {"vllm": {"1": level([{q: 1.0 for q in range(8)} for _ in range(5)])},
            "vllm-hd": {"1": level([{q: 1.5 for q in range(8)} for _ in range(5)])},
            "vllm-hd#2": {"1": level([{q: 1.5 * n for q in range(8)} for n in noisy])}}  # fmt: skip
    pairs = [("vllm-hd", "vllm"), ("vllm-hd#2", "vllm-hd")]
    data = {"concurrency": [1], "comparisons": compare(runs, pairs, [1])}
    aa = data["comparisons"][1]["by_repeat"]["1"]
    assert margins(data)["1"] == pytest.approx(max(aa["high"] - 1, 1 / aa["low"] - 1)) and margins(data)["1"] > 0.05
    data["comparisons"] = data["comparisons"][:1]
    assert margins(data) == {"1": 0.05}


def test_fillers_load_the_server_but_no_per_question_measure_reads_them():
    lvl = level([{1: 2.0, 2: 2.0}], filler=99)
    assert set(rates(lvl)) == {(1, 0), (2, 0)}
    s = summarize(lvl, lvl)
    assert s["requests"] == 2 and s["identical_frac"] == 1.0 and s["tokens_per_s"]["value"] == pytest.approx(2.0)


def fake_run(monkeypatch, tmp_path, stop_after: int | None = None, changed: dict | None = None) -> list[tuple]:
    """Stand-ins for what main() starts (the model, the servers, vLLM's load generator): every request
    answers its question's id as text, in a time set by its question, its method and its repeat. The
    servers stop the run (Ctrl-C) when `stop_after` blocks have been served."""
    import contextlib

    import benchmarks.served_load as served_load

    questions = [SimpleNamespace(question_id=i, task="qa", turns=[f"q{i}"]) for i in range(8)]
    served: list[tuple[int, str, int]] = []
    blocks = []

    @contextlib.contextmanager
    def servers(source, order, logs, args):
        if stop_after is not None and len(blocks) == stop_after:
            raise KeyboardInterrupt
        blocks.append(list(order))
        yield {m: f"http://127.0.0.1/{m}" for m in order}

    def bench_serve(url, method, source, prompts, c, max_new_tokens, folder):
        served.append((len(blocks), url.rsplit("/", 1)[1], c))
        ids = [int(p[1:]) for p in prompts]
        speed = 1.0 + 0.1 * ids[0] + (0.2 if "hd" in url else 0.0)
        return {"duration": 10.0, "total_output_tokens": 10 * len(ids), "output_lens": [10] * len(ids),
                "latencies": [10 / (speed + i / 100) for i in ids], "ttfts": [0.1] * len(ids),
                "generated_texts": [str(i) for i in ids], "errors": [""] * len(ids)}  # fmt: skip

    monkeypatch.setattr(served_load, "load", lambda args: (questions, SimpleNamespace(source="model")))
    monkeypatch.setattr(served_load, "vllm_servers", servers)
    monkeypatch.setattr(served_load, "bench_serve", bench_serve)
    monkeypatch.setattr(served_load, "warm_up", lambda url, method: None)
    made = {"commit": "c0ffee", "clean": True, "host": f"start {stop_after}"} | (changed or {})
    monkeypatch.setattr(served_load, "provenance", lambda serving: made)
    return served


def run_main(monkeypatch, argv: list[str]) -> None:
    import benchmarks.served_load as served_load

    monkeypatch.setattr(sys, "argv", ["served_load", *argv])
    served_load.main()


def test_an_interrupted_run_resumed_serves_only_what_it_had_not_and_comes_out_as_one_uninterrupted(
    monkeypatch, tmp_path, capsys
):
    """A run stopped after its third block (of 2 repeats x 2 levels) keeps three; the same command with
    --resume serves the fourth alone, and its results are an uninterrupted run's but for the starts
    each block names. Without --resume, a raw file with blocks is refused; with other settings too, and
    from another checkout or one with changes."""
    argv = ["--questions", "unused", "--methods", "vllm,vllm-hd", "--concurrency", "1,4", "--requests", "2,4",
            "--repeats", "2", "--same-questions", "--together", "--fresh-per-level"]  # fmt: skip
    whole, parted = tmp_path / "whole.json", tmp_path / "parted.json"
    fake_run(monkeypatch, tmp_path)
    run_main(monkeypatch, [*argv, "--out", str(whole)])
    fake_run(monkeypatch, tmp_path, stop_after=3)
    with pytest.raises(SystemExit) as stopped:
        run_main(monkeypatch, [*argv, "--out", str(parted)])
    assert stopped.value.code == 130 and "continue with: python -m benchmarks.served_load" in capsys.readouterr().err
    assert not parted.exists() and len(parted.with_name("parted.raw.jsonl").read_text().splitlines()) == 1 + 3
    with pytest.raises(SystemExit):  # not told to resume: the three blocks are not overwritten
        run_main(monkeypatch, [*argv, "--out", str(parted)])
    with pytest.raises(SystemExit):
        run_main(monkeypatch, [*argv, "--repeats", "4", "--out", str(parted), "--resume"])
    assert "other settings" in capsys.readouterr().err
    for other in ({"commit": "decade"}, {"clean": False}):  # another checkout, or this one with changes
        fake_run(monkeypatch, tmp_path, changed=other)
        with pytest.raises(SystemExit):
            run_main(monkeypatch, [*argv, "--out", str(parted), "--resume"])
        assert "continue it from that one" in capsys.readouterr().err
    served = fake_run(monkeypatch, tmp_path, stop_after=None)
    run_main(monkeypatch, [*argv, "--out", str(parted), "--resume"])
    assert sorted((m, c) for _, m, c in served) == [("vllm", 4), ("vllm-hd", 4)]
    one, two = (json.loads(p.read_text()) for p in (whole, parted))
    began = two.pop("starts")
    assert [s["blocks"] for s in began] == [[[0, [1]], [0, [4]], [1, [1]]], [[1, [4]]]]
    assert all(datetime.fromisoformat(s["provenance"]["started"]).tzinfo for s in began)  # each start's time, UTC
    for data in (one, two):
        data.pop("command"), data.pop("provenance")
    assert one == two
