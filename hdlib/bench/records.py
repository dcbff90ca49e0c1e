"""What a benchmark keeps: each answered turn (`Turn`), each question (`QuestionRuns`), a method's
metrics (`Metrics`, computed from those records only by `hdlib.bench.metrics`), and a run's results
(`BenchResults`) with their JSON."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hdlib.bench.baselines import HFGeneration
from hdlib.bench.divergence import Divergence
from hdlib.bench.intervals import Comparison, Estimate
from hdlib.engine.trace import Generation
from hdlib.errors import HDError


def _tier_counts(counts: Mapping[str, Any], kind: type) -> dict[str, Any]:
    """Per-tier numbers from a file, keyed by tier name."""
    return {str(k): kind(v) for k, v in counts.items()}


@dataclass(frozen=True)
class TierWork:
    """One tier's drafting over some turns: the accepted draft tokens it drafted alone and with
    another tier, the steps it was asked in, the seconds it spent drafting."""

    alone: int = 0
    shared: int = 0
    asked: int = 0
    lookup_s: float = 0.0

    def __add__(self, other: TierWork) -> TierWork:
        return TierWork(*(getattr(self, f) + getattr(other, f) for f in TIER_WORK))

    def to_json(self) -> dict[str, float]:
        return {f: getattr(self, f) for f in TIER_WORK}

    @classmethod
    def from_json(cls, row: Mapping[str, Any]) -> TierWork:
        return cls(int(row["alone"]), int(row["shared"]), int(row["asked"]), float(row["lookup_s"]))


TIER_WORK = ("alone", "shared", "asked", "lookup_s")


@dataclass(frozen=True)
class TierMetrics:
    """One tier's drafting for one method over some questions: the shares of the emitted tokens it
    drafted alone and shared with another tier, the share of the steps it was asked in, and its
    drafting milliseconds per step (over all steps)."""

    alone: float
    shared: float
    asked: float
    lookup_ms: float

    def to_json(self) -> dict[str, float]:
        return {f: getattr(self, f) for f in ("alone", "shared", "asked", "lookup_ms")}

    @classmethod
    def from_json(cls, row: Mapping[str, Any]) -> TierMetrics:
        return cls(*(float(row[f]) for f in ("alone", "shared", "asked", "lookup_ms")))


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
    drafting: dict[str, TierWork] = field(default_factory=dict)  # per tier by name; {} where none drafted
    first_budget: int | None = None  # hdlib's: the draft tokens its first step verified (None: not hdlib's)
    text: str = field(default="", compare=False, repr=False)  # the answer; not kept in the file
    ids: tuple[int, ...] = field(default=(), compare=False, repr=False)  # its token ids; not kept either
    prompt_ids: tuple[int, ...] = field(default=(), compare=False, repr=False)  # the prompt's; not kept

    @classmethod
    def of(cls, g: Generation) -> Turn:
        t = g.step_time
        tiers = {tier.name: n for tier, n in sorted(g.tier_counts.items(), key=lambda item: item[0].name)}
        counts = (len(g.tokens), len(g.steps), g.wall_s, t.draft, t.overhead, t.total, tiers, digest(g.tokens))
        drafting = {r.tier.name: TierWork(r.alone, r.shared, r.asked, r.lookup_s) for r in g.tier_stats()}
        first = g.steps[0].tree.n_drafted if g.steps else 0
        return cls(*counts, drafting, first, text=g.text, ids=tuple(g.tokens), prompt_ids=tuple(g.prompt_ids))

    @classmethod
    def of_transformers(cls, g: HFGeneration, text: str) -> Turn:
        overhead = max(g.wall_s - g.forward_s, 0.0)
        return cls(
            len(g.tokens), g.forward_calls, g.wall_s, 0.0, overhead, g.wall_s, {}, digest(g.tokens), text=text
        )

    @classmethod
    def of_serving(cls, ids: Sequence[int], wall_s: float, steps: int, text: str, prompt_ids: Sequence[int]) -> Turn:
        """A turn a serving engine answered (hdlib.bench.serving): its steps from the engine's counters."""
        return cls(
            len(ids), steps, wall_s, 0.0, 0.0, wall_s, {}, digest(ids),
            text=text, ids=tuple(ids), prompt_ids=tuple(prompt_ids),
        )  # fmt: skip

    def to_json(self) -> dict[str, object]:
        row: dict[str, object] = {
            k: getattr(self, k)
            for k in ("tokens", "steps", "wall_s", "draft_s", "overhead_s", "step_s", "tiers", "digest")
        }
        if self.drafting:
            row["drafting"] = {name: work.to_json() for name, work in self.drafting.items()}
        if self.first_budget is not None:
            row["first_budget"] = self.first_budget
        return row

    @classmethod
    def from_json(cls, row: Mapping[str, Any]) -> Turn:
        return cls(
            int(row["tokens"]),
            int(row["steps"]),
            *(float(row[k]) for k in ("wall_s", "draft_s", "overhead_s", "step_s")),
            _tier_counts(row["tiers"], int),
            str(row["digest"]),
            {str(name): TierWork.from_json(work) for name, work in row.get("drafting", {}).items()},
            int(row["first_budget"]) if row.get("first_budget") is not None else None,
        )


@dataclass(frozen=True)
class TurnDivergence:
    """Where one turn of an hd method parts from `ar`'s, and `ar`'s logits there (`hdlib.bench.divergence`)."""

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
class QuestionRuns:
    """Every method's turns on one question."""

    question_id: int
    task: str
    runs: dict[str, list[Turn]]  # method name -> one Turn per turn of the question
    divergences: list[TurnDivergence] = field(default_factory=list)  # the hd turns that part from `ar`'s
    # `hdlib.models.cpu.describe_machine()` where it was answered; None: not recorded
    machine: dict[str, Any] | None = None
    repeat: int = 0  # which of the run's repeats (0 for a run of one)
    order: list[str] = field(default_factory=list)  # the order the methods answered in ([]: not recorded)

    @property
    def key(self) -> tuple[int, int]:
        """(question id, repeat): what a run answers once."""
        return self.question_id, self.repeat

    def to_json(self) -> dict[str, object]:
        runs = {name: [t.to_json() for t in turns] for name, turns in self.runs.items()}
        parted = {"divergences": [d.to_json() for d in self.divergences]} if self.divergences else {}
        where = {"machine": self.machine} if self.machine is not None else {}
        repeat = {"repeat": self.repeat} if self.repeat else {}
        order = {"order": list(self.order)} if self.order else {}
        return {"question_id": self.question_id, "task": self.task, **repeat, **order, "runs": runs, **parted, **where}

    @classmethod
    def from_json(cls, row: Mapping[str, Any]) -> QuestionRuns:
        runs = {str(name): [Turn.from_json(t) for t in turns] for name, turns in row["runs"].items()}
        parted = [TurnDivergence.from_json(d) for d in row.get("divergences", [])]
        machine = dict(row["machine"]) if row.get("machine") is not None else None
        order = [str(n) for n in row.get("order", [])]
        return cls(int(row["question_id"]), str(row["task"]), runs, parted, machine, int(row.get("repeat", 0)), order)


@dataclass(frozen=True)
class Metrics:
    """Spec-Bench's numbers for one method over some questions (see the module docstring), the first
    three with their intervals over questions (`hdlib.bench.intervals`)."""

    speedup: float  # geometric mean over questions of the paired throughput ratio to `ar`'s
    mat: float  # tokens per step, the bonus token included
    tokens_per_s: float  # mean throughput per question
    draft_ms: float  # asking the tiers, per step
    overhead_frac: float  # step time outside the forward pass
    identical_frac: float  # questions whose every turn is `ar`'s, token for token
    tier_share: dict[str, float]  # emitted tokens by tier name, the bonus token's under "bonus"; {} for transformers
    # Per tier: what it drafted alone and shared, how often it was asked, its drafting time ({}: not recorded)
    tiers: dict[str, TierMetrics] = field(default_factory=dict)
    # speedup, mat, tokens_per_s with their 95 % intervals and question counts ({}: results from before them)
    intervals: dict[str, Estimate] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        detail = {"tiers": {t: m.to_json() for t, m in self.tiers.items()}} if self.tiers else {}
        spread = {"intervals": {k: e.to_json() for k, e in self.intervals.items()}} if self.intervals else {}
        return {**{k: getattr(self, k) for k in METRICS}, "tier_share": dict(self.tier_share), **detail, **spread}

    @classmethod
    def from_json(cls, row: Mapping[str, Any]) -> Metrics:
        tiers = {str(t): TierMetrics.from_json(m) for t, m in row.get("tiers", {}).items()}
        spread = {str(k): Estimate.from_json(e) for k, e in row.get("intervals", {}).items()}
        return cls(*(float(row[k]) for k in METRICS), _tier_counts(row.get("tier_share", {}), float), tiers, spread)


METRICS = ("speedup", "mat", "tokens_per_s", "draft_ms", "overhead_frac", "identical_frac")  # the float ones
WITH_INTERVALS = ("speedup", "mat", "tokens_per_s")


@dataclass(frozen=True)
class MethodResult:
    overall: Metrics
    tasks: dict[str, Metrics]  # in the order the tasks first appear

    def to_json(self) -> dict[str, Any]:
        return {"overall": self.overall.to_json(), "tasks": {t: m.to_json() for t, m in self.tasks.items()}}

    @classmethod
    def from_json(cls, row: Mapping[str, Any]) -> MethodResult:
        return cls(Metrics.from_json(row["overall"]), {str(t): Metrics.from_json(m) for t, m in row["tasks"].items()})


# What every results file holds; the rest `to_json` leaves out when empty.
REQUIRED_FIELDS = ("model", "device", "dtype", "machine", "temperature", "max_new_tokens", "questions", "methods")


@dataclass(frozen=True)
class BenchResults:
    """A benchmark run: where it ran and every method's metrics (`ar` first)."""

    model: str
    device: str
    dtype: str
    machine: dict[str, Any]  # `hdlib.models.cpu.describe_machine()`: CPU model, flags, threads
    temperature: float
    max_new_tokens: int
    questions: int
    methods: dict[str, MethodResult]
    extra: dict[str, Any] = field(default_factory=dict)  # what a script added to the file (date, command), kept
    sampling_rule: str = ""  # how hd methods accepted drafts when sampling; "" at temperature 0
    divergences: list[TurnDivergence] = field(default_factory=list)  # every hd turn that parts from `ar`'s
    prompt_format: str = ""  # how questions were encoded ("chat-template", "vicuna", "raw"); "" where not recorded
    by_machine: list[dict[str, Any]] = field(default_factory=list)  # answered on several machines: split_by_machine
    repeats: int = 1  # times every method answered every question
    order_seed: int | None = None  # the seed of the methods' order per question and repeat; None: `ar` first
    split: str = ""  # the half of Spec-Bench's questions ("dev", "report"; "": all or not recorded)
    prior: dict[str, str] = field(default_factory=dict)  # the auto budget's acceptance prior: source, digest
    comparisons: list[Comparison] = field(default_factory=list)  # paired ratios of two methods (`--compare`)
    # What made the run (`hdlib.bench.provenance`: commit, versions, digests, host); {}: from before it was recorded
    provenance: dict[str, Any] = field(default_factory=dict)

    @property
    def tasks(self) -> list[str]:
        return list(next(iter(self.methods.values())).tasks)

    def to_json(self) -> dict[str, Any]:
        head = {k: getattr(self, k) for k in ("model", "device", "dtype", "machine", "temperature", "max_new_tokens")}
        rule = {"sampling_rule": self.sampling_rule} if self.sampling_rule else {}
        fmt = {"prompt_format": self.prompt_format} if self.prompt_format else {}
        methods = {name: m.to_json() for name, m in self.methods.items()}
        parted = {"divergences": [d.to_json() for d in self.divergences]} if self.divergences else {}
        split = {"by_machine": self.by_machine} if self.by_machine else {}
        design = {
            **({"repeats": self.repeats} if self.repeats != 1 else {}),
            **({"order_seed": self.order_seed} if self.order_seed is not None else {}),
            **({"split": self.split} if self.split else {}),
            **({"prior": dict(self.prior)} if self.prior else {}),
        }
        compared = {"comparisons": [c.to_json() for c in self.comparisons]} if self.comparisons else {}
        made = {"provenance": dict(self.provenance)} if self.provenance else {}
        return {
            **head, **rule, **fmt, **design, "questions": self.questions, "methods": methods, **compared, **parted,
            **split, **made, **self.extra,
        }  # fmt: skip

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BenchResults:
        """Results as `to_json` (or `hdlib bench --out`) wrote them (fields it leaves out when empty read
        as empty)."""
        known = {
            "model", "device", "dtype", "machine", "temperature", "sampling_rule", "prompt_format", "max_new_tokens",
            "questions", "methods", "divergences", "by_machine", "repeats", "order_seed", "split", "prior",
            "comparisons", "provenance",
        }  # fmt: skip
        missing = [k for k in REQUIRED_FIELDS if k not in data]
        if missing:
            raise HDError(
                f"not the results of `hdlib bench` as this hdlib writes them: no {', '.join(missing)} "
                "(results files from before 2026-12 are not read)"
            )
        return cls(
            model=str(data["model"]),
            device=str(data["device"]),
            dtype=str(data["dtype"]),
            machine=dict(data["machine"]),
            temperature=float(data["temperature"]),
            max_new_tokens=int(data["max_new_tokens"]),
            questions=int(data["questions"]),
            methods={str(n): MethodResult.from_json(m) for n, m in data["methods"].items()},
            extra={k: v for k, v in data.items() if k not in known},
            sampling_rule=str(data.get("sampling_rule", "")),
            divergences=[TurnDivergence.from_json(d) for d in data.get("divergences", [])],
            prompt_format=str(data.get("prompt_format", "")),
            by_machine=[dict(m) for m in data.get("by_machine", [])],
            repeats=int(data.get("repeats", 1)),
            order_seed=int(data["order_seed"]) if data.get("order_seed") is not None else None,
            split=str(data.get("split", "")),
            prior={str(k): str(v) for k, v in data.get("prior", {}).items()},
            comparisons=[Comparison.from_json(c) for c in data.get("comparisons", [])],
            provenance=dict(data.get("provenance") or {}),
        )

    def comparison(self, a: str, b: str) -> Comparison | None:
        return next((c for c in self.comparisons if (c.a, c.b) == (a, b)), None)

    @classmethod
    def of(cls, results: BenchResults | Mapping[str, Any]) -> BenchResults:
        """Results as they are, or read from the JSON of a results file (`json.load`)."""
        return results if isinstance(results, BenchResults) else cls.from_json(results)


Results = BenchResults | Mapping[str, Any]  # a run's results, or the JSON of a results file
