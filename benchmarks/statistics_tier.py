"""Statistics tier: its database, lookup latency and draft quality, and `draftretriever` on the same corpus.

    python -m benchmarks.statistics_tier [--build] [--compare-sorts] [--contexts 2000]
        [--out benchmarks/results/<machine>/statistics_tier.json]

Database: the default one for the packaged model (built first when missing; `--build` rebuilds it in
a child process, whose wall time and peak memory are measured). Contexts, two kinds:
- `heldout`: windows of held-out ShareGPT conversations written through the chat template, cut at a
  random position inside an assistant answer (the corpus never saw these conversations);
- `model`: every position of the model's own greedy answers to the project prompts and to held-out
  ShareGPT prompts: the contexts the tier meets at decode time. The answers are generated once and
  kept in the output JSON; a rerun reuses them.
Per lookup: wall time (median, p99) and thread CPU time (the same without the other processes of
a shared machine), and the tokens a greedy verifier would accept from the drafts alone (the longest
draft prefix equal to what follows): the tier's share of a decoding step, without decoding.

Backends: hdlib's numpy suffix array, and the PyPI package `draftretriever` (0.1.1: ADED's trigram
table searched by Monte Carlo tree search; not REST's suffix array) built from the same documents in
a child process. Variants of the tier's settings show what each one buys.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import results_path, write_results
from benchmarks.markdown import count, f1, f2, f3, pct, table

ROOT = Path(__file__).resolve().parents[1]
BUDGETS = (8, 16, 32)
TRUTH = 16  # tokens of what follows, to score drafts against
Case = tuple[list[int], list[int]]  # (context, what follows)


def heldout_cases(lm, n: int, seed: int = 0) -> list[Case]:
    from hdlib.databases.corpus import ROLES
    from hdlib.databases.sharegpt import ShareGPTReader

    tok, answers = lm.tokenizer, []
    for conversation in ShareGPTReader():
        if conversation.split != "heldout" or not conversation.turns:
            continue
        messages = [{"role": ROLES.get(who, "assistant"), "content": text} for who, text in conversation.turns]
        for i in range(1, len(messages)):
            if messages[i]["role"] == "assistant":
                prompt = lm.encode_prompt(messages[:i])
                whole = tok.backend_tokenizer.encode(
                    tok.apply_chat_template(messages[: i + 1], tokenize=False), add_special_tokens=False
                ).ids
                if len(whole) > len(prompt) + 1:
                    answers.append((whole, len(prompt)))
                break
    rng = random.Random(seed)
    picks = []
    for _ in range(n):
        a = rng.randrange(len(answers))
        ids, start = answers[a]
        picks.append((a, rng.randrange(start, len(ids) - 1)))
    # In the order of the text, as decoding meets it: a backend that learns from its queries
    # (draftretriever) then never sees a later part of a conversation before an earlier one.
    return [(answers[a][0][:p], answers[a][0][p : p + TRUTH]) for a, p in sorted(picks)]


def model_answers(lm, n_heldout: int, max_new: int) -> list[dict]:
    from hdlib import generate
    from hdlib.databases.sharegpt import prompts

    rows = [json.loads(line) for line in (ROOT / "data/prompts/prompts.jsonl").read_text().splitlines()]
    chosen = [r["turns"][0] for r in rows] + [p for p in prompts("heldout", limit=5 * n_heldout) if len(p) < 1500][
        :n_heldout
    ]
    out = []
    for prompt in chosen:
        result = generate(lm, prompt, (), max_new_tokens=max_new, budget=0)
        out.append({"prompt": prompt, "prompt_ids": lm.encode_prompt(prompt), "answer_ids": list(result.tokens)})
        print(f"answer {len(out)}/{len(chosen)}: {len(result.tokens)} tokens", file=sys.stderr, flush=True)
    return out


def answer_cases(answers: list[dict]) -> list[Case]:
    cases = []
    for a in answers:
        ids = a["prompt_ids"] + a["answer_ids"]
        for p in range(len(a["prompt_ids"]), len(ids) - 1):
            cases.append((ids[:p], ids[p : p + TRUTH]))
    return cases


def accepted(drafts: Sequence[Sequence[int]], truth: Sequence[int]) -> int:
    best = 0
    for draft in drafts:
        k = 0
        while k < len(draft) and k < len(truth) and draft[k] == truth[k]:
            k += 1
        best = max(best, k)
    return best


def measure(lookup: Callable[[list[int], int], list], cases: list[Case], budget: int) -> dict:
    from hdlib.bench.intervals import percentile

    wall, cpu, acc, nodes, hits = [], [], [], [], 0
    for context, truth in cases:
        w, c = time.perf_counter(), time.thread_time()
        drafts = lookup(context, budget)
        cpu.append(time.thread_time() - c)
        wall.append(time.perf_counter() - w)
        acc.append(accepted(drafts, truth))
        nodes.append(len({tuple(d[:k]) for d in drafts for k in range(1, len(d) + 1)}))
        hits += bool(drafts)
    return {
        "median_ms": round(statistics.median(wall) * 1e3, 4),
        "p99_ms": round(percentile(wall, 0.99) * 1e3, 4),
        "cpu_median_ms": round(statistics.median(cpu) * 1e3, 4),
        "cpu_p99_ms": round(percentile(cpu, 0.99) * 1e3, 4),
        "accepted_per_lookup": round(float(np.mean(acc)), 4),
        "drafted_nodes": round(float(np.mean(nodes)), 2),
        "hit_rate": round(hits / len(cases), 4),
    }


def tree_accepted(tree, truth: Sequence[int]) -> int:
    node, k = 0, 0
    for token in truth:
        node = tree.child(node, token)
        if node is None:
            break
        k += 1
    return k


def with_context_tier(statistics_tier, cases: list[Case], budget: int) -> dict:
    """Tokens accepted per step from the drafter's trie: the context tier alone, then with the
    statistics tier behind it (HD's order), each context indexed afresh."""
    from hdlib.engine.drafter import Drafter, ask_all
    from hdlib.tiers import ContextTier

    out = {}
    for name, extra in (("context", []), ("context+statistics", [statistics_tier])):
        acc = []
        for context, truth in cases:
            drafter = Drafter([ContextTier(), *extra])
            drafter.begin(context)
            acc.append(tree_accepted(drafter.draft(context, TRUTH, ask_all(budget))[0], truth))
        out[name] = round(float(np.mean(acc)), 4)
    return out


def resident_mib() -> float:
    """This process's resident memory now (not its peak)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def child(code: str, *args: str) -> dict:
    """Run `code` in a fresh Python (so that its peak memory is its own); it prints JSON last."""
    done = subprocess.run([sys.executable, "-c", code, *args], check=True, stdout=subprocess.PIPE, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


# Peaks are read from VmHWM: ru_maxrss of a child also counts the pages of the parent that forked it.
MEMORY = """
def memory(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
"""

BUILD_CHILD = (
    MEMORY
    + """
import json, sys, time
import hdlib
from hdlib.databases.statsdb import build_statistics_db
start = time.perf_counter()
build_statistics_db(hdlib.load_model(), sys.argv[1])
print(json.dumps({"seconds": time.perf_counter() - start, "peak_rss_mb": memory("VmHWM")}))
"""
)

DRAFTRETRIEVER_CHILD = (
    MEMORY
    + """
import json, sys, time
import numpy as np, draftretriever
with np.load(sys.argv[1], allow_pickle=False) as npz:  # only numpy here: a small baseline
    tokens = npz["tokens"]
base = memory("VmRSS")
start = time.perf_counter()
writer = draftretriever.Writer(sys.argv[2], vocab_size=int(sys.argv[3]))
for doc in np.split(tokens, np.flatnonzero(tokens < 0) + 1):
    doc = doc[doc >= 0]
    if len(doc):
        writer.add_entry(doc.tolist())
writer.finalize()
seconds = time.perf_counter() - start
print(json.dumps({"seconds": seconds, "peak_rss_mb": memory("VmHWM"), "rss_before_mb": base}))
"""
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", action="store_true", help="rebuild the database, measuring time and memory")
    parser.add_argument("--contexts", type=int, default=2000, help="held-out ShareGPT windows")
    parser.add_argument("--model-prompts", type=int, default=12, help="held-out ShareGPT prompts the model answers")
    parser.add_argument("--max-new-tokens", type=int, default=80)
    parser.add_argument("--answers", type=Path, help="model answers to reuse (a JSON list, as in the output)")
    parser.add_argument("--no-draftretriever", action="store_true")
    parser.add_argument("--compare-sorts", action="store_true", help="time pydivsufsort too, when installed")
    parser.add_argument("--out", type=Path, default=results_path("statistics_tier.json"))
    args = parser.parse_args()

    from hdlib import load_model
    from hdlib.databases.statsdb import default_statistics_path, ensure_statistics_db
    from hdlib.store import read_meta
    from hdlib.tiers.statistics import StatisticsSettings, StatisticsTier

    load_before = os.getloadavg()
    lm = load_model("smollm2-135m")
    path = default_statistics_path(lm)
    measured_build = None
    if args.build:
        measured_build = child(BUILD_CHILD, str(path))
    ensure_statistics_db(lm)
    meta = read_meta(path)
    start, before = time.perf_counter(), resident_mib()
    tier = StatisticsTier.from_file(path, lm.fingerprint)
    load_s, resident = time.perf_counter() - start, resident_mib() - before

    previous = json.loads(args.out.read_text()) if args.out.is_file() else {}
    if args.answers:
        answers = json.loads(args.answers.read_text())
    elif previous.get("model_answers") and previous.get("answer_settings") == [args.model_prompts, args.max_new_tokens]:
        answers = previous["model_answers"]
    else:
        answers = model_answers(lm, args.model_prompts, args.max_new_tokens)
    cases = {"heldout": heldout_cases(lm, args.contexts), "model": answer_cases(answers)}
    print({k: len(v) for k, v in cases.items()}, file=sys.stderr)

    backends: dict[str, dict] = {}
    backends["suffix-array"] = {
        "settings": asdict(tier.settings),
        **{kind: {b: measure(tier.lookup, c, b) for b in BUDGETS} for kind, c in cases.items()},
    }
    print("suffix-array", json.dumps(backends["suffix-array"]["model"]), file=sys.stderr)
    in_hd = {kind: {b: with_context_tier(tier, c, b) for b in BUDGETS} for kind, c in cases.items()}
    print("with the context tier", json.dumps(in_hd), file=sys.stderr)

    variants = []
    grid = [(k, c, f, 256) for k in (2, 4, 8) for c in (1, 2) for f in (False, True)] + [(8, 1, True, 64)]
    for max_key, min_count, fill, sample in grid:
        s = StatisticsSettings(max_key=max_key, min_count=min_count, fill=fill, sample=sample)
        variant = StatisticsTier(tier.index, s)
        row = {"max_key": max_key, "min_count": min_count, "fill": fill, "sample": sample, "budget": 16}
        row.update({kind: measure(variant.lookup, c, 16) for kind, c in cases.items()})
        variants.append(row)
        print("variant", json.dumps(row), file=sys.stderr)

    sorts = compare_suffix_sorts(np.asarray(tier.index.tokens, dtype=np.int32)) if args.compare_sorts else None
    if not args.no_draftretriever:
        backends["draftretriever"] = measure_draftretriever(path, len(lm.tokenizer), cases)

    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    report = {
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "load_average_before": [round(x, 2) for x in load_before],
            "load_average_after": [round(x, 2) for x in os.getloadavg()],
        },
        "database": {
            "path": str(path.relative_to(path.parents[1])),
            "file_mib": round(path.stat().st_size / 2**20, 1),
            "load_seconds": round(load_s, 2),
            "resident_mib_when_open": round(resident),
            "n": meta["n"],
            "counts": meta["counts"],
            "sharegpt": meta["source"].get("sharegpt"),
            "build_recorded": meta["build"],
            "build_measured_in_child": measured_build,
            "benchmark_process_peak_rss_mb": round(rss_mb),
        },
        "goal": {"median_ms": 1.0, "p99_ms": 5.0},
        "cases": {kind: len(c) for kind, c in cases.items()},
        "backends": backends,
        "accepted_with_context_tier": in_hd,
        "suffix_sorts": sorts,
        "variants": variants,
        "answer_settings": [args.model_prompts, args.max_new_tokens],
        "model_answers": answers,
    }
    write_results(args.out, "statistics_tier", lm=lm, **report)


def compare_suffix_sorts(tokens: np.ndarray) -> dict:
    """hdlib's prefix doubling (to 16 tokens) against pydivsufsort (when installed: it is not a
    dependency) on a 3-byte big-endian encoding of the corpus, whose suffixes at multiples of 3 sort
    as the token suffixes do."""
    from hdlib.tiers.suffix_array import build_suffix_array

    start = time.perf_counter()
    ours = build_suffix_array(tokens, 16)
    out = {"prefix_doubling_16_tokens_s": round(time.perf_counter() - start, 1)}
    try:
        from pydivsufsort import divsufsort
    except ImportError:
        return out | {"pydivsufsort": "not installed"}
    start = time.perf_counter()
    value = tokens.astype(np.int64)
    value[value < 0] = (1 << 24) - 1  # the separator, after every token
    text = np.empty((len(tokens), 3), np.uint8)
    text[:, 0], text[:, 1], text[:, 2] = value >> 16, (value >> 8) & 255, value & 255
    sa = divsufsort(text.reshape(-1))
    sa = sa[sa % 3 == 0] // 3
    sa = sa[tokens[sa] >= 0].astype(np.int32)
    out["pydivsufsort_full_s"] = round(time.perf_counter() - start, 1)
    ranks = np.random.default_rng(0).integers(0, len(sa), 2000)

    def head(p: int) -> list[int]:
        return tokens[p : p + 16].tolist()

    out["same_order_on_16_tokens"] = all(head(sa[i]) == head(ours[i]) for i in ranks)
    return out


def draftretriever_lookup(reader) -> Callable[[list[int], int], list[list[int]]]:
    def lookup(context: list[int], budget: int) -> list[list[int]]:
        if len(context) < 2:  # its search panics (and aborts Python) on a one-token context
            return []
        paths = reader.search(context[-16:], choices=budget)[0]  # it reads 16 tokens at most
        return [[t for t in p if t != -2] for p in paths]  # -2 pads the paths

    return lookup


def measure_draftretriever(db: Path, vocab_size: int, cases: dict[str, list[Case]]) -> dict:
    import draftretriever

    with tempfile.TemporaryDirectory() as folder:
        index = Path(folder) / "trigrams.idx"  # a fresh file: its writer does not truncate
        build = child(DRAFTRETRIEVER_CHILD, str(db), str(index), str(vocab_size))
        size = index.stat().st_size
        start, before = time.perf_counter(), resident_mib()
        reader = draftretriever.Reader(index_file_path=str(index))
        load_s, resident = time.perf_counter() - start, resident_mib() - before
        del reader
        result = {
            "version": "0.1.1",
            "what": "ADED's trigram table (counts normalised per pair of tokens, top 12 kept on load) searched by "
            "Monte Carlo tree search; each search also adds the context's trigrams to the table",
            "build": {
                "seconds": round(build["seconds"], 1),
                "peak_rss_mb": round(build["peak_rss_mb"]),
                "rss_with_corpus_before_mb": round(build["rss_before_mb"]),
            },
            "file_mib": round(size / 2**20, 1),
            "load_seconds": round(load_s, 2),
            "resident_mib_when_open": round(resident),
        }
        for kind, c in cases.items():
            result[kind] = {}
            for b in BUDGETS:
                # A fresh reader for every pass: each search adds the context's trigrams to its table,
                # so a reused reader would know the answers from the pass before.
                lookup = draftretriever_lookup(draftretriever.Reader(index_file_path=str(index)))
                result[kind][b] = measure(lookup, c, b)
            print("draftretriever", kind, json.dumps(result[kind]), file=sys.stderr)
    return result


def tables(data: Mapping[str, Any]) -> list[str]:
    db = data["database"]
    built = db["build_measured_in_child"]
    header = ["backend", "contexts", "budget", "median ms", "p99 ms", "CPU median ms", "accepted per lookup"]
    rows = [
        [
            backend,
            kind,
            budget,
            f3(v["median_ms"]),
            f3(v["p99_ms"]),
            f3(v["cpu_median_ms"]),
            f2(v["accepted_per_lookup"]),
            f2(v["drafted_nodes"]),
            pct(v["hit_rate"]),
        ]
        for backend, b in data["backends"].items()
        for kind in ("heldout", "model")
        for budget, v in b[kind].items()
    ]
    with_context = [
        [kind, budget, *(f2(v[k]) for k in ("context", "context+statistics"))]
        for kind, budgets in data["accepted_with_context_tier"].items()
        for budget, v in budgets.items()
    ]
    return [
        (
            f"Database: {count(db['counts']['tokens'])} tokens of {count(db['counts']['conversations'])} ShareGPT "
            f"conversations, {f1(db['file_mib'])} MiB, opened in {f2(db['load_seconds'])} s, "
            f"{count(db['resident_mib_when_open'])} MiB resident; built in {f1(built['seconds'])} s at "
            f"{count(built['peak_rss_mb'])} MB peak. Contexts: {data['cases']['heldout']} held-out ShareGPT windows "
            f"(`heldout`) and {data['cases']['model']} from the model's own answers (`model`); the goal was a median "
            f"of {data['goal']['median_ms']} ms and a p99 of {data['goal']['p99_ms']} ms."
        ),
        table([*header, "drafted nodes", "hit rate"], rows),
        "Accepted tokens per lookup, the context tier alone and with the statistics tier behind it:",
        table(["contexts", "budget", "context", "context + statistics"], with_context),
    ]


if __name__ == "__main__":
    main()
