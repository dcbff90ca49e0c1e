"""Running a benchmark: every method over every question, repeated and interleaved in a shuffled
order, each turn answered and recorded; where an hd answer parts from `ar`'s, located; the paired
comparisons; progress for a notebook or a terminal."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence

from tqdm.auto import tqdm

from hdlib.bench.arms import split_arm, twins
from hdlib.bench.baselines import hf_generate
from hdlib.bench.divergence import explain, locate
from hdlib.bench.methods import Method, parse_methods, split_budget, with_own_tables
from hdlib.bench.metrics import aggregate, split_by_machine
from hdlib.bench.metrics import compare as compare_methods
from hdlib.bench.paper_drafter import paper_drafter
from hdlib.bench.provenance import provenance
from hdlib.bench.records import BenchResults, MethodResult, QuestionRuns, Turn, TurnDivergence
from hdlib.bench.serving import VllmEngines
from hdlib.bench.specbench import Question
from hdlib.decoding import PriorChoice, forward_profile, generate, resolve_prior
from hdlib.engine.forward_time import ForwardProfile
from hdlib.engine.prior import AcceptancePrior
from hdlib.engine.sampling import SAMPLING_RULES
from hdlib.errors import HDError
from hdlib.models.cpu import describe_machine
from hdlib.models.loading import LoadedModel


def answer_question(
    lm: LoadedModel,
    question: Question,
    method: Method,
    history: Sequence[str],
    max_new_tokens: int,
    temperature: float = 0.0,
    seed: int = 0,
    sampling_rule: str = SAMPLING_RULES[0],
    prompt_format: str = "auto",
    engines: VllmEngines | None = None,
    prior: AcceptancePrior | None = None,
    profile: ForwardProfile | None = None,
) -> list[Turn]:
    """Every turn of `question`, with the earlier turns answered by `history` (the baseline's text).

    Sampled turns use seed `seed + turn`, so a run can be replayed; hdlib's methods accept drafts by
    `sampling_rule`. The conversation so far is encoded in `prompt_format` (`LoadedModel.encode_prompt`:
    by default the model's chat template, or FastChat's vicuna format when it has none, as Spec-Bench).
    vLLM's methods are answered greedily by their engine in `engines` (started at its first question).
    hdlib's methods at the auto budget start from `prior` (None: `generate`'s default) and weigh
    their drafts against `profile` (None: `generate`'s, this machine's).
    """
    messages: list[dict[str, str]] = []
    turns: list[Turn] = []
    for i, user in enumerate(question.turns):
        messages.append({"role": "user", "content": user})
        prompt_ids = lm.encode_prompt(messages, prompt_format=prompt_format)
        if method.transformers:
            g = hf_generate(lm, prompt_ids, max_new_tokens, temperature, seed + i, method.prompt_lookup)
            turns.append(Turn.of_transformers(g, lm.decode(g.tokens)))
        elif method.serving:
            if engines is None or temperature > 0:
                raise HDError(f"{method.name}: vLLM's methods are run greedily, with the run's engines")
            a = engines.get(lm, method.name).answer(prompt_ids, max_new_tokens)
            turns.append(Turn.of_serving(a.ids, a.wall_s, a.steps, lm.decode(a.ids), prompt_ids))
        else:
            sampling = (
                {"temperature": temperature, "seed": seed + i, "sampling_rule": sampling_rule}
                if temperature > 0
                else {}
            )
            drafter = paper_drafter(lm, method.paper) if method.paper is not None else None
            g = generate(
                lm, prompt_ids, method.tiers, max_new_tokens=max_new_tokens, budget=method.budget, drafter=drafter,
                gate=method.gate, prior=prior, candidates=method.candidates, profile=profile, **sampling,
            )  # fmt: skip
            turns.append(Turn.of(g))
        messages.append({"role": "assistant", "content": history[i] if i < len(history) else turns[-1].text})
    return turns


def find_divergences(
    lm: LoadedModel, question_id: int, methods: Sequence[Method], runs: Mapping[str, Sequence[Turn]], greedy: bool
) -> list[TurnDivergence]:
    """Every turn of an hd method (or a vLLM one) in `runs` whose answer parts from `ar`'s: the first
    differing token and, when `greedy`, `ar`'s logits there, recomputed in one forward pass in the
    model's dtype (`hdlib.bench.divergence.explain`; untimed: after the answers). A sampled parting is only
    located."""
    found = []
    for method in methods:
        if method.transformers or not (method.drafts or method.serving):
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


def method_order(names: Sequence[str], seed: int, question_id: int, repeat: int) -> list[str]:
    """The order the methods answer question `question_id` in, in repeat `repeat`: `names` shuffled
    by a generator seeded from all three (a string seed: the same order on every machine and Python)."""
    order = list(names)
    random.Random(f"hdlib-bench/{seed}/{question_id}/{repeat}").shuffle(order)
    return order


def run_benchmark(
    lm: LoadedModel,
    questions: Sequence[Question],
    method_names: str | Sequence[str],
    max_new_tokens: int = 256,
    on_question: Callable[[Question, QuestionRuns], None] | None = None,
    temperature: float = 0.0,
    done: Sequence[QuestionRuns] = (),
    on_answer: Callable[[Question, str], None] | None = None,
    sampling_rule: str = SAMPLING_RULES[0],
    prompt_format: str = "auto",
    repeats: int = 1,
    order_seed: int = 0,
    prior: PriorChoice = None,
    compare: Sequence[tuple[str, str]] = (),
    split: str = "",
) -> BenchResults:
    """Every method over every question, `repeats` times; Spec-Bench's metrics per method and task,
    each with its interval over questions, and the paired comparisons (`compare`, and by default
    `default_pairs`).

    Repeat by repeat, question by question, the methods answer in an order shuffled per question
    and repeat from `order_seed` (`method_order`), so a slow minute of a shared machine falls on any
    of them alike. Nothing learned in one repeat reaches another: each repeat starts the tables that
    outlive a request (Token Recycling's, SuffixDecoding's) and vLLM's engines afresh, and every hd
    method of every question starts its auto budget from one read-only snapshot of the acceptance
    `prior` taken here (`hdlib.decoding.resolve_prior`: None is the packaged model's, else the
    learned one), never updated during the run; its digest is in the results, and with it what made
    them (`hdlib.bench.provenance`: the checkout, the packages, the forward profile's digest where a
    method runs at the auto budget, loaded once here).
    A question of several turns is asked in the conversation `ar` has (its earlier turns answered
    by `ar`, once, untimed, before the question's first repeat), whatever order the methods run in.

    `done` holds questions answered earlier (a resumed run): they are not answered again but count
    in the metrics. `on_question` sees each newly answered (question, repeat) (to save it, to show
    progress); `on_answer` sees each (question, method name) as that method finishes it (`MethodProgress`).
    At temperature > 0 every method samples (question i, turn j with seed 1000 i + j), hdlib's by
    `sampling_rule`: with "gumbel" every hd method's answers are `ar`'s, with "rejection" only their
    distribution is. Questions are encoded in `prompt_format` (see `answer_question`).
    """
    if not isinstance(repeats, int) or repeats < 1:
        raise HDError(f"repeats must be a positive integer, got {repeats!r}")
    methods = parse_methods(method_names)
    names = [m.name for m in methods]
    for a, b in compare:
        unknown = [n for n in (a, b) if n not in names]
        if unknown or a == b:
            raise HDError(f"--compare {a},{b}: two different methods of the run ({', '.join(names)}) are needed")
    chosen_format = lm.resolve_prompt_format(prompt_format)  # checked before the first answer
    serving = [m.name for m in methods if m.serving]
    if serving and temperature > 0:
        raise HDError(f"vLLM's methods ({', '.join(serving)}) are benchmarked greedily: temperature 0")
    records = {r.key: r for r in done}
    missing = sorted({n for r in done for n in names if n not in r.runs})
    if missing:
        raise HDError(f"the earlier results lack method(s) {missing}: they cannot be resumed with these methods")
    auto = any(m.drafts and m.budget is None for m in methods)
    profile = forward_profile(lm) if auto else None  # what every auto budget of the run reads: loaded once, here
    made = provenance(lm, profile)
    snapshot = bench_prior(lm, prior, profile) if auto else None
    histories: dict[int, list[str]] = {}
    machine = describe_machine()  # each question records where it was answered (a resumed run may move)
    for repeat in range(repeats):
        todo = [q for q in questions if (q.question_id, repeat) not in records]
        if not todo:
            continue
        by_name = {m.name: with_own_tables(m) for m in methods}  # tables that outlive a request: new each repeat
        with VllmEngines() as engines:  # vLLM's, each started at its method's first answer, closed after the repeat
            warm = Question(0, "warmup", ("Say hello.",))
            for method in by_name.values():
                answer_question(lm, warm, method, (), 8, prompt_format=chosen_format, engines=engines, prior=snapshot,
                                profile=profile)  # fmt: skip
            for question in todo:
                seed = 1000 * question.question_id
                if len(question.turns) > 1 and question.question_id not in histories:
                    conversation = answer_question(
                        lm, question, methods[0], (), max_new_tokens, temperature, seed, sampling_rule, chosen_format
                    )  # `ar`'s, untimed: the conversation every method is asked in
                    histories[question.question_id] = [t.text for t in conversation]
                history = histories.get(question.question_id, [])
                order = method_order(names, order_seed, question.question_id, repeat)
                runs = {}
                for name in order:
                    runs[name] = answer_question(
                        lm, question, by_name[name], history, max_new_tokens, temperature, seed, sampling_rule,
                        chosen_format, engines, prior=snapshot, profile=profile,
                    )  # fmt: skip
                    if on_answer is not None:
                        on_answer(question, name)
                runs = {name: runs[name] for name in names}  # kept in the run's order
                parted = find_divergences(lm, question.question_id, methods, runs, greedy=temperature == 0)
                record = QuestionRuns(question.question_id, question.task, runs, parted, machine, repeat, order)
                records[record.key] = record
                if on_question is not None:
                    on_question(question, record)
    answered = [records[(q.question_id, r)] for r in range(repeats) for q in questions]
    metrics = aggregate(answered, names)
    pairs = list(dict.fromkeys([*compare, *default_pairs(names, metrics)]))
    return BenchResults(
        model=lm.name,
        device=str(lm.device),
        dtype=str(lm.model.dtype).removeprefix("torch."),
        machine=machine,
        temperature=temperature,
        max_new_tokens=max_new_tokens,
        questions=len(questions),
        methods=metrics,
        by_machine=split_by_machine(answered, names),
        divergences=[d for r in answered for d in r.divergences],
        sampling_rule=sampling_rule if temperature > 0 else "",
        prompt_format=chosen_format,
        repeats=repeats,
        order_seed=order_seed,
        split=split,
        prior={"source": snapshot.source, "digest": snapshot.digest()} if snapshot is not None else {},
        comparisons=[compare_methods(answered, a, b) for a, b in pairs],
        provenance=dict(made),
    )


def bench_prior(lm: LoadedModel, choice: PriorChoice, profile: ForwardProfile | None = None) -> AcceptancePrior:
    """The read-only snapshot of the acceptance prior `choice` names that every hd method of a run
    starts its auto budget from (`profile`: the run's forward profile, whose key names the learned
    prior; None: loaded)."""
    return resolve_prior(choice, lm, profile.key if profile is not None else None).snapshot()


def default_pairs(names: Sequence[str], metrics: Mapping[str, MethodResult]) -> list[tuple[str, str]]:
    """The comparisons a run makes unasked: its first hd method against the fastest peer (a method
    not of hd's family, not plain decoding), in a vLLM pass `vllm-hd` against plain `vllm`, and each
    A/A arm against its method's first (`hd#2` against `hd`: the run's own yardstick)."""
    pairs = twins(names)
    firsts = [n for n in names if split_arm(n)[1] == 1]
    ours = [n for n in firsts if is_hd_family(n)]
    peers = [n for n in firsts if not is_hd_family(n) and n not in PLAIN]
    if ours and peers:
        pairs.append((ours[0], max(peers, key=lambda n: metrics[n].overall.speedup)))
    if "vllm" in names:
        pairs += [(n, "vllm") for n in ours if n.startswith("vllm-")][:1]
    return pairs


PLAIN = ("ar", "hf", "vllm")  # plain decoding, by hdlib, transformers and vLLM


def is_hd_family(name: str) -> bool:
    """hdlib's HD in any of its forms (`hd`, `hd:ORDER`, `hd+window`, `hd@64`, `vllm-hd`), not the
    paper's (`hd-paper`, a peer here)."""
    base = split_budget(name)[0]
    return base == "hd" or base.startswith(("hd:", "hd+", "vllm-hd"))


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


def progress_line(question: Question, answered: QuestionRuns) -> str:
    """One line per finished question: each method's MAT on it."""
    mats = " ".join(
        f"{name}: MAT {sum(t.tokens for t in turns) / max(sum(t.steps for t in turns), 1):.2f}"
        for name, turns in answered.runs.items()
    )
    return f"q{question.question_id} ({question.task}) {mats}"
