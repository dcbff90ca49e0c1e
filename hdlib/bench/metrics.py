"""A method's metrics, computed from a run's records alone (`hdlib.bench.records`): per question the
tokens, seconds and steps of each method (`Tally`), then speedup, MAT and tokens per second with their
intervals over questions (`aggregate`), paired comparisons of two methods (`compare`), and each
machine's share of a run resumed on another (`split_by_machine`). A resumed run and an uninterrupted
one aggregate alike, because nothing else goes in."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hdlib.bench.intervals import (
    Comparison,
    Estimate,
    by_repeat,
    geometric_mean,
    mean,
    no_interval,
    ratio_of_sums,
    t_over_repeats,
)
from hdlib.bench.records import MethodResult, Metrics, QuestionRuns, TierMetrics, TierWork, Turn


@dataclass
class Tally:
    """Sums over the questions one method answered, each question's repeats pooled."""

    per_question: dict[int, list[float]] = field(default_factory=dict)  # question id -> [tokens, wall s, steps]
    identical: dict[int, bool] = field(default_factory=dict)  # question id -> every turn of every repeat `ar`'s
    tokens: int = 0
    steps: int = 0
    tier_tokens: Counter[str] = field(default_factory=Counter)
    drafting: dict[str, TierWork] = field(default_factory=dict)
    draft_s: float = 0.0
    overhead_s: float = 0.0
    step_s: float = 0.0

    def add(self, question_id: int, turns: Sequence[Turn], baseline: Sequence[Turn]) -> None:
        pooled = self.per_question.setdefault(question_id, [0.0, 0.0, 0.0])
        pooled[0] += sum(t.tokens for t in turns)
        pooled[1] += sum(t.wall_s for t in turns)
        pooled[2] += sum(t.steps for t in turns)
        same = len(turns) == len(baseline) and all(t.digest == b.digest for t, b in zip(turns, baseline))
        self.identical[question_id] = self.identical.get(question_id, True) and same
        for t in turns:
            self.tokens += t.tokens
            self.steps += t.steps
            self.tier_tokens.update(t.tiers)
            for name, work in t.drafting.items():
                self.drafting[name] = self.drafting.get(name, TierWork()) + work
            self.draft_s += t.draft_s
            self.overhead_s += t.overhead_s
            self.step_s += t.step_s

    def throughputs(self) -> dict[int, float]:
        """Tokens per second per question, over every turn of every repeat."""
        return {q: tokens / wall if wall > 0 else 0.0 for q, (tokens, wall, _) in self.per_question.items()}

    def metrics(self, baseline: Tally) -> Metrics:
        ours, base = self.throughputs(), baseline.throughputs()
        speedup = paired_ratio(ours, base)
        rate = mean(list(ours.values()))
        pooled = list(self.per_question.values())
        mat = ratio_of_sums([p[0] for p in pooled], [p[2] for p in pooled])
        return Metrics(
            speedup=speedup.value,
            mat=mat.value,
            tokens_per_s=rate.value,
            draft_ms=1e3 * self.draft_s / self.steps if self.steps else 0.0,
            overhead_frac=self.overhead_s / self.step_s if self.step_s > 0 else 0.0,
            identical_frac=sum(self.identical.values()) / len(self.identical),
            tier_share={t: n / self.tokens for t, n in sorted(self.tier_tokens.items())} if self.tokens else {},
            tiers={
                name: TierMetrics(w.alone / self.tokens, w.shared / self.tokens, w.asked / self.steps,
                                  1e3 * w.lookup_s / self.steps)
                for name, w in self.drafting.items()
            } if self.tokens and self.steps else {},
            intervals={"speedup": speedup, "mat": mat, "tokens_per_s": rate},
        )  # fmt: skip


def paired_ratio(ours: Mapping[int, float], theirs: Mapping[int, float]) -> Estimate:
    """The geometric mean over the questions both answered of ours / theirs, with its interval
    (a question where either made nothing is left out: no ratio)."""
    ratios = [ours[q] / theirs[q] for q in ours if q in theirs and ours[q] > 0 and theirs[q] > 0]
    return geometric_mean(ratios) if ratios else no_interval(0.0, [])


def tallies(records: Sequence[QuestionRuns], method_names: Sequence[str]) -> dict[str, dict[str, Tally]]:
    """Per method: a Tally overall ("overall") and one per task, in the order the tasks first appear."""
    tasks = list(dict.fromkeys(r.task for r in records))
    found = {name: {"overall": Tally(), **{task: Tally() for task in tasks}} for name in method_names}
    for record in records:
        for name in method_names:
            for key in ("overall", record.task):
                found[name][key].add(record.question_id, record.runs[name], record.runs["ar"])
    return found


def aggregate(records: Sequence[QuestionRuns], method_names: Sequence[str]) -> dict[str, MethodResult]:
    """Each method's metrics overall and per task (tasks in the order they first appear); a
    question's repeats are pooled (`Tally`)."""
    per = tallies(records, method_names)
    ar = per["ar"]
    return {
        name: MethodResult(
            t["overall"].metrics(ar["overall"]), {k: v.metrics(ar[k]) for k, v in t.items() if k != "overall"}
        )
        for name, t in per.items()
    }


def compare(records: Sequence[QuestionRuns], a: str, b: str) -> Comparison:
    """Method `a` against method `b`: the paired per-question throughput ratio (each question's repeats
    pooled), overall and per task, with its interval over questions; and where the run has several
    repeats, each repeat's geometric mean over its questions of the same ratio, with its t-interval
    over repeats (at least five; fewer: the repeats, no interval)."""
    per = tallies(records, [a, b])
    ratios = {key: paired_ratio(per[a][key].throughputs(), per[b][key].throughputs()) for key in per[a]}
    repeats = {r.repeat for r in records}
    if len(repeats) < 2:
        return Comparison(a, b, ratios.pop("overall"), ratios)
    each = question_repeat_ratios(records, a, b)
    return Comparison(a, b, ratios.pop("overall"), ratios, t_over_repeats(list(by_repeat(each).values())))


def question_repeat_ratios(records: Sequence[QuestionRuns], a: str, b: str) -> dict[tuple[int, int], float]:
    """Method `a`'s throughput over `b`'s for each (question, repeat) both answered: all its turns'
    tokens over their wall time (what `compare`'s interval over repeats and `hdlib.bench.intervals.crossed`
    read)."""

    def rate(turns: Sequence[Turn]) -> float:
        wall = sum(t.wall_s for t in turns)
        return sum(t.tokens for t in turns) / wall if wall > 0 else 0.0

    return {(r.question_id, r.repeat): rate(r.runs[a]) / rate(r.runs[b]) for r in records
            if rate(r.runs[a]) > 0 and rate(r.runs[b]) > 0}  # fmt: skip


def split_by_machine(records: Sequence[QuestionRuns], method_names: Sequence[str]) -> list[dict[str, Any]]:
    """Where `records` were answered on more than one machine (a run resumed on another): for each
    machine, in the order it first answered, its question ids and each method's overall speedup and
    MAT on them; [] where one machine answered all. Within a question the methods ran side by side
    on one machine, so each machine's ratios are its own; the run's overall ones mix them."""
    groups: dict[str, list[QuestionRuns]] = {}
    for record in records:
        groups.setdefault(json.dumps(record.machine, sort_keys=True), []).append(record)
    if len(groups) < 2:
        return []
    parts = [(group, aggregate(group, method_names)) for group in groups.values()]
    return [
        {
            "machine": group[0].machine,
            "question_ids": [r.question_id for r in group],
            "methods": {n: {"speedup": m.overall.speedup, "mat": m.overall.mat} for n, m in result.items()},
        }
        for group, result in parts
    ]
