"""The engine's own time per step, this checkout against another engine, side by side.

    python -m benchmarks.step_overhead --base PATH --questions data/spec_bench/question.jsonl [--budget 64|auto]
        [--per-task 2] [--max-new-tokens 64] [--out benchmarks/results/<machine>/step_overhead.json]

`--base` is another checkout of hdlib (for example `git worktree add /tmp/hd_base <commit>`). Each
engine runs in a worker process of its own (the same Python, started in its checkout) with
the packaged model; question by question, one worker answers, then the other, the order alternating,
so both meet the same machine. Greedy HD, the three default tiers, a fixed budget, each question's
first turn (`--budget auto`: the value-ranked tree from the packaged model's read-only prior, as
`generate` chooses it, so neither engine starts from what the other learned). The engine's overhead
is measured alike for both, outside either engine: the
generation's wall time minus the time spent inside the model's forward calls (the model's `forward`
is wrapped by a timer), per step. Each engine's own phase times (`StepTimes`) are kept beside it.
The answers must be identical (both are lossless); at a fixed budget the steps are too, where the
two engines draft alike. The paired ratio of each question's tokens per second (this over base, with
its bootstrap interval over questions) says whether one engine is faster.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from benchmarks.common import QUESTIONS_HELP, results_path, write_results
from benchmarks.markdown import code, count, f1, f2, table

ROOT = Path(__file__).resolve().parents[1]
PHASES = ("draft", "tree", "forward", "accept", "update", "policy")


def worker(questions_path: Path, per_task_n: int, budget: int | None, max_new_tokens: int) -> None:
    """Answer the question indices read from stdin, one JSON line each on stdout."""
    import hdlib
    from hdlib.bench.specbench import load_questions, per_task
    from hdlib.models.loading import load_model

    lm = load_model("smollm2-135m")
    questions = per_task(load_questions(questions_path), per_task_n)
    forward = {"s": 0.0, "calls": 0}
    inner = lm.model.forward

    def timed(*args, **kwargs):
        start = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            forward["s"] += time.perf_counter() - start
            forward["calls"] += 1

    lm.model.forward = timed
    hdlib.generate(lm, "Hello", max_new_tokens=4, budget=budget)  # first calls: databases, allocations
    print(json.dumps({"ready": len(questions), "hdlib": hdlib.__file__}), flush=True)
    for line in sys.stdin:
        q = questions[int(line)]
        prompt_ids = lm.encode_prompt(q.turns[0])
        forward["s"], forward["calls"] = 0.0, 0
        g = hdlib.generate(lm, prompt_ids, max_new_tokens=max_new_tokens, budget=budget)
        phases = {p: sum(getattr(s.times, p, 0.0) for s in g.steps) for p in PHASES}
        row = {
            "question_id": q.question_id,
            "category": q.category,
            "tokens": g.tokens,
            "steps": len(g.steps),
            "wall_s": g.wall_s,
            "tokens_per_s": g.tokens_per_s,
            "forward_s": forward["s"],
            "forward_calls": forward["calls"],
            "phases_s": phases,
        }
        print(json.dumps(row), flush=True)


class Worker:
    def __init__(self, name: str, root: Path, args: argparse.Namespace) -> None:
        self.name = name
        # This file's worker, with the checkout's hdlib first (an older checkout's own copy of this file may
        # answer otherwise).
        env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{ROOT}"}
        command = [
            sys.executable, __file__, "--worker", "--questions", str(args.questions.resolve()),
            "--per-task", str(args.per_task), "--budget", "auto" if args.budget is None else str(args.budget),
            "--max-new-tokens", str(args.max_new_tokens),
        ]  # fmt: skip
        self.process = subprocess.Popen(
            command, cwd=root, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        self.ready = json.loads(self.process.stdout.readline())  # type: ignore[union-attr]
        print(f"{name}: {self.ready['hdlib']}", file=sys.stderr)

    def answer(self, index: int) -> dict:
        self.process.stdin.write(f"{index}\n")  # type: ignore[union-attr]
        self.process.stdin.flush()  # type: ignore[union-attr]
        line = self.process.stdout.readline()  # type: ignore[union-attr]
        if not line:
            raise RuntimeError(f"the {self.name} worker stopped (exit code {self.process.wait()})")
        return json.loads(line)

    def close(self) -> None:
        self.process.stdin.close()  # type: ignore[union-attr]
        self.process.wait(timeout=60)


def parse_budget(text: str) -> int | None:
    """A fixed budget, or None for "auto" (the value-ranked tree)."""
    return None if text == "auto" else int(text)


def summary(rows: list[dict]) -> dict:
    steps = sum(r["steps"] for r in rows)
    overhead = sum(r["wall_s"] - r["forward_s"] for r in rows)
    return {
        "steps": steps,
        "tokens": sum(len(r["tokens"]) for r in rows),
        "mat": sum(len(r["tokens"]) for r in rows) / steps,
        "overhead_ms_per_step": 1e3 * overhead / steps,
        "forward_ms_per_step": 1e3 * sum(r["forward_s"] for r in rows) / steps,
        "phases_ms_per_step": {p: 1e3 * sum(r["phases_s"][p] for r in rows) / steps for p in PHASES},
        "overhead_ms_per_step_by_question": [1e3 * (r["wall_s"] - r["forward_s"]) / r["steps"] for r in rows],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", type=Path, help="another checkout of hdlib, the engine to compare with")
    parser.add_argument("--questions", type=Path, required=True, help=QUESTIONS_HELP)
    parser.add_argument("--per-task", type=int, default=2)
    parser.add_argument("--budget", type=parse_budget, default=64, help="draft tokens per step, or auto")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--out", type=Path, help="default: benchmarks/results/<machine>/step_overhead.json")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.questions, args.per_task, args.budget, args.max_new_tokens)
        return
    if args.base is None:
        parser.error("--base is needed: a checkout of the engine to compare with")

    from hdlib.bench.intervals import geometric_mean, verdict
    from hdlib.models.cpu import describe_machine

    engines = {"base": args.base.resolve(), "this": ROOT}
    workers = {name: Worker(name, root, args) for name, root in engines.items()}
    n = workers["this"].ready["ready"]
    rows: dict[str, list[dict]] = {name: [] for name in engines}
    try:
        for i in range(n):
            order = list(engines) if i % 2 == 0 else list(engines)[::-1]
            for name in order:
                rows[name].append(workers[name].answer(i))
            b, t = rows["base"][-1], rows["this"][-1]
            print(
                f"{i + 1}/{n} q{t['question_id']} {t['category']}: overhead ms/step base "
                f"{1e3 * (b['wall_s'] - b['forward_s']) / b['steps']:.1f}, "
                f"this {1e3 * (t['wall_s'] - t['forward_s']) / t['steps']:.1f}",
                file=sys.stderr,
            )
    finally:
        for w in workers.values():
            w.close()
    result = {name: summary(r) for name, r in rows.items()}
    pairs = list(zip(rows["base"], rows["this"], strict=True))
    identical = [b["tokens"] == t["tokens"] for b, t in pairs]
    speed = geometric_mean([t["tokens_per_s"] / b["tokens_per_s"] for b, t in pairs])
    ratios = [
        t / b
        for b, t in zip(
            result["base"]["overhead_ms_per_step_by_question"],
            result["this"]["overhead_ms_per_step_by_question"],
            strict=True,
        )
    ]
    out = {
        "what": "engine overhead per step (wall minus the model's forward calls), greedy, default tiers",
        "command": " ".join(["python -m benchmarks.step_overhead", *sys.argv[1:]]),
        "machine": describe_machine(),
        "settings": {
            "budget": "auto" if args.budget is None else args.budget,
            "per_task": args.per_task,
            "max_new_tokens": args.max_new_tokens,
        },
        "base": str(args.base),
        "results": result,
        "overhead_ratio_this_over_base": result["this"]["overhead_ms_per_step"]
        / result["base"]["overhead_ms_per_step"],
        "overhead_ratio_median_by_question": statistics.median(ratios),
        "identical_answers": sum(identical),
        "identical_steps": sum(b["steps"] == t["steps"] for b, t in pairs),
        "tokens_per_s_ratio_this_over_base": speed.to_json(),
        "questions": n,
    }
    args.out = args.out or results_path("step_overhead.json")  # here, not in the workers: they import no hdlib early
    write_results(args.out, "step_overhead", **out)  # this checkout's; the workers load the model
    b, t = result["base"], result["this"]
    print(
        f"overhead per step: base {b['overhead_ms_per_step']:.1f} ms, this {t['overhead_ms_per_step']:.1f} ms "
        f"({out['overhead_ratio_this_over_base']:.2f}x; "
        f"median by question {out['overhead_ratio_median_by_question']:.2f}x); "
        f"forward per step {b['forward_ms_per_step']:.0f} / {t['forward_ms_per_step']:.0f} ms; "
        f"identical answers {sum(identical)}/{n}, identical steps {out['identical_steps']}/{n}; "
        f"tokens/s this / base {speed.describe()} ({verdict(speed)})"
    )


def tables(data: Mapping[str, Any]) -> list[str]:
    results = data["results"]
    phases = list(next(iter(results.values()))["phases_ms_per_step"])
    rows = [
        [
            code(name),
            count(r["steps"]),
            count(r["tokens"]),
            f2(r["mat"]),
            f2(r["overhead_ms_per_step"]),
            f1(r["forward_ms_per_step"]),
            *(f2(r["phases_ms_per_step"][p]) for p in phases),
        ]
        for name, r in results.items()
    ]
    header = [
        "engine",
        "steps",
        "tokens",
        "MAT",
        "overhead ms/step",
        "forward calls ms/step",
        *(f"{p} ms" for p in phases),
    ]
    s = data["settings"]
    return [
        (
            f"Settings: budget {s['budget']}, {s['per_task']} questions per task, {s['max_new_tokens']} new tokens; "
            f"{data['what']}."
        ),
        table(header, rows),
        (
            f"Overhead this / base: {f2(data['overhead_ratio_this_over_base'])} (median by question "
            f"{f2(data['overhead_ratio_median_by_question'])}); identical answers: {data['identical_answers']} of "
            f"{data['questions']}" + side_by_side(data) + "."
        ),
    ]


def side_by_side(data: Mapping[str, Any]) -> str:
    """Identical steps and the paired tokens-per-second ratio, where the run has them (older runs do not)."""
    from hdlib.bench.intervals import Estimate, verdict

    if "tokens_per_s_ratio_this_over_base" not in data:
        return ""
    ratio = Estimate.from_json(data["tokens_per_s_ratio_this_over_base"])
    # a run of before issue 57 (no provenance) has a percentile bootstrap of its own, which its records do not
    # let one recompute: no word is read from it
    said = verdict(ratio) if "provenance" in data else "an interval of before issue 57, not recomputable: no verdict"
    return (
        f"; identical steps: {data['identical_steps']} of {data['questions']}; tokens per second this / base "
        f"{ratio.describe()} ({said}, paired by question)"
    )


if __name__ == "__main__":
    main()
