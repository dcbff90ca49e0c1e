"""Side-by-side benchmarks: every method over the same questions, in one process, interleaved.

Methods by name: `ar` is plain decoding in hdlib's own loop (the baseline); `hf` is transformers'
`model.generate` (greedy), `hf-pld` the same with prompt lookup decoding (see hdlib.bench.baselines);
`hd` is HD with the default tiers and order; `hd:ORDER` names the tiers by letter in the order they
are asked (`hd:C`, `hd:CM`, `hd:SCM`); `hd:all-orders` stands for all 15 ordered non-empty subsets
of C, M, S. Any hd method may end in `@N` to draft a fixed N tokens per step instead of a budget
chosen per step from the measured forward time (`hd:CMS@64`; `hd:all-orders@16` puts `@16` on every
order): where the forward time is flat in k (a GPU) what counts is the MAT at a large fixed budget,
and that can be measured on any machine. Question by question, after a warm-up, every method answers
every turn (the conversation so far is the baseline's) in a shuffled order, so the drift of a shared
machine hits all of them alike.

Each answered turn is kept as a `Turn` (counts, seconds, a digest of the tokens) and each question
as a `QuestionRuns` record; the metrics are computed from those records only, so a run resumed from
its raw results file (hdlib.bench.log) aggregates exactly like an uninterrupted one. The results are
a `BenchResults` (each method's `Metrics` overall and per task); `to_json` writes the file
`hdlib bench --out` holds and `from_json` reads one back.

Tier letters in `hd:ORDER` are any known tier's (`hdlib.databases.registry.register_tier`): `hd:CX` asks the
context tier, then the tier whose letter is X.

Metrics: throughput per question = new tokens / wall time over its turns (and its repeats, pooled);
speedup = the geometric mean over questions of the method's throughput over `ar`'s on the same
question (the paired ratio); MAT = mean tokens per step over all steps (the bonus token included);
`identical_frac` = share of questions whose every turn is token for token `ar`'s. Speedup, MAT and
tokens per second carry a 95 % interval from a bootstrap over questions (`intervals`), and a run
compares pairs of methods the same way (`--compare`). With `repeats` every method answers every
question several times, in an order shuffled per question and repeat; every hd method starts from
one read-only snapshot of the acceptance prior, so no method's numbers depend on which ran before it.
At temperature > 0 hdlib's methods sample with the same seeds, and with the default
sampling rule ("gumbel") every hd method's answer is `ar`'s too; with "rejection", and for
transformers' methods, only the distribution is the same.

The package: `methods` (the names), `records` (turns, questions, metrics, results and their JSON),
`intervals` (bootstrap intervals over questions, paired comparisons), `run` (answering, repeated and
interleaved), `reports` (the printed tables), `ranking` (against the paper's order
ablation), `provenance` (what made a result: the checkout, the packages, the cached measurements, the host).
"""

from hdlib.bench.methods import ALL_ORDERS, Method, expand, parse_methods, split_budget
from hdlib.bench.metrics import Tally, aggregate
from hdlib.bench.ranking import PAPER_ORDERS, OrderComparison, compare_orders, kendall, ranks, spearman
from hdlib.bench.records import (
    BenchResults,
    MethodResult,
    Metrics,
    QuestionRuns,
    Results,
    TierMetrics,
    TierWork,
    Turn,
    TurnDivergence,
    digest,
)
from hdlib.bench.reports import (
    divergence_table,
    fairness_line,
    identical_line,
    overall_table,
    summary,
    table,
    tiers_table,
)
from hdlib.bench.run import MethodProgress, progress_line, run_benchmark

__all__ = [
    "ALL_ORDERS",
    "PAPER_ORDERS",
    "QuestionRuns",
    "BenchResults",
    "Method",
    "MethodProgress",
    "MethodResult",
    "Metrics",
    "OrderComparison",
    "Results",
    "Tally",
    "TierMetrics",
    "TierWork",
    "Turn",
    "TurnDivergence",
    "aggregate",
    "compare_orders",
    "digest",
    "divergence_table",
    "expand",
    "fairness_line",
    "identical_line",
    "kendall",
    "overall_table",
    "parse_methods",
    "progress_line",
    "ranks",
    "run_benchmark",
    "spearman",
    "split_budget",
    "summary",
    "table",
    "tiers_table",
]
