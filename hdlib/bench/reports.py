"""The printed report of a benchmark: how the run was made, tables by task (each number with its 95 %
interval over questions, where the results have one), every overall metric, the paired comparisons,
whether `ar` is a fair baseline and whether every method's output is `ar`'s."""

from __future__ import annotations

from hdlib import presentation
from hdlib.bench.methods import Method
from hdlib.bench.records import BenchResults, Metrics, Results
from hdlib.models.cpu import machine_label

FAIRNESS_LIMIT = 0.05  # `ar` may be at most this much slower than `hf` to count as a fair baseline


def cell(m: Metrics, metric: str, fmt: str = ".2f", suffix: str = "") -> str:
    """A metric's value, with its 95 % interval where the results have one: '1.85x [1.62, 2.10]'."""
    est = m.intervals.get(metric)
    return est.describe(fmt, suffix) if est is not None else f"{getattr(m, metric):{fmt}}{suffix}"


def questions_of(r: BenchResults, task: str | None = None) -> int | None:
    """How many questions stand behind a task's numbers (None: results from before intervals)."""
    first = next(iter(r.methods.values()))
    est = (first.overall if task is None else first.tasks[task]).intervals.get("speedup")
    return est.n if est is not None else None


def table(results: Results, metric: str = "speedup") -> str:
    """Methods as rows, tasks (then overall) as columns; with intervals, each column says its questions."""
    r = BenchResults.of(results)
    width = max(12, *(len(n) + 2 for n in r.methods))
    spread = any(m.overall.intervals for m in r.methods.values())
    col = 22 if spread else 14
    heads = [
        f"{t[:13]} ({n})" if (n := questions_of(r, None if t == "overall" else t)) is not None else t[:13]
        for t in [*r.tasks, "overall"]
    ]
    # Each cell after a space of its own: a long interval widens its column instead of running into the last
    head = f"{metric:{width}}" + "".join(f" {h:>{col - 1}}" for h in heads)
    fmt = ".1f" if metric == "tokens_per_s" else ".2f"
    rows = [
        f"{name:{width}}" + "".join(f" {cell(x, metric, fmt):>{col - 1}}" for x in [*m.tasks.values(), m.overall])
        for name, m in r.methods.items()
    ]
    return "\n".join([head, *rows])


def comparisons_table(results: Results) -> str:
    """Each paired comparison of the run, overall and per task: A/B with its interval and questions,
    and the verdict ('on par' where the interval holds 1); "" where the run made none."""
    r = BenchResults.of(results)
    if not r.comparisons:
        return ""
    lines = ["paired comparisons (geometric mean of the per-question ratio of tokens per second, 95 % interval):"]
    for c in r.comparisons:
        lines.append(f"  {c.sentence()}")
        lines += [f"    {task} ({e.n} q): {e.describe(suffix='x')}" for task, e in c.tasks.items()]
    return "\n".join(lines)


def design_line(results: Results) -> str:
    """How the run was made: repeats, the methods' order, the split, the acceptance prior."""
    r = BenchResults.of(results)
    parts = [f"{r.repeats} repeat{'s' if r.repeats != 1 else ''} of every method on every question"]
    if r.order_seed is not None:
        parts.append(f"methods in an order shuffled per question and repeat (seed {r.order_seed})")
    if r.split:
        parts.append(f"the {r.split} half of the questions")
    if r.prior:
        parts.append(f"acceptance prior {r.prior.get('source')} (digest {r.prior.get('digest')}), read-only")
    return "run: " + "; ".join(parts)


def overall_table(results: Results) -> str:
    """One row per method with every overall metric."""
    r = BenchResults.of(results)
    width = max(12, *(len(n) + 2 for n in r.methods))
    spread = any(m.overall.intervals for m in r.methods.values())
    w = (21, 19, 20) if spread else (8, 7, 9)  # speedup, MAT, tok/s: with their intervals, wider
    columns = f"{'speedup':>{w[0]}}{'MAT':>{w[1]}}{'tok/s':>{w[2]}}{'draft ms':>10}{'overhead':>10}{'identical':>11}"
    head = f"{'overall':{width}}{columns}  tier share"
    rows = []
    for name, m in r.methods.items():
        o = m.overall
        shares = ", ".join(f"{t} {100 * s:.0f} %" for t, s in o.tier_share.items()) or "-"
        draft, overhead = f"{'-':>10}", f"{'-':>10}"  # not timed apart: shown as not measured, not as 0
        if Method.parse(name).times_phases:
            draft, overhead = f"{o.draft_ms:10.2f}", f"{100 * o.overhead_frac:9.1f}%"
        speed, mat, rate = cell(o, "speedup", suffix="x"), cell(o, "mat"), cell(o, "tokens_per_s", ".1f")
        rows.append(
            f"{name:{width}} {speed:>{w[0] - 1}} {mat:>{w[1] - 1}} {rate:>{w[2] - 1}}{draft}"
            f"{overhead}{100 * o.identical_frac:10.0f}%  {shares}"
        )
    return "\n".join([head, *rows])


def tiers_table(results: Results) -> str:
    """Per hdlib method and tier, overall: the share of the emitted tokens credited to the tier, drafted
    by it alone and by it with another tier, the share of steps it was asked in, and its drafting
    milliseconds per step; "" where no method recorded its tiers."""
    r = BenchResults.of(results)
    drafted = {name: m.overall for name, m in r.methods.items() if m.overall.tiers}
    if not drafted:
        return ""
    width = max(16, *(len(n) + 3 for n in drafted))
    head = f"{'tiers, overall':{width}}{'tier':12}{'share':>7}{'alone':>7}{'shared':>8}{'asked':>7}{'ms/step':>9}"
    rows = [
        f"{name + ':' if i == 0 else '':{width}}{tier:12}{100 * o.tier_share.get(tier, 0.0):6.0f}%"
        f"{100 * t.alone:6.0f}%{100 * t.shared:7.0f}%{100 * t.asked:6.0f}%{t.lookup_ms:9.2f}"
        for name, o in drafted.items()
        for i, (tier, t) in enumerate(o.tiers.items())
    ]
    return "\n".join([head, *rows])


def fairness_line(results: Results) -> str:
    """Is `ar` a fair baseline? Its overall throughput against transformers' `generate` (`hf`)."""
    methods = BenchResults.of(results).methods
    if "hf" not in methods:
        return "ar vs hf: not measured (add hf to --methods to check that ar is a fair baseline)"
    hf_over_ar = methods["hf"].overall.speedup
    relative = 1 / hf_over_ar - 1 if hf_over_ar > 0 else 0.0  # ar's throughput relative to hf's
    line = f"ar vs hf: ar is {100 * abs(relative):.1f} % {'faster' if relative >= 0 else 'slower'} than hf overall"
    if relative < -FAIRNESS_LIMIT:
        line += (
            f"\nWARNING: ar is more than {100 * FAIRNESS_LIMIT:.0f} % slower than transformers' generate, "
            "so speedups against ar overstate the methods: compare with hf too"
        )
    return line


def identical_line(results: Results) -> str:
    """Is every method's output `ar`'s? Greedy, or sampling by the Gumbel rule, an hd method's should
    be. Where one parts, the results say where and whether the model's choice there was a near-tie
    (`hdlib.bench.divergence`: the other token within max(1e-4, 2 eps(dtype) |best logit|) of `ar`'s best
    logit there): in float32 a parting beyond that bound is a bug; in half precision the tree pass
    and the one-token pass round differently, and near-ties flip. Transformers' methods sample with
    random numbers of their own, and the rejection rule spends its own as the tree says: the same
    distribution, not the same answer."""
    r = BenchResults.of(results)
    if r.temperature != 0 and r.sampling_rule != "gumbel":
        return (
            "identical to ar: not expected when sampling by the rejection rule (other random draws, the same "
            "distribution)"
        )
    differ = {n: m.overall.identical_frac for n, m in r.methods.items() if m.overall.identical_frac < 1}
    if not differ:
        return "identical to ar: every method on 100 % of questions"
    listed = ", ".join(f"{n} {100 * f:.0f} %" for n, f in differ.items())
    if not any(n.startswith("hd") for n in differ):
        own = "transformers' own sampling" if r.temperature != 0 else "the engines' own decoding: transformers', vLLM's"
        return f"identical to ar: {listed} of questions ({own}; every hd method 100 %)"
    if not r.divergences:  # results from before the report
        if r.dtype != "float32":
            note = presentation.rounding_note(r.dtype)
            return f"identical to ar: {listed} of questions; {note} (README: Half precision)"
        return (
            f"WARNING: not identical to ar in float32: {listed} of questions, and the results say not where they part: "
            "a bug unless each is a near-tie, please report it"
        )
    ties = sum(d.divergence.near_tie for d in r.divergences)
    beyond = len(r.divergences) - ties
    where = f"{len(r.divergences)} answer(s) part from ar's, {ties} at a near-tie, {beyond} beyond the near-tie bound"
    if beyond and r.dtype == "float32":
        return f"WARNING: not identical to ar in float32: {listed} of questions; {where}: a bug, please report it"
    if beyond:
        return f"identical to ar: {listed} of questions; {where} (more than the last rounding of {r.dtype} explains)"
    return f"identical to ar: {listed} of questions; {where}: {presentation.rounding_note(r.dtype)}"


def divergence_table(results: Results) -> str:
    """One line per hd answer that parts from `ar`'s: where, `ar`'s two best logits there, the bound."""
    r = BenchResults.of(results)
    if not r.divergences:
        return ""
    head = "where answers part from ar's (first differing token; gap: ar's two best logits there, recomputed):"
    rows = [f"  q{d.question_id} {d.method} turn {d.turn}: {d.divergence.describe()}" for d in r.divergences]
    return "\n".join([head, *rows])


def serving_line(results: Results) -> str:
    """vLLM's speculative methods against vLLM's own plain decoding (`vllm`), where it ran; "" else."""
    methods = BenchResults.of(results).methods
    plain = methods.get("vllm")
    if plain is None or plain.overall.tokens_per_s <= 0:
        return ""
    others = [n for n in methods if n.startswith("vllm-")]
    rates = ", ".join(f"{n} {methods[n].overall.tokens_per_s / plain.overall.tokens_per_s:.2f}x" for n in others)
    line = f"vllm (plain) {plain.overall.tokens_per_s:.1f} tok/s, {plain.overall.speedup:.2f}x ar"
    return f"vLLM against its own plain decoding: {rates or 'no speculative method ran'} ({line})"


def machines_table(results: Results) -> str:
    """Each method's speedup and MAT on each machine, where the run's questions were answered on
    several (a run resumed elsewhere); "" where one machine answered all."""
    split = BenchResults.of(results).by_machine
    if not split:
        return ""
    head = [f"{machine_label(part['machine'])} ({len(part['question_ids'])} q)" for part in split]
    rows = [
        [name, *(f"{part['methods'][name]['speedup']:.2f}x / {part['methods'][name]['mat']:.2f}" for part in split)]
        for name in split[0]["methods"]
    ]
    width = max(len(r[0]) for r in rows)
    lines = [" | ".join([f"{'speedup / MAT':{width}}", *head])]
    lines += [" | ".join([f"{r[0]:{width}}", *(f"{c:>{len(h)}}" for c, h in zip(r[1:], head))]) for r in rows]
    return "This run's questions were answered on several machines; each machine's own ratios:\n" + "\n".join(lines)


def summary(results: Results) -> str:
    """The printed report: speedup, MAT and identical share per task, every overall metric, fairness
    (and vLLM's methods against its plain decoding, where they ran)."""
    parts = [table(results, metric) for metric in ("speedup", "mat", "tokens_per_s", "identical_frac")]
    report = [identical_line(results), divergence_table(results), serving_line(results), machines_table(results)]
    tiers = [tiers_table(results)]
    head = [design_line(results), *parts, overall_table(results), comparisons_table(results)]
    return "\n\n".join([*filter(None, head + tiers + report), fairness_line(results)])
