"""Side-by-side benchmarks: every method over the same questions, in one process, interleaved.

Methods by name: `ar` is plain decoding in hdlib's own loop (the baseline); `hf` is transformers'
`model.generate` (greedy), `hf-pld` the same with prompt lookup decoding (see hdlib.baselines);
`hd` is HD with the default tiers and order; `hd:ORDER` names the tiers by letter in the order they
are asked (`hd:C`, `hd:CM`, `hd:SCM`); `hd:all-orders` stands for all 15 ordered non-empty subsets
of C, M, S. Any hd method may end in `@N` to draft a fixed N tokens per step instead of a budget
chosen per step from the measured forward time (`hd:CMS@64`; `hd:all-orders@16` puts `@16` on every
order): where the forward time is flat in k (a GPU) what counts is the MAT at a large fixed budget,
and that can be measured on any machine. Question by question, after a warm-up, every method answers
every turn (the conversation so far is the baseline's), so the drift of a shared machine hits all of
them alike.

Each answered turn is kept as a `Turn` (counts, seconds, a digest of the tokens) and each question
as an `Answered` record; the metrics are computed from those records only, so a run resumed from
its raw results file (hdlib.benchlog) aggregates exactly like an uninterrupted one. The results are
a `BenchResults` (each method's `Metrics` overall and per task); `to_json` writes the file
`hdlib bench --out` holds and `from_json` reads one back, older files included.

Tier letters in `hd:ORDER` are any known tier's (`hdlib.databases.register_tier`): `hd:CX` asks the
context tier, then the tier whose letter is X.

Metrics follow Spec-Bench: throughput per question = new tokens / wall time over its turns; speedup =
mean throughput of the method / mean throughput of `ar`; MAT = mean tokens per step over all steps
(the bonus token included); `identical_frac` = share of questions whose every turn is token for
token `ar`'s. At temperature > 0 hdlib's methods sample with the same seeds, and with the default
sampling rule ("gumbel") every hd method's answer is `ar`'s too; with "rejection", and for
transformers' methods, only the distribution is the same.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import permutations
from typing import Any

from tqdm.auto import tqdm

from hdlib import presentation
from hdlib.baselines import PROMPT_LOOKUP_TOKENS, HFGeneration, hf_generate
from hdlib.cpu import describe_machine
from hdlib.databases import parse_tiers
from hdlib.decoding import generate
from hdlib.divergence import Divergence, explain, locate
from hdlib.errors import HDError
from hdlib.models import LoadedModel
from hdlib.sampling import SAMPLING_RULES
from hdlib.specbench import Question
from hdlib.tiers import BONUS, DEFAULT_TIERS, Tier
from hdlib.trace import Generation

ALL_ORDERS = "hd:all-orders"
FAIRNESS_LIMIT = 0.05  # `ar` may be at most this much slower than `hf` to count as a fair baseline
LEGACY_BONUS = "target"  # what files written before hdlib named the bonus token "bonus" call it


def _tier_counts(counts: Mapping[str, Any], kind: type) -> dict[str, Any]:
    """Per-tier numbers from a file, the bonus token under its name whatever the file's age."""
    return {BONUS.name if str(k) == LEGACY_BONUS else str(k): kind(v) for k, v in counts.items()}


@dataclass(frozen=True)
class Method:
    name: str  # as given, `@N` included: results are keyed by it
    tiers: tuple[Tier, ...] = ()  # hdlib methods: the tiers in order; empty is plain decoding
    transformers: bool = False  # answered by `model.generate` instead of hdlib's loop
    prompt_lookup: int | None = None  # transformers only: prompt lookup decoding, tokens per draft
    budget: int | None = None  # hd methods: draft tokens per step; None chooses it per step

    @classmethod
    def parse(cls, name: str) -> Method:
        base, budget = split_budget(name)
        if base == "ar":
            return cls(name)
        if base == "hf":
            return cls(name, transformers=True)
        if base == "hf-pld":
            return cls(name, transformers=True, prompt_lookup=PROMPT_LOOKUP_TOKENS)
        if base == "hd":
            return cls(name, DEFAULT_TIERS, budget=budget)
        if base.startswith("hd:") and len(base) > 3:
            return cls(name, tuple(parse_tiers(list(base[3:]))), budget=budget)  # type: ignore[arg-type]  (letters give Tiers)
        raise HDError(
            f"unknown method {name!r}: use ar, hf, hf-pld, hd, hd:ORDER (tier letters C, M, S or a registered "
            "tier's, e.g. hd:CM) "
            f"or {ALL_ORDERS}; an hd method may end in @N for a fixed budget of N draft tokens per step "
            "(e.g. hd:CMS@64)"
        )


def split_budget(name: str) -> tuple[str, int | None]:
    """`hd:CMS@64` -> ("hd:CMS", 64); a name without `@` -> (name, None). Only hd methods take `@N`."""
    base, at, suffix = name.partition("@")
    if not at:
        return name, None
    if base in ("ar", "hf", "hf-pld"):
        raise HDError(
            f"method {name!r}: only hd methods take a fixed budget @N (hd@N, hd:ORDER@N, {ALL_ORDERS}@N), "
            f"not {base}"
        )
    # Digits only, no leading zero: `hd:C@8` and `hd:C@08` would otherwise be two methods in the results.
    if not (suffix.isascii() and suffix.isdigit()) or (len(suffix) > 1 and suffix[0] == "0"):
        raise HDError(
            f"method {name!r}: the budget after @ must be a non-negative integer, the draft tokens per step "
            f"(e.g. {base}@16; @0 drafts nothing)"
        )
    return base, int(suffix)


def all_orders() -> list[str]:
    """The 15 ordered non-empty subsets of hdlib's three tiers as method names: hd:C ... hd:SMC."""
    letters = [t.letter for t in DEFAULT_TIERS]
    return [f"hd:{''.join(p)}" for n in range(1, len(letters) + 1) for p in permutations(letters, n)]


def expand(name: str) -> list[str]:
    """hd:all-orders (with its `@N`, if any, on every order) -> the 15 orders; any other name -> itself."""
    base, budget = split_budget(name)
    if base != ALL_ORDERS:
        return [name]
    return [order if budget is None else f"{order}@{budget}" for order in all_orders()]


def parse_methods(names: str | Sequence[str]) -> list[Method]:
    """Method names ("hf,hd:C@8" or a list) -> methods, `ar` first, each once, hd:all-orders expanded."""
    items = [n.strip() for n in names.split(",")] if isinstance(names, str) else [n.strip() for n in names]
    if any(not n for n in items):
        raise HDError(f"empty method name in {names!r}")
    expanded = [order for n in items for order in expand(n)]
    return [Method.parse(n) for n in dict.fromkeys(["ar", *expanded])]


def digest(tokens: Sequence[int]) -> str:
    """16 hex characters naming a token sequence: equal answers have equal digests."""
    return hashlib.sha256(",".join(map(str, tokens)).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Turn:
    """One answered turn, as the raw results file keeps it: what the metrics need, no more."""

    tokens: int  # new tokens, the end token included
    steps: int  # forward passes that emitted tokens
    wall_s: float  # prefill included
    draft_s: float  # asking the tiers (0 for transformers' methods: not separable)
    overhead_s: float  # step time outside the forward pass
    step_s: float  # all steps (hdlib: prefill excluded; transformers: wall time)
    tiers: dict[str, int]  # emitted tokens per tier by name, bonus tokens under "bonus"; {} for transformers
    digest: str  # of the token ids, to tell identical outputs
    text: str = field(default="", compare=False, repr=False)  # the answer; not kept in the file
    ids: tuple[int, ...] = field(default=(), compare=False, repr=False)  # its token ids; not kept either
    prompt_ids: tuple[int, ...] = field(default=(), compare=False, repr=False)  # the prompt's; not kept

    @classmethod
    def of(cls, g: Generation) -> Turn:
        t = g.step_time
        tiers = {tier.name: n for tier, n in sorted(g.tier_counts.items(), key=lambda item: item[0].name)}
        counts = (len(g.tokens), len(g.steps), g.wall_s, t.draft, t.overhead, t.total, tiers, digest(g.tokens))
        return cls(*counts, g.text, tuple(g.tokens), tuple(g.prompt_ids))

    @classmethod
    def of_transformers(cls, g: HFGeneration, text: str) -> Turn:
        overhead = max(g.wall_s - g.forward_s, 0.0)
        return cls(len(g.tokens), g.forward_calls, g.wall_s, 0.0, overhead, g.wall_s, {}, digest(g.tokens), text)

    def to_json(self) -> dict[str, object]:
        return {
            k: getattr(self, k)
            for k in ("tokens", "steps", "wall_s", "draft_s", "overhead_s", "step_s", "tiers", "digest")
        }

    @classmethod
    def from_json(cls, row: Mapping[str, Any]) -> Turn:
        return cls(
            int(row["tokens"]),
            int(row["steps"]),
            *(float(row[k]) for k in ("wall_s", "draft_s", "overhead_s", "step_s")),
            _tier_counts(row["tiers"], int),
            str(row["digest"]),
        )


@dataclass(frozen=True)
class TurnDivergence:
    """Where one turn of an hd method parts from `ar`'s, and `ar`'s logits there (`hdlib.divergence`)."""

    question_id: int
    method: str
    turn: int
    divergence: Divergence

    def to_json(self) -> dict[str, Any]:
        return {"question_id": self.question_id, "method": self.method, "turn": self.turn, **self.divergence.to_json()}

    @classmethod
    def from_json(cls, row: Mapping[str, Any]) -> TurnDivergence:
        return cls(int(row["question_id"]), str(row["method"]), int(row["turn"]), Divergence.from_json(row))


@dataclass(frozen=True)
class Answered:
    """Every method's turns on one question."""

    question_id: int
    task: str
    runs: dict[str, list[Turn]]  # method name -> one Turn per turn of the question
    divergences: list[TurnDivergence] = field(default_factory=list)  # the hd turns that part from `ar`'s

    def to_json(self) -> dict[str, object]:
        runs = {name: [t.to_json() for t in turns] for name, turns in self.runs.items()}
        parted = {"divergences": [d.to_json() for d in self.divergences]} if self.divergences else {}
        return {"question_id": self.question_id, "task": self.task, "runs": runs, **parted}

    @classmethod
    def from_json(cls, row: Mapping[str, Any]) -> Answered:
        runs = {str(name): [Turn.from_json(t) for t in turns] for name, turns in row["runs"].items()}
        parted = [TurnDivergence.from_json(d) for d in row.get("divergences", [])]
        return cls(int(row["question_id"]), str(row["task"]), runs, parted)


@dataclass(frozen=True)
class Metrics:
    """Spec-Bench's numbers for one method over some questions (see the module docstring)."""

    speedup: float  # mean throughput over `ar`'s
    mat: float  # tokens per step, the bonus token included
    tokens_per_s: float  # mean throughput per question
    draft_ms: float  # asking the tiers, per step
    overhead_frac: float  # step time outside the forward pass
    identical_frac: float  # questions whose every turn is `ar`'s, token for token
    tier_share: dict[str, float]  # emitted tokens by tier name, the bonus token's under "bonus"; {} for transformers

    def to_json(self) -> dict[str, Any]:
        return {**{k: getattr(self, k) for k in METRICS}, "tier_share": dict(self.tier_share)}

    @classmethod
    def from_json(cls, row: Mapping[str, Any]) -> Metrics:
        return cls(*(float(row[k]) for k in METRICS), _tier_counts(row.get("tier_share", {}), float))


METRICS = ("speedup", "mat", "tokens_per_s", "draft_ms", "overhead_frac", "identical_frac")  # the float ones


@dataclass(frozen=True)
class MethodResult:
    overall: Metrics
    tasks: dict[str, Metrics]  # in the order the tasks first appear

    def to_json(self) -> dict[str, Any]:
        return {"overall": self.overall.to_json(), "tasks": {t: m.to_json() for t, m in self.tasks.items()}}

    @classmethod
    def from_json(cls, row: Mapping[str, Any]) -> MethodResult:
        return cls(Metrics.from_json(row["overall"]), {str(t): Metrics.from_json(m) for t, m in row["tasks"].items()})


@dataclass(frozen=True)
class BenchResults:
    """A benchmark run: where it ran and every method's metrics (`ar` first)."""

    model: str
    device: str
    dtype: str
    machine: dict[str, Any]  # `hdlib.cpu.describe_machine()`: CPU model, flags, threads
    temperature: float
    max_new_tokens: int
    questions: int
    methods: dict[str, MethodResult]
    extra: dict[str, Any] = field(default_factory=dict)  # what a script added to the file (date, command), kept
    sampling_rule: str = ""  # how hd methods accepted drafts when sampling; "" at temperature 0
    divergences: list[TurnDivergence] = field(default_factory=list)  # every hd turn that parts from `ar`'s
    prompt_format: str = ""  # how questions were encoded ("chat-template", "vicuna", "raw"); "" in older files

    @property
    def tasks(self) -> list[str]:
        return list(next(iter(self.methods.values())).tasks)

    def to_json(self) -> dict[str, Any]:
        head = {k: getattr(self, k) for k in ("model", "device", "dtype", "machine", "temperature", "max_new_tokens")}
        rule = {"sampling_rule": self.sampling_rule} if self.sampling_rule else {}
        fmt = {"prompt_format": self.prompt_format} if self.prompt_format else {}
        methods = {name: m.to_json() for name, m in self.methods.items()}
        parted = {"divergences": [d.to_json() for d in self.divergences]} if self.divergences else {}
        return {**head, **rule, **fmt, "questions": self.questions, "methods": methods, **parted, **self.extra}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BenchResults:
        """Results as `to_json` (or `hdlib bench --out`) wrote them; files from before a field existed
        read with its default (no `machine`: {}; no `dtype`: float32; sampled with no `sampling_rule`:
        rejection, the only rule then; no `prompt_format`: "")."""
        known = {
            "model", "device", "dtype", "machine", "temperature", "sampling_rule", "prompt_format", "max_new_tokens",
            "questions", "methods", "divergences",
        }  # fmt: skip
        temperature = float(data["temperature"])
        return cls(
            model=str(data["model"]),
            device=str(data["device"]),
            dtype=str(data.get("dtype", "float32")),
            machine=dict(data.get("machine", {})),
            temperature=temperature,
            max_new_tokens=int(data["max_new_tokens"]),
            questions=int(data["questions"]),
            methods={str(n): MethodResult.from_json(m) for n, m in data["methods"].items()},
            extra={k: v for k, v in data.items() if k not in known},
            sampling_rule=str(data.get("sampling_rule", "rejection" if temperature > 0 else "")),
            divergences=[TurnDivergence.from_json(d) for d in data.get("divergences", [])],
            prompt_format=str(data.get("prompt_format", "")),
        )

    @classmethod
    def of(cls, results: BenchResults | Mapping[str, Any]) -> BenchResults:
        """Results as they are, or read from the JSON of a results file (`json.load`)."""
        return results if isinstance(results, BenchResults) else cls.from_json(results)


@dataclass
class Tally:
    """Sums over the questions one method answered."""

    throughputs: list[float] = field(default_factory=list)  # one per question
    tokens: int = 0
    steps: int = 0
    identical: list[bool] = field(default_factory=list)
    tier_tokens: Counter[str] = field(default_factory=Counter)
    draft_s: float = 0.0
    overhead_s: float = 0.0
    step_s: float = 0.0

    def add(self, turns: Sequence[Turn], baseline: Sequence[Turn]) -> None:
        wall = sum(t.wall_s for t in turns)
        self.throughputs.append(sum(t.tokens for t in turns) / wall if wall > 0 else 0.0)
        self.identical.append(
            len(turns) == len(baseline) and all(t.digest == b.digest for t, b in zip(turns, baseline))
        )
        for t in turns:
            self.tokens += t.tokens
            self.steps += t.steps
            self.tier_tokens.update(t.tiers)
            self.draft_s += t.draft_s
            self.overhead_s += t.overhead_s
            self.step_s += t.step_s

    def metrics(self, baseline: Tally) -> Metrics:
        mean = sum(self.throughputs) / len(self.throughputs)
        base = sum(baseline.throughputs) / len(baseline.throughputs)
        return Metrics(
            speedup=mean / base if base > 0 else 0.0,
            mat=self.tokens / self.steps if self.steps else 0.0,
            tokens_per_s=mean,
            draft_ms=1e3 * self.draft_s / self.steps if self.steps else 0.0,
            overhead_frac=self.overhead_s / self.step_s if self.step_s > 0 else 0.0,
            identical_frac=sum(self.identical) / len(self.identical),
            tier_share={t: n / self.tokens for t, n in sorted(self.tier_tokens.items())} if self.tokens else {},
        )


def aggregate(records: Sequence[Answered], method_names: Sequence[str]) -> dict[str, MethodResult]:
    """Each method's metrics overall and per task (tasks in the order they first appear)."""
    tasks = list(dict.fromkeys(r.task for r in records))
    tallies = {name: {"overall": Tally(), **{task: Tally() for task in tasks}} for name in method_names}
    for record in records:
        for name in method_names:
            for key in ("overall", record.task):
                tallies[name][key].add(record.runs[name], record.runs["ar"])
    ar = tallies["ar"]
    return {
        name: MethodResult(per["overall"].metrics(ar["overall"]), {task: per[task].metrics(ar[task]) for task in tasks})
        for name, per in tallies.items()
    }


def answer(
    lm: LoadedModel,
    question: Question,
    method: Method,
    history: Sequence[str],
    max_new_tokens: int,
    temperature: float = 0.0,
    seed: int = 0,
    sampling_rule: str = SAMPLING_RULES[0],
    prompt_format: str = "auto",
) -> list[Turn]:
    """Every turn of `question`, with the earlier turns answered by `history` (the baseline's text).

    Sampled turns use seed `seed + turn`, so a run can be replayed; hdlib's methods accept drafts by
    `sampling_rule`. The conversation so far is encoded in `prompt_format` (`LoadedModel.encode_prompt`:
    by default the model's chat template, or FastChat's vicuna format when it has none, as Spec-Bench).
    """
    messages: list[dict[str, str]] = []
    turns: list[Turn] = []
    for i, user in enumerate(question.turns):
        messages.append({"role": "user", "content": user})
        prompt_ids = lm.encode_prompt(messages, prompt_format=prompt_format)
        if method.transformers:
            g = hf_generate(lm, prompt_ids, max_new_tokens, temperature, seed + i, method.prompt_lookup)
            turns.append(Turn.of_transformers(g, lm.decode(g.tokens)))
        else:
            sampling = (
                {"temperature": temperature, "seed": seed + i, "sampling_rule": sampling_rule} if temperature > 0 else {}
            )
            g = generate(lm, prompt_ids, method.tiers, max_new_tokens=max_new_tokens, budget=method.budget, **sampling)
            turns.append(Turn.of(g))
        messages.append({"role": "assistant", "content": history[i] if i < len(history) else turns[-1].text})
    return turns


def find_divergences(
    lm: LoadedModel, question_id: int, methods: Sequence[Method], runs: Mapping[str, Sequence[Turn]], greedy: bool
) -> list[TurnDivergence]:
    """Every turn of an hd method in `runs` whose answer parts from `ar`'s: the first differing token
    and, when `greedy`, `ar`'s logits there, recomputed in one forward pass in the model's dtype
    (`hdlib.divergence.explain`; untimed: after the answers). A sampled parting is only located."""
    found = []
    for method in methods:
        if method.transformers or not method.tiers:
            continue
        for turn, (ours, base) in enumerate(zip(runs[method.name], runs["ar"])):
            if ours.digest == base.digest:
                continue
            if greedy and ours.prompt_ids == base.prompt_ids:
                d = explain(lm.model, base.prompt_ids, base.ids, ours.ids)
            else:
                d = locate(base.ids, ours.ids, lm.model.dtype)
            if d is not None:
                found.append(TurnDivergence(question_id, method.name, turn, d))
    return found


def run_benchmark(
    lm: LoadedModel,
    questions: Sequence[Question],
    method_names: str | Sequence[str],
    max_new_tokens: int = 256,
    on_question: Callable[[Question, Answered], None] | None = None,
    temperature: float = 0.0,
    done: Sequence[Answered] = (),
    on_answer: Callable[[Question, str], None] | None = None,
    sampling_rule: str = SAMPLING_RULES[0],
    prompt_format: str = "auto",
) -> BenchResults:
    """Every method over every question, interleaved; Spec-Bench's metrics per method and task.

    `done` holds questions answered earlier (a resumed run): they are not answered again but count
    in the metrics. `on_question` sees each newly answered question (to save it, to show progress);
    `on_answer` sees each (question, method name) as that method finishes it (`MethodProgress`).
    At temperature > 0 every method samples (question i, turn j with seed 1000 i + j), hdlib's by
    `sampling_rule`: with "gumbel" every hd method's answers are `ar`'s, with "rejection" only their
    distribution is. Questions are encoded in `prompt_format` (see `answer`).
    """
    methods = parse_methods(method_names)
    chosen_format = lm.resolve_prompt_format(prompt_format)  # checked before the first answer
    names = [m.name for m in methods]
    records = {r.question_id: r for r in done}
    missing = sorted({n for r in done for n in names if n not in r.runs})
    if missing:
        raise HDError(f"the earlier results lack method(s) {missing}: they cannot be resumed with these methods")
    todo = [q for q in questions if q.question_id not in records]
    if todo:
        warm = Question(0, "warmup", ("Say hello.",))
        for method in methods:
            answer(lm, warm, method, (), 8, prompt_format=chosen_format)
    for question in todo:
        seed = 1000 * question.question_id
        base = answer(lm, question, methods[0], (), max_new_tokens, temperature, seed, sampling_rule, chosen_format)
        runs = {"ar": base}
        history = [t.text for t in base]
        for method in methods:
            if method is not methods[0]:
                runs[method.name] = answer(
                    lm, question, method, history, max_new_tokens, temperature, seed, sampling_rule, chosen_format
                )
            if on_answer is not None:
                on_answer(question, method.name)
        parted = find_divergences(lm, question.question_id, methods, runs, greedy=temperature == 0)
        records[question.question_id] = Answered(question.question_id, question.task, runs, parted)
        if on_question is not None:
            on_question(question, records[question.question_id])
    return BenchResults(
        model=lm.name,
        device=str(lm.device),
        dtype=str(lm.model.dtype).removeprefix("torch."),
        machine=describe_machine(),
        temperature=temperature,
        max_new_tokens=max_new_tokens,
        questions=len(questions),
        methods=aggregate([records[q.question_id] for q in questions], names),
        divergences=[d for q in questions for d in records[q.question_id].divergences],
        sampling_rule=sampling_rule if temperature > 0 else "",
        prompt_format=chosen_format,
    )


Results = BenchResults | Mapping[str, Any]  # a run's results, or the JSON of a results file


def table(results: Results, metric: str = "speedup") -> str:
    """Methods as rows, tasks (then overall) as columns."""
    r = BenchResults.of(results)
    width = max(12, *(len(n) + 2 for n in r.methods))
    head = f"{metric:{width}}" + "".join(f"{t[:13]:>14}" for t in [*r.tasks, "overall"])
    rows = [
        f"{name:{width}}"
        + "".join(f"{getattr(m.tasks[t], metric):14.2f}" for t in r.tasks)
        + f"{getattr(m.overall, metric):14.2f}"
        for name, m in r.methods.items()
    ]
    return "\n".join([head, *rows])


def overall_table(results: Results) -> str:
    """One row per method with every overall metric."""
    r = BenchResults.of(results)
    width = max(12, *(len(n) + 2 for n in r.methods))
    head = f"{'overall':{width}}{'speedup':>8}{'MAT':>7}{'tok/s':>9}{'draft ms':>10}{'overhead':>10}{'identical':>11}  tier share"
    rows = []
    for name, m in r.methods.items():
        o = m.overall
        shares = ", ".join(f"{t} {100 * s:.0f} %" for t, s in o.tier_share.items()) or "-"
        rows.append(
            f"{name:{width}}{o.speedup:7.2f}x{o.mat:7.2f}{o.tokens_per_s:9.1f}{o.draft_ms:10.2f}"
            f"{100 * o.overhead_frac:9.1f}%{100 * o.identical_frac:10.0f}%  {shares}"
        )
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
    (`hdlib.divergence`: the other token within max(1e-4, 2 eps(dtype) |best logit|) of `ar`'s best
    logit there): in float32 a parting beyond that bound is a bug; in half precision the tree pass
    and the one-token pass round differently, and near-ties flip. Transformers' methods sample with
    random numbers of their own, and the rejection rule spends its own as the tree says: the same
    distribution, not the same answer."""
    r = BenchResults.of(results)
    if r.temperature != 0 and r.sampling_rule != "gumbel":
        return "identical to ar: not expected when sampling by the rejection rule (other random draws, the same distribution)"
    differ = {n: m.overall.identical_frac for n, m in r.methods.items() if m.overall.identical_frac < 1}
    if not differ:
        return "identical to ar: every method on 100 % of questions"
    listed = ", ".join(f"{n} {100 * f:.0f} %" for n, f in differ.items())
    if not any(n.startswith("hd") for n in differ):
        own = "transformers' own sampling" if r.temperature != 0 else "transformers' own decoding"
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


def summary(results: Results) -> str:
    """The printed report: speedup, MAT and identical share per task, every overall metric, fairness."""
    parts = [table(results, metric) for metric in ("speedup", "mat", "tokens_per_s", "identical_frac")]
    report = [identical_line(results), divergence_table(results)]
    return "\n\n".join([*parts, overall_table(results), *filter(None, report), fairness_line(results)])


# The order ablation against the paper -------------------------------------------------------

# The HD paper's order ablation (Spec-Bench, greedy, Vicuna-7B on an A100-class GPU): speedup by order.
PAPER_ORDERS = {"CMS": 1.72, "CSM": 1.67, "C": 1.63, "MCS": 1.31, "MSC": 1.22, "M": 1.15, "SCM": 1.07, "SMC": 1.07, "S": 1.06}


def ranks(values: Sequence[float]) -> list[float]:
    """1 for the largest; tied values share the mean of their ranks."""
    order = sorted(range(len(values)), key=lambda i: -values[i])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman's rank correlation: Pearson's of the ranks (ties averaged)."""
    ra, rb = ranks(a), ranks(b)
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    norm = (sum((x - ma) ** 2 for x in ra) * sum((y - mb) ** 2 for y in rb)) ** 0.5
    return cov / norm if norm > 0 else 0.0


def kendall(a: Sequence[float], b: Sequence[float]) -> float:
    """Kendall's tau-b: (concordant - discordant pairs) over the pairs not tied, ties in both corrected."""
    concordant = discordant = ties_a = ties_b = 0
    for i in range(len(a)):
        for j in range(i + 1, len(a)):
            da, db = a[i] - a[j], b[i] - b[j]
            if da == 0 and db == 0:
                continue
            if da == 0:
                ties_a += 1
            elif db == 0:
                ties_b += 1
            elif (da > 0) == (db > 0):
                concordant += 1
            else:
                discordant += 1
    n0 = concordant + discordant
    norm = ((n0 + ties_a) * (n0 + ties_b)) ** 0.5
    return (concordant - discordant) / norm if norm > 0 else 0.0


@dataclass(frozen=True)
class OrderComparison:
    """A run's tier orders ranked against a reference (the paper's), on the orders both measured."""

    orders: list[str]  # the orders both hold, best first in the run
    speedups: dict[str, float]  # the run's `metric` by order
    reference: dict[str, float]  # the reference's speedups, by order
    spearman: float
    kendall: float
    metric: str = "speedup"  # what the run's orders are ranked by (speedup, or mat: timing-free)

    @property
    def first(self) -> tuple[str, str]:
        """(the run's fastest order, the reference's)."""
        return self.orders[0], max(self.orders, key=lambda o: self.reference[o])

    @property
    def last(self) -> tuple[str, str]:
        return self.orders[-1], min(self.orders, key=lambda o: self.reference[o])


def compare_orders(results: Results, reference: Mapping[str, float] = PAPER_ORDERS, metric: str = "speedup") -> OrderComparison:
    """The `hd:ORDER` methods of `results` (`@N` or not) against `reference` by `metric`'s overall value."""
    r = BenchResults.of(results)
    ours = {
        split_budget(name)[0][3:]: getattr(m.overall, metric) for name, m in r.methods.items() if name.startswith("hd:")
    }
    common = sorted((o for o in ours if o in reference), key=lambda o: -ours[o])
    if len(common) < 2:
        raise HDError(f"the results share {len(common)} order(s) with the reference: at least 2 are needed to rank")
    a, b = [ours[o] for o in common], [float(reference[o]) for o in common]
    mine, theirs = {o: ours[o] for o in common}, {o: float(reference[o]) for o in common}
    return OrderComparison(common, mine, theirs, spearman(a, b), kendall(a, b), metric)


class MethodProgress:
    """One progress bar per method (widgets in a notebook), each advanced as its method finishes a
    question: `run_benchmark(..., on_answer=MethodProgress(methods, len(questions)))`."""

    def __init__(self, method_names: str | Sequence[str], questions: int) -> None:
        names = [m.name for m in parse_methods(method_names)]
        width = max(len(n) for n in names)
        self.bars = {n: tqdm(total=questions, desc=f"{n:{width}}", unit="q", leave=True) for n in names}

    def __call__(self, question: Question, method: str) -> None:
        self.bars[method].update(1)
        if all(b.n >= b.total for b in self.bars.values()):
            self.close()

    def close(self) -> None:
        for bar in self.bars.values():
            bar.close()


def progress_line(question: Question, answered: Answered) -> str:
    """One line per finished question: each method's MAT on it."""
    mats = " ".join(
        f"{name}: MAT {sum(t.tokens for t in turns) / max(sum(t.steps for t in turns), 1):.2f}"
        for name, turns in answered.runs.items()
    )
    return f"q{question.question_id} ({question.task}) {mats}"
