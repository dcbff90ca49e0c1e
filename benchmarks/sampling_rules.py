"""The two sampling rules side by side: the Gumbel rule (the default) against recursive rejection.

    python -m benchmarks.sampling_rules --questions PATH [--per-task 2] [--max-new-tokens 128]
        [--temperatures 1.0,0.5] [--out benchmarks/results/<machine>/sampling_rules.json]

For each temperature and each Spec-Bench question (its first turn), four runs interleaved in one
process: plain sampling and HD (default tiers and order, budget chosen per step) under each rule, all
with the question's seed. Per rule: HD's speedup over plain sampling under the same rule, MAT, the
acceptance phase in ms per step (what `hdlib generate` prints as "acceptance"), and the share of
questions where HD's answer is plain sampling's, token for token (the Gumbel rule promises 100 %;
the rejection rule only the same distribution). The order of the rules alternates from question to
question, so the drift of a shared machine hits both alike.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from typing import Any

from benchmarks.common import load, spec_bench_parser, write_results
from benchmarks.markdown import f1, f2, x
from benchmarks.markdown import table as markdown_table
from hdlib.decoding import forward_profile, generate
from hdlib.engine.sampling import SAMPLING_RULES
from hdlib.models.cpu import describe_machine


def one_run(lm, prompt_ids, tiers, max_new_tokens, temperature, seed, rule) -> dict[str, float]:
    g = generate(
        lm, prompt_ids, tiers, max_new_tokens=max_new_tokens, temperature=temperature, seed=seed, sampling_rule=rule
    )
    return {
        "tokens": len(g.tokens),
        "steps": len(g.steps),
        "wall_s": g.wall_s,
        "accept_s": g.step_time.accept,
        "tokens_per_s": g.tokens_per_s,
        "tokens_ids": g.tokens,
    }


def summarise(rows: list[dict]) -> dict[str, dict[str, float]]:
    """Per rule: mean throughput of ar and hd, speedup, MAT, acceptance ms per step, identical share."""
    out = {}
    for rule in SAMPLING_RULES:
        ar = [r["ar"][rule] for r in rows]
        hd = [r["hd"][rule] for r in rows]

        def mean(xs):
            return sum(xs) / len(xs)

        out[rule] = {
            "ar_tokens_per_s": mean([x["tokens_per_s"] for x in ar]),
            "hd_tokens_per_s": mean([x["tokens_per_s"] for x in hd]),
            "speedup": mean([x["tokens_per_s"] for x in hd]) / mean([x["tokens_per_s"] for x in ar]),
            "mat": sum(x["tokens"] for x in hd) / sum(x["steps"] for x in hd),
            "hd_accept_ms_per_step": 1e3 * sum(x["accept_s"] for x in hd) / sum(x["steps"] for x in hd),
            "ar_accept_ms_per_step": 1e3 * sum(x["accept_s"] for x in ar) / sum(x["steps"] for x in ar),
            "identical_frac": mean([float(r["hd"][rule]["tokens_ids"] == r["ar"][rule]["tokens_ids"]) for r in rows]),
        }
    return out


def table(temperature: float, summary: dict[str, dict[str, float]]) -> str:
    lines = [
        f"temperature {temperature:g}",
        f"{'rule':<10}{'ar tok/s':>10}{'hd tok/s':>10}{'speedup':>9}{'MAT':>7}{'accept ms/step':>16}{'identical':>11}",
    ]
    for rule, s in summary.items():
        lines.append(
            f"{rule:<10}{s['ar_tokens_per_s']:10.1f}{s['hd_tokens_per_s']:10.1f}{s['speedup']:8.2f}x{s['mat']:7.2f}"
            f"{s['hd_accept_ms_per_step']:16.2f}{100 * s['identical_frac']:10.0f}%"
        )
    return "\n".join(lines)


def main() -> None:
    parser = spec_bench_parser(__doc__, "hd", "sampling_rules.json")
    parser.add_argument("--temperatures", default="1.0,0.5")
    args = parser.parse_args()
    questions, lm = load(args)
    warm = lm.encode_prompt("Say hello.")
    for rule in SAMPLING_RULES:
        for tiers in ((), "context,model,statistics"):
            one_run(lm, warm, tiers, 8, 1.0, 0, rule)
    runs = []
    for temperature in (float(t) for t in args.temperatures.split(",")):
        rows = []
        for n, question in enumerate(questions):
            prompt_ids = lm.encode_prompt([{"role": "user", "content": question.turns[0]}])
            seed = 1000 * question.question_id
            row: dict = {"question_id": question.question_id, "task": question.task, "ar": {}, "hd": {}}
            for rule in SAMPLING_RULES if n % 2 == 0 else SAMPLING_RULES[::-1]:
                for method, tiers in (("ar", ()), ("hd", "context,model,statistics")):
                    row[method][rule] = one_run(lm, prompt_ids, tiers, args.max_new_tokens, temperature, seed, rule)
            rows.append(row)
            same = {rule: row["hd"][rule]["tokens_ids"] == row["ar"][rule]["tokens_ids"] for rule in SAMPLING_RULES}
            print(
                f"T={temperature:g} q{question.question_id} {question.task}: hd == ar {same}",
                file=sys.stderr,
                flush=True,
            )
        summary = summarise(rows)
        print(table(temperature, summary), end="\n\n", flush=True)
        for row in rows:  # the answers' ids are compared above; the file keeps counts and times
            for method in ("ar", "hd"):
                for result in row[method].values():
                    result.pop("tokens_ids")
        runs.append({"temperature": temperature, "summary": summary, "questions": rows})
    result = {
        "command": " ".join(["python -m benchmarks.sampling_rules", *sys.argv[1:]]),
        "date": time.strftime("%Y-%m-%d"),
        "model": lm.name,
        "machine": describe_machine(),
        "max_new_tokens": args.max_new_tokens,
        "questions": len(questions),
        "runs": runs,
    }
    write_results(args.out, "sampling_rules", lm=lm, profile=forward_profile(lm), **result)


def tables(data: Mapping[str, Any]) -> list[str]:
    n = data["questions"]
    rows = []
    for run in data["runs"]:
        for rule, s in run["summary"].items():
            rows.append(
                [
                    f"{float(run['temperature']):g}",
                    rule,
                    f1(s["ar_tokens_per_s"]),
                    f1(s["hd_tokens_per_s"]),
                    x(s["speedup"]),
                    f2(s["mat"]),
                    f2(s["hd_accept_ms_per_step"]),
                    f2(s["ar_accept_ms_per_step"]),
                    f"{round(s['identical_frac'] * n)} of {n}",
                ]
            )
    header = ["temperature", "rule", "`ar` tokens/s", "`hd` tokens/s", "speedup", "MAT"]
    header += ["`hd` acceptance ms/step", "`ar` acceptance ms/step", "`hd` = `ar`, token for token"]
    return [
        f"Settings: {data['model']}, {n} questions (first turns), {data['max_new_tokens']} new tokens.",
        markdown_table(header, rows),
    ]


if __name__ == "__main__":
    main()
