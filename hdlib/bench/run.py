"""Running a benchmark: every method over every question, interleaved, each turn answered and
recorded; where an hd answer parts from `ar`'s, located; progress for a notebook or a terminal."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from tqdm.auto import tqdm

from hdlib.bench.baselines import hf_generate
from hdlib.bench.divergence import explain, locate
from hdlib.bench.methods import Method, parse_methods, with_own_tables
from hdlib.bench.paper import paper_drafter
from hdlib.bench.records import BenchResults, QuestionRuns, Turn, TurnDivergence, aggregate, split_by_machine
from hdlib.bench.serving import VllmEngines
from hdlib.bench.specbench import Question
from hdlib.decoding import generate
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
) -> list[Turn]:
    """Every turn of `question`, with the earlier turns answered by `history` (the baseline's text).

    Sampled turns use seed `seed + turn`, so a run can be replayed; hdlib's methods accept drafts by
    `sampling_rule`. The conversation so far is encoded in `prompt_format` (`LoadedModel.encode_prompt`:
    by default the model's chat template, or FastChat's vicuna format when it has none, as Spec-Bench).
    vLLM's methods are answered greedily by their engine in `engines` (started at its first question).
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
                gate=method.gate, **sampling,
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
) -> BenchResults:
    """Every method over every question, interleaved; Spec-Bench's metrics per method and task.

    `done` holds questions answered earlier (a resumed run): they are not answered again but count
    in the metrics. `on_question` sees each newly answered question (to save it, to show progress);
    `on_answer` sees each (question, method name) as that method finishes it (`MethodProgress`).
    At temperature > 0 every method samples (question i, turn j with seed 1000 i + j), hdlib's by
    `sampling_rule`: with "gumbel" every hd method's answers are `ar`'s, with "rejection" only their
    distribution is. Questions are encoded in `prompt_format` (see `answer_question`).
    """
    methods = [with_own_tables(m) for m in parse_methods(method_names)]
    chosen_format = lm.resolve_prompt_format(prompt_format)  # checked before the first answer
    serving = [m.name for m in methods if m.serving]
    if serving and temperature > 0:
        raise HDError(f"vLLM's methods ({', '.join(serving)}) are benchmarked greedily: temperature 0")
    names = [m.name for m in methods]
    records = {r.question_id: r for r in done}
    missing = sorted({n for r in done for n in names if n not in r.runs})
    if missing:
        raise HDError(f"the earlier results lack method(s) {missing}: they cannot be resumed with these methods")
    todo = [q for q in questions if q.question_id not in records]
    machine = describe_machine()  # each question records where it was answered (a resumed run may move)
    with VllmEngines() as engines:  # vLLM's, each started at its method's first answer, all closed at the end
        if todo:
            warm = Question(0, "warmup", ("Say hello.",))
            for method in methods:
                answer_question(lm, warm, method, (), 8, prompt_format=chosen_format, engines=engines)
        for question in todo:
            seed = 1000 * question.question_id
            base = answer_question(
                lm, question, methods[0], (), max_new_tokens, temperature, seed, sampling_rule, chosen_format, engines
            )
            runs = {"ar": base}
            history = [t.text for t in base]
            for method in methods:
                if method is not methods[0]:
                    runs[method.name] = answer_question(
                        lm, question, method, history, max_new_tokens, temperature, seed, sampling_rule,
                        chosen_format, engines,
                    )  # fmt: skip
                if on_answer is not None:
                    on_answer(question, method.name)
            parted = find_divergences(lm, question.question_id, methods, runs, greedy=temperature == 0)
            records[question.question_id] = QuestionRuns(question.question_id, question.task, runs, parted, machine)
            if on_question is not None:
                on_question(question, records[question.question_id])
    answered = [records[q.question_id] for q in questions]
    return BenchResults(
        model=lm.name,
        device=str(lm.device),
        dtype=str(lm.model.dtype).removeprefix("torch."),
        machine=machine,
        temperature=temperature,
        max_new_tokens=max_new_tokens,
        questions=len(questions),
        methods=aggregate(answered, names),
        by_machine=split_by_machine(answered, names),
        divergences=[d for q in questions for d in records[q.question_id].divergences],
        sampling_rule=sampling_rule if temperature > 0 else "",
        prompt_format=chosen_format,
    )


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
