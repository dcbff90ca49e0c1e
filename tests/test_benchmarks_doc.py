"""docs/benchmarks.md is what scripts/benchmarks_doc.py writes from the results committed under
benchmarks/results/ (each file's tables by its benchmark script, the prose from benchmarks/doc_template.md),
byte for byte, and it shows every file there: a changed result, a new one no section of the template
names, or a result filed under another machine's folder fails here. What docs/peers.md and
docs/benchmarks.md's prose say of the committed runs is checked here too (docs/serving.md's:
tests/test_docs_serving.py), each verdict computed with `hdlib.bench.intervals.verdict`."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from support.doc_claims import EPYC, XEON, cited, paired_mat_ratio, result, say, sealed_bench_sentences, section, words
from support.results_doc import DOC, RESULTS, ROOT, generator, linked_copy, rewrite

from benchmarks import bench_tables
from hdlib.bench.intervals import Comparison, Estimate, aa_margin, verdict


def test_the_committed_doc_is_what_make_benchmarks_doc_writes(tmp_path):
    out = tmp_path / "benchmarks.md"
    done = subprocess.run(
        [sys.executable, "-m", "scripts.benchmarks_doc", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert out.read_bytes() == DOC.read_bytes(), "docs/benchmarks.md is not the results' doc: run make benchmarks-doc"


def test_every_results_file_is_in_the_doc():
    doc = DOC.read_text(encoding="utf-8")
    files = sorted(p.relative_to(ROOT).as_posix() for p in RESULTS.rglob("*") if p.is_file())
    assert len(files) > 20
    assert [f for f in files if f"`{f}`" not in doc] == []


def test_a_changed_number_changes_the_doc(tmp_path):
    doc, copy = generator(), linked_copy(tmp_path)
    assert doc.render(copy) == DOC.read_text(encoding="utf-8")
    rewrite(copy / "epyc-avx2" / "accept_phase.json", lambda data: data["ms"].update(softmax=9.876))
    changed = doc.render(copy)
    assert "| softmax | 9.876 |" in changed and changed != DOC.read_text(encoding="utf-8")


def test_a_result_no_section_shows_is_an_error(tmp_path):
    doc, copy = generator(), linked_copy(tmp_path)
    (copy / "epyc-avx2" / "new_benchmark.json").write_text("{}", encoding="utf-8")
    with pytest.raises(SystemExit, match="new_benchmark.json"):
        doc.render(copy)


def test_a_result_in_another_machines_folder_is_an_error(tmp_path):
    doc, copy = generator(), linked_copy(tmp_path)
    (copy / "epyc-avx2" / "accept_phase.json").rename(copy / "xeon-amx" / "accept_phase.json")
    with pytest.raises(SystemExit, match="epyc-avx2"):
        doc.render(copy)


def test_machine_folders():
    machine_folder = generator().machine_folder
    epyc = {"cpu": "AMD EPYC", "vector_flags": ["avx", "avx2"], "threads": 2, "torch": "2.13.0+cpu"}
    assert machine_folder(epyc) == "epyc-avx2"
    assert machine_folder({**epyc, "vector_flags": ["avx", "avx2", "avx512f", "avx512bw"]}) == "epyc-avx512"
    xeon = {"cpu": "Intel(R) Xeon(R) Processor", "vector_flags": ["amx_tile", "avx512f", "avx2"]}
    assert machine_folder(xeon) == "xeon-amx"
    assert machine_folder({"cpu": "Apple M2", "vector_flags": []}) == "apple-m2"
    assert (
        machine_folder(None) == machine_folder("x86_64, 2 threads, cpu") == machine_folder({"cpus": 2}) == "unrecorded"
    )


def test_a_run_on_two_machines_gets_each_machines_table():
    epyc = {"cpu": "AMD EPYC", "vector_flags": ["avx", "avx2"], "threads": 2}

    def part(machine, ids, speedup, mat):
        methods = {"ar": {"speedup": 1.0, "mat": 1.0}, "hd": {"speedup": speedup, "mat": mat}}
        return {"machine": machine, "question_ids": ids, "methods": methods}

    split = [part(epyc, [1, 2, 3, 5], 2.5, 3.0), part(None, [4], 1.5, 2.25)]
    text = "\n".join(bench_tables.machine_tables({"by_machine": split}))
    assert "AMD EPYC, avx2, 2 threads: questions 1-3, 5; machine not recorded: questions 4" in text
    assert "| `hd` | 2.50x / 3.00 | 1.50x / 2.25 |" in text
    assert bench_tables.machine_tables({}) == []


def test_a_gpu_result_gets_its_tables(tmp_path):
    doc, copy = generator(), linked_copy(tmp_path)
    (copy / "gpu").mkdir()
    report = {
        "meta": {"device": "NVIDIA H200", "capability": "9.0", "torch": "2.13.0", "cuda": "12.8", "commit": "abc"},
        "lossless": {"float32_ok": True, "llama/float32": {"greedy_identical": "40/40", "sampled_identical": "12/12"}},
        "throughput": {
            "ar": {"tokens": 96, "tokens_per_s": 30.0, "mat": 1.0},
            "hd:C": {"tokens": 96, "tokens_per_s": 45.0, "mat": 2.0, "identical_to_ar": True},
            "speedup_over_ar": {"ar": 1.0, "hd:C": 1.5},
        },
    }
    (copy / "gpu" / "h200.json").write_text(json.dumps(report), encoding="utf-8")
    text = doc.render(copy)
    assert "### `benchmarks/results/gpu/h200.json`" in text and "device NVIDIA H200" in text
    assert "| `hd:C` | 45.0 | 2.00 | 1.50x | yes |" in text and "| llama/float32 | 40/40 | 12/12 |" in text


def test_draft_time_a_method_does_not_measure_is_shown_as_such():
    def method(draft_ms):
        overall = {"speedup": 1.5, "mat": 2.0, "tokens_per_s": 30.0, "draft_ms": draft_ms, "identical_frac": 1.0}
        return {"overall": overall, "tasks": {}}

    data = {"methods": {"ar": method(0.0), "hf-pld": method(0.0), "vllm-suffix": method(0.0), "hd": method(0.95)}}
    text = "\n".join(bench_tables.bench_tables(data))
    assert "| `hf-pld` | 1.50x | 2.00 | 30.0 | - | 100 % |" in text
    assert "| `vllm-suffix` | 1.50x | 2.00 | 30.0 | - | 100 % |" in text
    assert "| `hd` | 1.50x | 2.00 | 30.0 | 0.95 | 100 % |" in text
    assert "| `ar` | 1.50x | 2.00 | 30.0 | 0.00 | 100 % |" in text  # hdlib's loop: measured, and nothing drafted


def test_a_run_with_intervals_shows_them_and_says_on_par_only_within_five_percent():
    """A paired ratio whose interval holds 1 is on par only where it lies within ±5 %; else the run
    does not tell the two apart."""

    def est(value, low, high, n):
        return {"value": value, "low": low, "high": high, "n": n}

    def metrics(speedup, mat, n):
        spread = {"speedup": {**speedup, "n": n}, "mat": {**mat, "n": n}, "tokens_per_s": est(20.0, 18.0, 22.0, n)}
        return {"speedup": speedup["value"], "mat": mat["value"], "tokens_per_s": 20.0, "draft_ms": 0.1,
                "overhead_frac": 0.1, "identical_frac": 1.0, "tier_share": {}, "intervals": spread}  # fmt: skip

    def method(speedup, mat):
        return {"overall": metrics(speedup, mat, 6), "tasks": {"qa": metrics(speedup, mat, 3),
                                                               "rag": metrics(speedup, mat, 3)}}  # fmt: skip

    tasks = {"qa": est(1.1, 1.02, 1.2, 3), "rag": est(0.97, 0.9, 1.05, 3)}
    data = {
        "model": "m", "device": "cpu", "temperature": 0.0, "max_new_tokens": 8, "questions": 6, "split": "report",
        "repeats": 3, "order_seed": 0, "prior": {"source": "packaged", "digest": "abcd"},
        "methods": {"ar": method(est(1.0, 1.0, 1.0, 6), est(1.0, 1.0, 1.0, 6)),
                    "hd": method(est(1.85, 1.62, 2.10, 6), est(2.7, 2.5, 2.9, 6)),
                    "suffix": method(est(1.78, 1.5, 2.0, 6), est(2.27, 2.1, 2.4, 6))},
        "comparisons": [{"a": "hd", "b": "suffix", "overall": est(1.04, 0.98, 1.10, 6), "tasks": tasks},
                        {"a": "hd:C", "b": "suffix", "overall": est(1.01, 0.97, 1.04, 6), "tasks": tasks}],
    }  # fmt: skip
    text = "\n\n".join(bench_tables.tables(data))
    assert "6 questions (the report half), 3 repeats of every method on every question" in text
    assert "acceptance prior packaged (digest `abcd`), read-only" in text
    assert "| `hd` | 1.85x [1.62x, 2.10x] | 2.70 [2.50, 2.90] | 20.0 [18.0, 22.0] |" in text
    assert "| method | qa (3) | rag (3) |" in text
    per_task = "| 1.10x [1.02x, 1.20x] (3) | 0.97x [0.90x, 1.05x] (3) |"
    assert "| `hd` / `suffix` | 1.04x [0.98x, 1.10x] | 6 | not told apart " + per_task in text
    assert "| `hd:C` / `suffix` | 1.01x [0.97x, 1.04x] | 6 | on par " + per_task in text


def test_docs_peers_cites_the_report_half_run_with_its_intervals():
    """docs/peers.md's numbers of the report-half run are the recomputed file's, intervals included; its
    verdict on `hd` against SuffixDecoding (the peer with the highest speedup) is what the paired
    intervals allow, and the paired MAT ratio it quotes is computed from the raw records with issue
    57's bootstrap over questions."""
    text = words(ROOT / "docs" / "peers.md")
    data = result("report_half")
    shown = cited(section(text, "## The report half, repeated"))
    assert set(shown) == set(data["methods"]) - {"ar"}
    for name, numbers in shown.items():
        e = data["methods"][name]["overall"]["intervals"]
        want = [f"{e[k][f]:.2f}" for k in ("speedup", "mat") for f in ("value", "low", "high")]
        assert list(numbers) == want, name
    peers = {n: m["overall"]["speedup"] for n, m in data["methods"].items() if not n.startswith("hd") and n != "ar"}
    [compared] = [Comparison.from_json(c) for c in data["comparisons"]]
    assert (compared.a, compared.b) == ("hd", max(peers, key=peers.get)) == ("hd", "suffix")
    said = compared.verdict(aa_margin([compared]))
    assert said == "not told apart" and compared.overall.contains(1.0)
    assert compared.by_repeat is not None and not compared.by_repeat.has_interval  # three repeats
    sentence = (f"`hd` against SuffixDecoding, the peer with the highest speedup here, question by question: "
                f"{compared.overall.describe(suffix='x')} over {compared.overall.n} questions: {said}.")  # fmt: skip
    assert sentence in text
    low, high = 100 * (1 - compared.overall.low), 100 * (compared.overall.high - 1)
    assert f"reaches {low:.0f} % below it" in text and f"up to {low:.0f} % slower or up to {high:.0f} % faster" in text
    assert f"(from {low:.0f} % below 1 to {high:.0f} % above)" in text  # the dev run's note points here
    own = ", ".join(f"{v:.2f}" for v in compared.by_repeat.values[:-1]) + f" and {compared.by_repeat.values[-1]:.2f}"
    assert f"three repeats are too few for an interval over repeats; their own ratios were {own}" in text
    # the single runs (no interval) are said to tell nothing apart, not to be "within noise"
    assert "within this run's noise" not in text and "within its noise" not in text
    field = result("field")["methods"]
    assert not any("intervals" in m["overall"] for m in field.values())  # one run, no interval
    window = field["hd+window"]["overall"]["speedup"] / field["hd"]["overall"]["speedup"]
    assert f"ran at {window:.2f}x `hd`'s speed, which this run, without an interval, does not tell apart" in text
    mat = paired_mat_ratio(XEON / "report_half.raw.jsonl", "hd", "suffix")
    overall = {m: data["methods"][m]["overall"]["mat"] for m in ("hd", "suffix")}
    assert mat.value == pytest.approx(overall["hd"] / overall["suffix"])
    assert verdict(mat, above="higher", below="lower") == "higher"
    assert f"`hd`'s MAT over `suffix`'s is {mat.describe(suffix='x')}, its interval above 1" in text
    assert "overlap" not in text


def test_what_the_doc_says_of_the_engine_before_and_after_its_contracts_changed_holds():
    """docs/benchmarks.md: the engine after the change answers as the one before, step for step at the
    fixed budget; its tokens per second are within what the harness shows between identical engines
    at the auto budget; its own time per step at the auto budget as said; the numbers as committed."""
    runs = {
        name: json.loads((RESULTS / "xeon-amx" / f"step_overhead_contracts_{name}.json").read_text())
        for name in ("fixed16", "auto", "same")
    }
    for run in runs.values():
        assert run["identical_answers"] == run["questions"] == 12 and run["settings"]["max_new_tokens"] == 256
    assert runs["fixed16"]["identical_steps"] == 12 and runs["fixed16"]["settings"]["budget"] == 16
    ratio = {name: run["tokens_per_s_ratio_this_over_base"] for name, run in runs.items()}
    assert ratio["same"]["low"] > 1 and ratio["auto"]["high"] <= ratio["same"]["high"]  # the harness's own spread
    assert ratio["fixed16"]["low"] >= 1  # not slower
    doc = words(DOC)
    same = ratio["same"]
    harness = f"{100 * (same['value'] - 1):.0f} % [{100 * (same['low'] - 1):.0f} %, {100 * (same['high'] - 1):.0f} %]"
    assert f"the harness itself puts the second worker ahead by {harness}" in doc
    assert f"the auto budget ({say(ratio['auto'])}) the ratio is no larger than that lead" in doc
    assert f"the fixed budget ({say(ratio['fixed16'])}) it exceeds that lead" in doc
    words_of = {n: verdict(Estimate.from_json(r)) for n, r in ratio.items()}  # the rule's words, before the lead
    assert words_of == {"fixed16": "faster", "auto": "faster", "same": "faster"}
    assert ratio["auto"]["high"] <= ratio["same"]["high"] and ratio["fixed16"]["low"] > ratio["same"]["high"]
    auto = runs["auto"]["results"]
    own = auto["this"]["overhead_ms_per_step"] / auto["base"]["overhead_ms_per_step"]
    said = f"{100 * (own - 1):.0f} % more ({auto['this']['overhead_ms_per_step']:.2f} against "
    assert said + f"{auto['base']['overhead_ms_per_step']:.2f} ms" in doc


def test_docs_peers_gives_the_sealed_bench_as_its_plan_reads_it():
    """docs/peers.md's section on issue 57's sealed bench says what the files say, each sentence computed
    from them (`support.doc_claims.sealed_bench_sentences`): the plan's verdict, the A/A yardstick,
    the reading after the review and the check without the disturbed records, per task."""
    if not (EPYC / "sealed_bench.json").exists():
        pytest.skip("the sealed bench has not been committed yet")
    text = section(words(ROOT / "docs" / "peers.md"), "## The sealed set")
    for sentence in sealed_bench_sentences():
        assert sentence in text, sentence


def test_what_docs_peers_says_of_the_sealed_bench_restart_holds():
    """The restart began SuffixDecoding's table afresh in repeat 2 (records 59 on): its step counts
    differ from its four other, identical, repeats there alone, by as many steps as the page says."""
    import json
    from collections import Counter

    raw = EPYC / "sealed_bench.raw.jsonl"
    if not raw.exists():
        pytest.skip("the sealed bench has not been committed yet")
    lines = raw.read_text(encoding="utf-8").splitlines()
    questions = json.loads(lines[0])["settings"]["question_ids"]
    steps: dict[int, list[int]] = {}
    for record in map(json.loads, lines[1:]):
        steps.setdefault(record["question_id"], []).append(sum(t["steps"] for t in record["runs"]["suffix"]))
    differ, extra = Counter(), 0
    for q in questions:
        others = {s for r, s in enumerate(steps[q]) if r != 1}
        assert len(others) == 1, q  # repeats 1, 3, 4 and 5 identical
        if steps[q][1] != next(iter(others)):
            differ[q] += 1
            extra += steps[q][1] - next(iter(others))
    text = section(words(ROOT / "docs" / "peers.md"), "## The sealed set")
    assert f"({extra} more steps over {len(differ)} questions)" in text
