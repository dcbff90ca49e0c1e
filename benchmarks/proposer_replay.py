"""vLLM's chain proposers replayed over plain decoding's answers: their MAT, without vLLM.

    python -m benchmarks.proposer_replay --questions FILE [--per-task 2] [--max-new-tokens 256]
        [--methods hd,hd@24,hd+key=2,suffix] [--answers CACHE.json]
        [--out benchmarks/results/<machine>/proposer_replay.json]

vLLM verifies a proposer's chain greedily: it accepts the chain's longest prefix that equals what
plain decoding emits, and a step emits those tokens and one more. Given plain decoding's answers
(hdlib's, which vLLM's greedy answers equal token for token: `hdlib bench` checks it), the steps a
proposer would take are therefore counted exactly without the engine, and in seconds rather than
the engine's minutes. Each proposer is called as vLLM calls it: after the prefill's token, then after
every step with the tokens that step emitted, requests one after another as `hdlib bench` sends them
(every turn, the conversation so far being plain decoding's).

Methods: `hd` (hdlib's proposer, `hdlib.serving.proposer.ChainDrafter`, the tiers CMS, a chain of
at most 16, as `vllm-hd` runs it), `hd:ORDER` (tier letters of C, M, S), `+key=N` (the context
tier's shortest key N tokens instead of the proposer's one) and `@N` (a chain of at most N:
`hd@24`); `suffix` (SuffixDecoding as vLLM runs it: arctic-inference's cache, 24 tokens,
vLLM's default settings, earlier requests' answers cached). It reports MAT overall and per task,
and the draft tokens proposed per step, and each method's MAT against the first's: the geometric
mean over questions of the per-question ratio, with its 95 % interval from a bootstrap over
questions (`hdlib.bench.intervals`). MAT is what this measures; tokens per second need the
engine (`hdlib bench --methods vllm-hd,vllm-suffix`), where a longer chain costs more to verify
(`benchmarks/vllm_step_cost.py`).
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.bench_tables import interval
from benchmarks.common import load, spec_bench_parser, write_results
from benchmarks.markdown import code, f1, f2, table
from hdlib.bench.intervals import Estimate, geometric_mean, ratio_of_sums, verdict
from hdlib.bench.serving import HD, VLLM_METHODS
from hdlib.engine.loop import DecodeSettings, run
from hdlib.errors import HDError
from hdlib.models.loading import LoadedModel
from hdlib.serving.chain import CONTEXT_KEYS, ChainDrafter
from hdlib.serving.length import SCALE, StepCost
from hdlib.serving.proposer import cost_scale, offline_tiers, tier_order
from hdlib.store import write_text_atomic

SUFFIX_SETTINGS = {"max_tree_depth": 24, "max_spec_factor": 1.0, "min_token_prob": 0.1}  # vLLM's, as bench runs it

Turn = tuple[str, list[int], list[int], int]  # task, prompt ids, plain decoding's answer ids, question id


class SuffixProposer:
    """SuffixDecoding as vLLM's proposer drives arctic-inference's cache (vllm/v1/spec_decode/suffix_decoding.py)."""

    def __init__(self, max_len: int) -> None:
        from arctic_inference.suffix_decoding import SuffixDecodingCache

        self.max_len = max_len
        self.cache = SuffixDecodingCache(max_tree_depth=SUFFIX_SETTINGS["max_tree_depth"], max_cached_requests=10000)
        self.requests = 0

    def start(self, prompt: Sequence[int]) -> None:
        if self.requests:
            self.cache.stop_request(self.requests)  # the previous request's answer joins the cache
        self.requests += 1
        self.cache.start_request(self.requests, np.asarray(prompt, dtype=np.int32))

    def propose(self, tokens: Sequence[int], sampled: Sequence[int]) -> list[int]:
        self.cache.add_active_response(self.requests, list(sampled))
        pattern = np.asarray(tokens[-SUFFIX_SETTINGS["max_tree_depth"] :], dtype=np.int32)
        draft = self.cache.speculate(
            self.requests, pattern, max_spec_tokens=self.max_len,
            max_spec_factor=SUFFIX_SETTINGS["max_spec_factor"], min_token_prob=SUFFIX_SETTINGS["min_token_prob"],
        )  # fmt: skip
        return list(draft.token_ids)


class HDChainProposer:
    """hdlib's proposer, one row per call: as vLLM's runner hands it a batch of one, or (`rows`) as
    one row of a batch of that many rows like it, its chain's length weighed against what a draft
    costs such a step: the batch's tokens and step time taken as `rows` times this row's mean so far."""

    def __init__(
        self, lm: LoadedModel, order: str, max_len: int, keys: tuple[int, int] = CONTEXT_KEYS,
        scale: float = SCALE, rows: int | None = None,
    ) -> None:  # fmt: skip
        self.drafter = ChainDrafter(offline_tiers(lm.fingerprint, order), order, max_len, keys=keys, scale=scale)
        self.rows = rows
        self.emitted, self.spent, self.steps = 0, 0.0, 0  # this row's, over every step so far

    def start(self, prompt: Sequence[int]) -> None:
        pass

    def propose(self, tokens: Sequence[int], sampled: Sequence[int]) -> list[int]:
        row = np.asarray(tokens, dtype=np.int64)
        if self.rows is None:
            return self.drafter.propose([list(sampled)], np.array([len(row)]), row[None, :])[0]
        r, steps = self.rows, max(self.steps, 1)
        self.emitted, self.steps = self.emitted + len(sampled), self.steps + 1
        state = self.drafter.request(row, len(sampled))
        cost = self.drafter.costs(r, r * self.emitted / self.steps, load=1 + r * self.spent / steps)
        chain = self.drafter.chain(state, row, len(sampled), cost)
        self.spent += self.drafter.spent(r, len(chain))
        return chain


def proposer_for(name: str, lm: LoadedModel, rows: int | None = None) -> HDChainProposer | SuffixProposer:
    base, _, size = name.partition("@")
    base, _, scale = base.partition("+cost=")
    base, _, key = base.partition("+key=")
    kind, _, order = base.partition(":")
    if kind == "suffix" and not order and not key and not scale:
        return SuffixProposer(int(size or 24))
    if kind == "hd" and key in ("", "1", "2", "3", "4"):
        keys = (int(key), CONTEXT_KEYS[1]) if key else CONTEXT_KEYS
        size = size or str(VLLM_METHODS[HD]["num_speculative_tokens"])
        try:
            weight = cost_scale(scale or None)
        except HDError:
            weight = None
        if weight is not None:
            return HDChainProposer(lm, tier_order(order or None), int(size), keys, weight, rows)
    raise SystemExit(
        f"--methods: unknown proposer {name!r} (hd, hd:ORDER, each with an optional +key=N of 1 to 4, then "
        "+cost=X of at least 0; suffix; each with an optional @N)"
    )


def replay(
    propose: Callable[[list[int], list[int]], list[int]], prompt: list[int], answer: list[int],
    step_time: Callable[[int], float] = lambda drafts: 1.0,
) -> Counter:  # fmt: skip
    """Steps and proposed tokens of one request: the prefill emits the first token; every step after
    it emits the chain's prefix that equals the answer, and one more token. `time`: the steps' time
    in plain decoding's steps, a step with a chain of K drafts taking `step_time(K)` (the prefill: 1)."""
    done, sampled, counts = 1, answer[:1], Counter(steps=1, tokens=len(answer), time=1.0)
    while done < len(answer):
        chain = propose(prompt + answer[:done], sampled)
        accepted = next((i for i, (a, b) in enumerate(zip(chain, answer[done:])) if a != b), len(chain))
        emitted = min(accepted + 1, len(answer) - done)
        sampled = answer[done : done + emitted]
        done += emitted
        counts["steps"] += 1
        counts["proposed"] += len(chain)
        counts["time"] += step_time(len(chain))
    return counts


def step_time_at(rows: int) -> Callable[[int], float]:
    """A step's time with one row's chain of K drafts, in a step of `rows` rows each with such a chain,
    over a step with no drafts (the measured step cost, `hdlib.serving.length.StepCost`)."""
    cost = StepCost.measured()
    return lambda drafts: 1 + rows * cost.spent(rows, drafts)


def plain_answers(lm: LoadedModel, questions: Sequence[Any], max_new_tokens: int) -> list[Turn]:
    turns: list[Turn] = []
    for q in questions:
        messages: list[dict[str, str]] = []
        for user in q.turns:
            messages.append({"role": "user", "content": user})
            ids = list(lm.encode_prompt(messages))
            plain = run(lm.model, ids, None, DecodeSettings(max_new_tokens=max_new_tokens), lm.eos_token_ids)
            turns.append((q.task, ids, list(plain.tokens), q.question_id))
            messages.append({"role": "assistant", "content": lm.decode(plain.tokens)})
        print(f"q{q.question_id} ({q.task}): answered", file=sys.stderr, flush=True)
    return turns


def main() -> None:
    parser = spec_bench_parser(__doc__, "hd,hd@24,suffix", "proposer_replay.json")
    parser.set_defaults(max_new_tokens=256)
    parser.add_argument("--answers", type=Path, help="plain decoding's answers: read from here, or written here")
    parser.add_argument(
        "--rows", type=int, default=None,
        help="replay each request as one row of a batch of this many like it (hd's chains weighed at that batch "
        "size), and report each method's speedup over plain decoding as the measured step cost models it",
    )  # fmt: skip
    args = parser.parse_args()
    questions, lm = load(args)
    key = {"question_ids": [q.question_id for q in questions], "max_new_tokens": args.max_new_tokens, "format": 2}
    cached = json.loads(args.answers.read_text()) if args.answers and args.answers.is_file() else None
    if cached and cached["key"] == key:
        turns = [tuple(t) for t in cached["turns"]]
    else:
        turns = plain_answers(lm, questions, args.max_new_tokens)
        if args.answers:
            write_text_atomic(args.answers, json.dumps({"key": key, "turns": turns}) + "\n")
    methods: dict[str, dict[str, Any]] = {}
    per_question: dict[str, dict[int, Counter]] = {}
    for name in args.methods.split(","):
        proposer = proposer_for(name, lm, args.rows)
        step_time = step_time_at(args.rows) if args.rows else lambda drafts: 1.0
        sums: dict[str, Counter] = defaultdict(Counter)
        questions_of: dict[int, Counter] = defaultdict(Counter)
        started = time.perf_counter()
        for task, prompt, answer, question_id in turns:
            proposer.start(prompt)
            counts = replay(proposer.propose, prompt, answer, step_time)
            sums["overall"].update(counts)
            sums[task].update(counts)
            questions_of[question_id].update(counts)
        seconds = time.perf_counter() - started
        methods[name] = {
            task: {"mat": t["tokens"] / t["steps"], "proposed_per_step": t["proposed"] / t["steps"]}
            for task, t in sums.items()
        }
        o = methods[name]["overall"]
        o["propose_ms"] = 1e3 * seconds / sums["overall"]["steps"]
        o["mat_interval"] = ratio_of_sums(
            [c["tokens"] for c in questions_of.values()], [c["steps"] for c in questions_of.values()]
        ).to_json()
        if args.rows:
            o["modelled_speedup"] = ratio_of_sums(
                [c["tokens"] for c in questions_of.values()], [c["time"] for c in questions_of.values()]
            ).to_json()
        per_question[name] = questions_of
        modelled = f", modelled speedup at {args.rows} rows {o['modelled_speedup']['value']:.3f}" if args.rows else ""
        print(f"{name}: MAT {o['mat']:.2f}, {o['proposed_per_step']:.1f} proposed a step, "
              f"{o['propose_ms']:.2f} ms to propose{modelled}", flush=True)  # fmt: skip
    first, *others = per_question
    comparisons = [mat_comparison(per_question, other, first) for other in others]
    if args.rows:
        comparisons += [mat_comparison(per_question, other, first, "time") for other in others]
    for c in comparisons:
        what = "MAT" if c.get("of", "steps") == "steps" else "modelled speed"
        print(f"{what} {c['a']} / {c['b']}: {Estimate.from_json(c['ratio']).describe(suffix='x')}, {c['verdict']}")
    write_results(
        args.out,
        "proposer_replay",
        lm=lm,  # its kernels wrote the plain answers replayed
        questions=len(questions),
        max_new_tokens=args.max_new_tokens,
        rows=args.rows,
        question_ids=key["question_ids"],
        methods=methods,
        comparisons=comparisons,
    )


def mat_comparison(
    per_question: Mapping[str, Mapping[int, Counter]], a: str, b: str, of: str = "steps"
) -> dict[str, Any]:
    """A's MAT against B's (`of` "time": the modelled speed's): the geometric mean over questions of
    the per-question ratio (each question's tokens over its steps or time, every turn), with its
    interval over questions."""
    mat = {name: {q: c["tokens"] / c[of] for q, c in per_question[name].items()} for name in (a, b)}
    ratio = geometric_mean([mat[a][q] / mat[b][q] for q in mat[b]])
    said = verdict(ratio, above="higher", below="lower")
    return {"a": a, "b": b, "of": of, "ratio": ratio.to_json(), "verdict": said, "questions": len(mat[b])}


def tables(data: Mapping[str, Any]) -> list[str]:
    """benchmarks/proposer_replay.py: the proposers' MAT over plain decoding's answers."""
    methods = data["methods"]
    tasks = [t for t in next(iter(methods.values())) if t != "overall"]

    def mat(o: Mapping[str, Any]) -> str:
        return interval(o["mat_interval"], f2) if "mat_interval" in o else f2(o["mat"])

    rows_of = data.get("rows")
    modelled = ["modelled speedup at " + str(rows_of) + " rows"] if rows_of else []
    rows = [
        [code(n), mat(m["overall"]), *([interval(m["overall"]["modelled_speedup"], f2)] if rows_of else []),
         f1(m["overall"]["proposed_per_step"]), f2(m["overall"]["propose_ms"]), *(f2(m[t]["mat"]) for t in tasks)]
        for n, m in methods.items()
    ]  # fmt: skip
    how = (
        f"as one row of a batch of {rows_of} like it (hd's chains weighed at that size; the speedup over plain "
        "decoding as the measured step cost, vllm_step_cost.json, models such a step)"
        if rows_of
        else "as vLLM would call it"
    )
    out = [
        f"Settings: {data['model']}, {data['questions']} questions, {data['max_new_tokens']} new tokens per turn; "
        f"each proposer replayed over plain decoding's answers {how}.",
        table(["proposer", "MAT", *modelled, "proposed/step", "ms to propose", *(f"MAT {t}" for t in tasks)], rows),
    ]
    if data.get("comparisons"):
        out.append(
            table(
                ["of", "against", "ratio [95 % interval]", "questions", "verdict"],
                [
                    [
                        ("modelled speed of " if c.get("of") == "time" else "MAT of ") + code(c["a"]),
                        code(c["b"]),
                        interval(c["ratio"], lambda v: f"{v:.2f}x"),
                        str(c["questions"]),
                        c["verdict"],
                    ]
                    for c in data["comparisons"]
                ],
            )  # fmt: skip
        )
    return out


if __name__ == "__main__":
    main()
