"""What the notebooks say of committed runs and of the theory, checked: a sentence a teacher reads
aloud holds for the files and the engine it names (notebook 04's claims: tests/test_viz_paper_tasks.py and
tests/test_viz_paper_temperature.py)."""

from __future__ import annotations

import dataclasses
import importlib
import re
from pathlib import Path

import nbformat

from hdlib.bench.divergence import Divergence

ROOT = Path(__file__).resolve().parents[1]


def text_of(stem: str) -> str:
    """The notebook's cells, code and markdown, as one line of words (line breaks do not matter)."""
    nb = nbformat.read(ROOT / "notebooks" / f"{stem}.ipynb", as_version=4)
    return " ".join(" ".join(c.source for c in nb.cells).split())


def notebook_texts() -> dict[str, str]:
    return {path.stem: text_of(path.stem) for path in sorted((ROOT / "notebooks").glob("*.ipynb"))}


def test_no_notebook_cites_a_result_that_records_no_command():
    """A results file that records no command is not reported (docs/benchmarks.md lists it apart): what
    made its numbers cannot be said, so no notebook cites it."""
    doc = importlib.import_module("scripts.benchmarks_doc")
    results = ROOT / "benchmarks" / "results"
    files = sorted(p.relative_to(results).as_posix() for p in results.rglob("*") if p.is_file())
    commandless = doc.commandless(results, files)
    assert "xeon-amx/specbench_bf16.json" in commandless and "epyc-avx512/orders_at_16.json" in commandless
    for stem, text in notebook_texts().items():
        for rel in commandless:
            assert rel not in text and rel.removesuffix(".json") not in text, (stem, rel)


def test_what_notebook_01_says_of_bfloat16_holds():
    """01 says what can happen in bfloat16 and how the bench measures it, and cites no count: the one
    bfloat16 run committed records no command. The bench does give what the sentence says it gives:
    each answer's identical flag and, for an answer that parts, the first differing token and `ar`'s
    two best logits there, apart (how near the tie was)."""
    text = text_of("01_speculative_decoding")
    assert "in bfloat16, the GPU default, they can part" in text
    assert "`hdlib bench --dtype bfloat16` gives the share of answers identical to plain decoding's" in text
    assert not re.search(r"identical to plain decoding's for only \d+ of the \d+", text)
    recorded = {f.name for f in dataclasses.fields(Divergence)}  # what the bench records of a parting
    assert {"position", "expected", "got", "gap", "kind"} <= recorded


def test_what_notebook_04_says_of_single_runs_gives_no_verdict():
    """04's comparisons of one run without intervals (the field run, the order ablation) give no
    verdict, by issue 57's rule: `hd-paper`'s speed there is a number (the field run's own), its
    verdict the report half's, whose whole interval lies below 1; the order ablation's "beats" is
    said to compare one run's numbers; the mended and merged drafter's speed tells nothing apart."""
    import json

    from hdlib.bench.intervals import Estimate, verdict

    text = text_of("04_order_ablation")
    results = ROOT / "benchmarks" / "results" / "xeon-amx"
    field = json.loads((results / "field.json").read_text(encoding="utf-8"))
    assert "intervals" not in field["methods"]["hd-paper"]["overall"]  # one run: no interval
    assert f"in this one run it made {field['methods']['hd-paper']['overall']['speedup']:.2f}x `ar`'s speed" in text
    assert "a number without an interval, which alone allows no verdict" in text
    repeated = json.loads((results / "report_half.json").read_text(encoding="utf-8"))
    e = Estimate.from_json(repeated["methods"]["hd-paper"]["overall"]["intervals"]["speedup"])
    assert verdict(e) == "slower"
    assert (
        f"is slower than plain decoding in the repeated run on the report half (docs/peers.md: {e.describe(suffix='x')}"
        in text
    )
    assert "still slower than plain decoding, here" not in text
    assert "it compares this run's numbers, not a verdict" in text and "beats" in text  # the code cell's word, read
    assert "lost in the noise" not in text and "Neither that run (one run, no interval) nor two questions" in text


def test_what_notebook_01_says_of_a_cpu_pass_holds():
    """01's figure fold: on the project's two 2-core CPUs a pass over 32 tokens took between 1.9 and
    3.0 times as long as one over a single token (every configuration each cpu_forward.json measured)."""
    import json

    ratios = []
    for path in sorted((ROOT / "benchmarks" / "results").glob("*/cpu_forward.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        at = data["k"].index(32)
        assert data["machine"]["threads"] == 2, path
        ratios += [ms[at] / ms[0] for ms in data["forward_ms"].values()]
    assert len(ratios) >= 6 and (f"{min(ratios):.1f}", f"{max(ratios):.1f}") == ("1.9", "3.0")
    said = text_of("01_speculative_decoding")
    assert "a pass over 32 tokens took between 1.9 and 3.0 times as long as one over a single token" in said
    assert "bound by arithmetic" not in said
