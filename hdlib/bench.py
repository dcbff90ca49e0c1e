"""Side-by-side benchmarks: every method over the same questions, in one process, interleaved.

Methods by name: `ar` is plain decoding in hdlib's own loop (the baseline); `hd` is HD with the
default tiers and order; `hd:ORDER` names the tiers by letter in the order they are asked (`hd:C`,
`hd:CM`, `hd:SCM`). Question by question, every method answers every turn (the conversation so far
is the baseline's), so the drift of a shared machine hits all of them alike.

Metrics follow Spec-Bench: throughput per question = new tokens / wall time; speedup = mean
throughput of the method / mean throughput of `ar`; MAT = mean tokens per step over all steps.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from hdlib.decoding import generate
from hdlib.errors import HDError
from hdlib.models import LoadedModel
from hdlib.specbench import Question
from hdlib.tiers import DEFAULT_TIERS, Tier, parse_tiers
from hdlib.trace import Generation


@dataclass(frozen=True)
class Method:
    name: str
    tiers: tuple[Tier, ...]  # empty: plain decoding

    @classmethod
    def parse(cls, name: str) -> Method:
        if name == "ar":
            return cls(name, ())
        if name == "hd":
            return cls(name, DEFAULT_TIERS)
        if name.startswith("hd:") and len(name) > 3:
            return cls(name, tuple(parse_tiers(list(name[3:]))))  # type: ignore[arg-type]
        raise HDError(f"unknown method {name!r}: use ar, hd or hd:ORDER (tier letters, e.g. hd:CMS)")


@dataclass
class Tally:
    """Sums over the turns one method answered."""

    throughputs: list[float] = field(default_factory=list)  # one per question
    tokens: int = 0
    steps: int = 0
    identical: list[bool] = field(default_factory=list)
    tier_tokens: Counter[Tier] = field(default_factory=Counter)
    draft_s: float = 0.0
    overhead_s: float = 0.0
    step_s: float = 0.0

    def add(self, runs: Sequence[Generation], baseline: Sequence[Generation]) -> None:
        wall = sum(r.wall_s for r in runs)
        self.throughputs.append(sum(len(r.tokens) for r in runs) / wall if wall > 0 else 0.0)
        self.identical.append(all(r.tokens == b.tokens for r, b in zip(runs, baseline)))
        for r in runs:
            self.tokens += len(r.tokens)
            self.steps += len(r.steps)
            self.tier_tokens.update(r.tier_counts)
            t = r.step_time
            self.draft_s, self.overhead_s, self.step_s = self.draft_s + t.draft, self.overhead_s + t.overhead, self.step_s + t.total

    def metrics(self, baseline: Tally) -> dict[str, object]:
        mean = sum(self.throughputs) / len(self.throughputs)
        base = sum(baseline.throughputs) / len(baseline.throughputs)
        return {
            "speedup": mean / base,
            "mat": self.tokens / self.steps,
            "tokens_per_s": mean,
            "draft_ms": 1e3 * self.draft_s / self.steps,
            "overhead_frac": self.overhead_s / self.step_s,
            "identical_frac": sum(self.identical) / len(self.identical),
            "tier_share": {t.value: n / self.tokens for t, n in sorted(self.tier_tokens.items())},
        }


def answer(
    lm: LoadedModel,
    question: Question,
    method: Method,
    history: Sequence[str],
    max_new_tokens: int,
    temperature: float = 0.0,
    seed: int = 0,
) -> list[Generation]:
    """Every turn of `question`, with the earlier turns answered by `history` (the baseline's text).

    Sampled turns use seed `seed + turn`, so a run can be replayed.
    """
    messages: list[dict[str, str]] = []
    runs = []
    for i, turn in enumerate(question.turns):
        messages.append({"role": "user", "content": turn})
        sampling = {"temperature": temperature, "seed": seed + i} if temperature > 0 else {}
        runs.append(generate(lm, lm.encode_prompt(messages), method.tiers, max_new_tokens=max_new_tokens, **sampling))
        messages.append({"role": "assistant", "content": history[i] if i < len(history) else runs[-1].text})
    return runs


def run_benchmark(
    lm: LoadedModel,
    questions: Sequence[Question],
    method_names: Sequence[str],
    max_new_tokens: int = 256,
    on_question: Callable[[Question, dict[str, list[Generation]]], None] | None = None,
    temperature: float = 0.0,
) -> dict[str, object]:
    """Every method over every question, interleaved; Spec-Bench's metrics per method and task.

    At temperature > 0 every method samples (question i, turn j with seed 1000 i + j), so
    `identical_frac` only means something at temperature 0.
    """
    methods = [Method.parse(n) for n in dict.fromkeys(["ar", *method_names])]
    warm = Question(0, "warmup", ("Say hello.",))
    for method in methods:
        answer(lm, warm, method, (), 8)
    tasks = list(dict.fromkeys(q.task for q in questions))
    tallies = {m.name: {"overall": Tally(), **{task: Tally() for task in tasks}} for m in methods}
    for question in questions:
        seed = 1000 * question.question_id
        base = answer(lm, question, methods[0], (), max_new_tokens, temperature, seed)
        runs = {"ar": base}
        history = [r.text for r in base]
        for method in methods[1:]:
            runs[method.name] = answer(lm, question, method, history, max_new_tokens, temperature, seed)
        for name, method_runs in runs.items():
            for key in ("overall", question.task):
                tallies[name][key].add(method_runs, base)
        if on_question is not None:
            on_question(question, runs)
    ar = tallies["ar"]
    return {
        "model": lm.name,
        "device": str(lm.device),
        "temperature": temperature,
        "max_new_tokens": max_new_tokens,
        "questions": len(questions),
        "date": time.strftime("%Y-%m-%d"),
        "methods": {
            name: {
                "overall": per["overall"].metrics(ar["overall"]),
                "tasks": {task: per[task].metrics(ar[task]) for task in tasks},
            }
            for name, per in tallies.items()
        },
    }


def table(results: dict[str, object], metric: str = "speedup") -> str:
    """Methods as rows, tasks (then overall) as columns."""
    methods = results["methods"]
    tasks = list(next(iter(methods.values()))["tasks"])
    head = f"{metric:12}" + "".join(f"{t[:13]:>14}" for t in [*tasks, "overall"])
    rows = [
        f"{name:12}" + "".join(f"{m['tasks'][t][metric]:14.2f}" for t in tasks) + f"{m['overall'][metric]:14.2f}"
        for name, m in methods.items()
    ]
    return "\n".join([head, *rows])


def progress_line(question: Question, runs: dict[str, list[Generation]]) -> str:
    """One line per finished question: each method's MAT on it."""
    mats = " ".join(f"{name}: MAT {sum(len(r.tokens) for r in rs) / sum(len(r.steps) for r in rs):.2f}" for name, rs in runs.items())
    return f"q{question.question_id} ({question.task}) {mats}"
