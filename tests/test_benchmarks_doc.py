"""docs/benchmarks.md is what scripts/benchmarks_doc.py writes from the results committed under
benchmarks/results/ (each file's tables by its benchmark script, the prose from benchmarks/doc_template.md),
byte for byte, and it shows every file there: a changed result, a new one no section of the template
names, or a result filed under another machine's folder fails here. So do docs/serving.md's tables,
typed by hand, where they are not the committed runs' numbers."""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from itertools import takewhile
from pathlib import Path
from types import ModuleType

import pytest

from benchmarks import bench_tables
from benchmarks.bench_tables import interval
from benchmarks.markdown import f1, f2

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
DOC = ROOT / "docs" / "benchmarks.md"


def generator() -> ModuleType:
    """scripts/benchmarks_doc.py, as `python -m scripts.benchmarks_doc` imports it from the root."""
    return importlib.import_module("scripts.benchmarks_doc")


def linked_copy(tmp_path: Path) -> Path:
    """benchmarks/results/ as links to the committed files (a file to change is replaced by a copy)."""
    copy = tmp_path / "results"
    shutil.copytree(RESULTS, copy, copy_function=os.symlink)
    return copy


def rewrite(path: Path, change) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    change(data)
    path.unlink()
    path.write_text(json.dumps(data, indent=1), encoding="utf-8")


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


def table_rows(text: str, first: str) -> dict[str, list[str]]:
    """The rows of the markdown table whose header begins with `first`, by their first cell."""
    lines = takewhile(lambda line: line.startswith("|"), text[text.index(f"| {first} |") :].splitlines()[2:])
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]
    return {row[0]: row[1:] for row in rows}


def test_docs_serving_tables_are_the_committed_vllm_runs():
    """docs/serving.md's two measured tables (batch 1; served under load) are typed by hand: each number is
    the committed run's, rounded as printed."""
    text = (ROOT / "docs" / "serving.md").read_text(encoding="utf-8")
    batch = json.loads((RESULTS / "xeon-amx" / "vllm_hd-vllm.json").read_text())["methods"]
    plain = batch["vllm"]["overall"]["tokens_per_s"]
    rows = table_rows(text, "method")
    assert len(rows) == 4
    for cell, (mat, tokens_per_s, ratio) in rows.items():
        r = batch[cell.split()[0].strip("`")]["overall"]
        assert [mat, tokens_per_s, ratio] == [f"{r['mat']:.2f}", f"{r['tokens_per_s']:.1f}",
                                              f"{r['tokens_per_s'] / plain:.2f}x"], cell  # fmt: skip
    served = json.loads((RESULTS / "xeon-amx" / "served_load.json").read_text())
    prose = served_table_is(text, text.index("### Served, under load"), served)
    for m, name in [("vllm", "plain"), ("vllm-suffix", "`vllm-suffix`"), ("vllm-hd", "`vllm-hd`")]:
        assert f"{served['summary'][m]['16']['ttft_ms_p50'] / 1e3:.1f} s for {name}" in prose, m
    report = json.loads((RESULTS / "xeon-amx" / "served_load_report.json").read_text())
    prose = served_table_is(text, text.index("### Served at concurrency 1 to 64"), report)
    at_64 = {m: report["summary"][m]["64"] for m in ("vllm", "vllm-suffix", "vllm-hd")}
    hd, plain = at_64["vllm-hd"]["tpot_ms_p50"], at_64["vllm"]["tpot_ms_p50"]
    assert f"{hd:.0f} ms with `vllm-hd`, against {plain:.0f} ms plain" in prose
    for m in ("vllm-hd", "vllm-suffix"):  # its step against plain's: time per token times tokens a step
        step = at_64[m]["tpot_ms_p50"] * at_64[m]["mat"]["value"] / at_64["vllm"]["tpot_ms_p50"]
        assert f"{step:.2f} times plain's, for {at_64[m]['mat']['value']:.2f}" in prose, m


def served_table_is(text: str, start: int, served: dict) -> str:
    """The served run's table that follows `start` in docs/serving.md is `served`'s, and every paired
    comparison is said in the prose after it, which is returned."""
    start = text.index("| concurrency | method |", start)
    lines = takewhile(lambda line: line.startswith("|"), text[start:].splitlines()[2:])
    printed = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]
    expected = [
        [
            str(c),
            f"`{m}`" + (" (plain)" if m == "vllm" else ""),
            interval(r["tokens_per_s"], f1),
            interval(r["mat"], f2),
        ]
        for c in served["concurrency"]
        for m, levels in served["summary"].items()
        for r in [levels[str(c)]]
    ]
    assert printed == expected
    assert all(r["identical_frac"] in (None, 1.0) for levels in served["summary"].values() for r in levels.values())
    end = text.find("\n### ", start)
    prose = " ".join(text[start : end if end > 0 else len(text)].split())
    for cmp in served["comparisons"]:
        for c, e in cmp["levels"].items():
            said = f"{e['value']:.2f}x [{e['low']:.2f}, {e['high']:.2f}] at concurrency {c}"
            assert said in prose, (cmp["a"], cmp["b"], c)
    return prose


def test_a_run_with_intervals_shows_them_and_says_on_par_where_a_ratio_holds_one():
    def est(value, low, high, n):
        return {"value": value, "low": low, "high": high, "n": n}

    def metrics(speedup, mat, n):
        spread = {"speedup": {**speedup, "n": n}, "mat": {**mat, "n": n}, "tokens_per_s": est(20.0, 18.0, 22.0, n)}
        return {"speedup": speedup["value"], "mat": mat["value"], "tokens_per_s": 20.0, "draft_ms": 0.1,
                "overhead_frac": 0.1, "identical_frac": 1.0, "tier_share": {}, "intervals": spread}  # fmt: skip

    def method(speedup, mat):
        return {"overall": metrics(speedup, mat, 6), "tasks": {"qa": metrics(speedup, mat, 3),
                                                               "rag": metrics(speedup, mat, 3)}}  # fmt: skip

    data = {
        "model": "m", "device": "cpu", "temperature": 0.0, "max_new_tokens": 8, "questions": 6, "split": "report",
        "repeats": 3, "order_seed": 0, "prior": {"source": "packaged", "digest": "abcd"},
        "methods": {"ar": method(est(1.0, 1.0, 1.0, 6), est(1.0, 1.0, 1.0, 6)),
                    "hd": method(est(1.85, 1.62, 2.10, 6), est(2.7, 2.5, 2.9, 6)),
                    "suffix": method(est(1.78, 1.5, 2.0, 6), est(2.27, 2.1, 2.4, 6))},
        "comparisons": [{"a": "hd", "b": "suffix", "overall": est(1.04, 0.98, 1.10, 6),
                         "tasks": {"qa": est(1.1, 1.02, 1.2, 3), "rag": est(0.97, 0.9, 1.05, 3)}}],
    }  # fmt: skip
    text = "\n\n".join(bench_tables.tables(data))
    assert "6 questions (the report half), 3 repeats of every method on every question" in text
    assert "acceptance prior packaged (digest `abcd`), read-only" in text
    assert "| `hd` | 1.85x [1.62x, 2.10x] | 2.70 [2.50, 2.90] | 20.0 [18.0, 22.0] |" in text
    assert "| method | qa (3) | rag (3) |" in text
    compared = "| `hd` / `suffix` | 1.04x [0.98x, 1.10x] | 6 | on par | 1.10x [1.02x, 1.20x] (3) | 0.97x"
    assert compared + " [0.90x, 1.05x] (3) |" in text


def cited(text: str) -> dict[str, tuple[str, ...]]:
    """`name` V.VVx [L, H] (MAT M [L, H]) as a sentence of the docs cites a method."""
    number = r"(\d+\.\d\d)"
    found = re.findall(rf"`([^`]+)` {number}x \[{number}, {number}\] \(MAT {number} \[{number}, {number}\]\)", text)
    return {name: rest for name, *rest in found}


def test_docs_peers_cites_the_report_half_run_with_its_intervals():
    """docs/peers.md's numbers of the report-half run are the committed file's, intervals included,
    and its verdict on `hd` against the fastest peer is what the paired interval allows."""
    text = " ".join((ROOT / "docs" / "peers.md").read_text(encoding="utf-8").split())  # lines joined
    data = json.loads((RESULTS / "xeon-amx" / "report_half.json").read_text())
    shown = cited(text)
    assert set(shown) == set(data["methods"]) - {"ar"}
    for name, numbers in shown.items():
        e = data["methods"][name]["overall"]["intervals"]
        want = [f"{e[k][f]:.2f}" for k in ("speedup", "mat") for f in ("value", "low", "high")]
        assert list(numbers) == want, name
    [compared] = data["comparisons"]
    e = compared["overall"]
    verdict = "on par" if e["low"] <= 1 <= e["high"] else ("faster" if e["low"] > 1 else "slower")
    sentence = (f"`{compared['a']}` against the fastest peer, SuffixDecoding, question by question: {e['value']:.2f}x "
                f"[{e['low']:.2f}, {e['high']:.2f}] over {e['n']} questions: {verdict}.")  # fmt: skip
    assert compared["b"] == "suffix" and sentence in text


def test_docs_serving_cites_the_report_half_vllm_run_with_its_intervals():
    """docs/serving.md's numbers of vLLM's pass on the report half are the committed file's, and each
    of its paired comparisons is said with the verdict its interval allows."""
    text = " ".join((ROOT / "docs" / "serving.md").read_text(encoding="utf-8").split())
    data = json.loads((RESULTS / "xeon-amx" / "report_half-vllm.json").read_text())
    shown = cited(text)
    assert set(shown) == set(data["methods"]) - {"ar"}
    for name, numbers in shown.items():
        e = data["methods"][name]["overall"]["intervals"]
        assert list(numbers) == [f"{e[k][f]:.2f}" for k in ("speedup", "mat") for f in ("value", "low", "high")], name
    assert len(data["comparisons"]) == 2
    for c in data["comparisons"]:
        e = c["overall"]
        verdict = "on par" if e["low"] <= 1 <= e["high"] else ("faster" if e["low"] > 1 else "slower")
        ratio = f"{e['value']:.2f}x [{e['low']:.2f}, {e['high']:.2f}]"
        said = f"`{c['a']}` against `{c['b']}`, question by question: {ratio}"
        assert f"{said} over {e['n']} questions: {verdict}" in text, said


def test_the_served_runs_turn_the_methods_order_so_that_none_always_runs_first():
    from benchmarks.served_load import turn_order

    methods = ["vllm", "vllm-suffix", "vllm-hd"]
    orders = [turn_order(methods, 0, r) for r in range(3)]
    assert all(sorted(order) == sorted(methods) for order in orders)
    assert all(sorted(order[place] for order in orders) == sorted(methods) for place in range(3))
    assert turn_order(methods, 0, 3) == orders[0]  # round again
