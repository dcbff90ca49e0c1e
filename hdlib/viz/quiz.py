"""A five-question exit quiz whose answers the engine gives, not the author.

`exit_quiz` runs what each question asks about on the model in hand (greedy HD against plain
decoding, a step whose drafts were all rejected, the card game's two orders, one lookup of each
database, HD and plain sampling with one seed) and marks the option the run agrees with; each
answer says what ran and what it saw. A question whose run matches none of its options raises,
so a quiz never prints an answer the engine did not give.

`quiz_page` prints the questions with boxes to tick, and the answers below a cut line;
`write_handouts` writes both pages, the card game's and the quiz's (`hdlib handouts`).
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hdlib.bench.specbench import load_questions
from hdlib.databases.registry import lookup_latency, make_tier
from hdlib.decoding import generate
from hdlib.engine.trace import Generation
from hdlib.errors import HDError
from hdlib.models.loading import LoadedModel
from hdlib.paths import data_dir
from hdlib.tiers.base import DraftTier, Tier
from hdlib.viz.cards import DECKS, ORDERS, CardGame, card_page, folded, printable
from hdlib.viz.lookup import PAPER_LOOKUP_MS

CLASS_PROMPT = 6  # the project's prompt that the exit quiz answers: a summary of notes, which it quotes
CARD_PROMPT = 9  # the card game's: a word problem, whose answer copies the problem only in places, so that
# in some rounds the C cards miss and a lower deck's card writes (`CardGame.deal`, `pick_rounds`)
QUIZ_BUDGET = 4  # a small tree: more of its steps reject every draft
SEED = 0


@dataclass(frozen=True)
class Question:
    text: str
    options: tuple[str, ...]
    answer: int  # the option the engine's run agrees with
    why: str  # what ran, and what it saw

    def __post_init__(self) -> None:
        if not 0 <= self.answer < len(self.options):
            raise HDError(f"the engine's answer ({self.answer}) is none of the options of {self.text!r}")


@dataclass(frozen=True)
class Quiz:
    questions: tuple[Question, ...]
    model: str = ""

    def _repr_html_(self) -> str:
        return quiz_page(self, standalone=False)


def _option(options: Sequence[str], matches: Sequence[bool], question: str) -> int:
    """The one option whose test the run passed."""
    hits = [i for i, hit in enumerate(matches) if hit]
    if len(hits) != 1:
        raise HDError(f"the engine's run fits {len(hits)} of the options of {question!r}: {list(options)}")
    return hits[0]


def lossless_question(hd: Generation, plain: Generation) -> Question:
    n = len(plain.tokens)
    differ = sum(a != b for a, b in zip(hd.tokens, plain.tokens)) + abs(len(hd.tokens) - n)
    text = (
        f"HD and plain greedy decoding answer the same prompt ({n} tokens). "
        "How many of HD's tokens differ from plain decoding's?"
    )
    options = ("none", "a few: where the model rejected a draft", "most of them: HD trades quality for speed")
    answer = _option(options, [differ == 0, 0 < differ <= n // 2, differ > n // 2], text)
    why = (
        f"The engine ran both: {differ} of {n} tokens differ. Greedy verification keeps a draft only where "
        "it is the model's own top token, so the text is plain decoding's (in exact arithmetic; in "
        "low precision a near-tie can part)."
    )
    return Question(text, options, answer, why)


def rejected_step_question(hd: Generation) -> Question:
    written = sorted({len(s.tokens) for s in hd.steps if s.n_accepted_drafts == 0})
    if not written:
        raise HDError("no step of the quiz's HD answer rejected every draft: ask a longer answer")
    text = (
        f"At a step of HD (a budget of {hd.steps[0].budget} draft tokens), the model rejects every "
        "draft. How many tokens does that step write?"
    )
    options = ("0: the pass was wasted", "1: the model's own next token", f"{hd.steps[0].budget}: the budget")
    answer = _option(options, [written == [0], written == [1], written == [hd.steps[0].budget]], text)
    steps = sum(s.n_accepted_drafts == 0 for s in hd.steps)
    why = (
        f"In the engine's run, {steps} of {len(hd.steps)} steps rejected every draft, and each wrote "
        f"{', '.join(map(str, written))} token(s): the pass that checks the drafts also gives the model's "
        "next token, so a step writes at least the token plain decoding would."
    )
    return Question(text, options, answer, why)


def order_question(game: CardGame) -> Question:
    first, second = ORDERS
    a, b = sum(game.scores(first)), sum(game.scores(second))
    text = f"In the card game, which order wrote more tokens: {first} or {second}?"
    options = (first, second, "the same")
    answer = _option(options, [a > b, b > a, a == b], text)
    why = (
        f"{first} wrote {a} tokens in {len(game.rounds)} rounds, {second} {b}: with room for "
        f"{game.hand_size} cards, the order decides which decks' cards are played."
    )
    return Question(text, options, answer, why)


def slowest_lookup_question(seconds: Mapping[Tier, Sequence[float]]) -> Question:
    median = {tier: float(np.median(s)) for tier, s in seconds.items()}
    slowest = max(median, key=median.__getitem__)
    tiers = list(median)
    text = "Which database took longest to look up on the machine that made this quiz?"
    options = tuple(t.name for t in tiers)
    answer = _option(options, [t == slowest for t in tiers], text)
    times = ", ".join(f"{t.name} {median[t] * 1e6:,.1f} \u00b5s" for t in tiers)
    why = (
        f"Measured there, the median lookup: {times}. The paper measured "
        + ", ".join(f"{ms:g} ms for the {t.name}" for t, ms in PAPER_LOOKUP_MS.items())
        + " database: the largest, asked last, is the slowest."
    )
    return Question(text, options, answer, why)


def sampling_question(hd: Generation, plain: Generation) -> Question:
    same = hd.tokens == plain.tokens
    rule = hd.sampling_rule or "gumbel"
    named = {
        "gumbel": "hdlib's Gumbel rule (the token at each position is the argmax of log p plus noise that the seed "
        "and the position fix, and a draft is kept when it is that token)",
        "rejection": "the rejection rule (a draft kept with probability min(1, p/q), else a draw from the residual)",
    }.get(rule, f"the {rule} rule")
    text = (
        f"HD, accepting drafts by {named}, and plain sampling, both at temperature {plain.temperature:g} with seed "
        f"{plain.seed}, answer the same prompt. What do they write?"
    )
    options = ("the same text", "different texts, from the same distribution", "different texts and distributions")
    # (a run shows the text; the distribution is notebook 06's test)
    answer = _option(options, [same, not same, False], text)
    why = (
        f"The engine ran both: the {len(plain.tokens)} tokens are {'identical' if same else 'not identical'}. "
        f"Under the {rule} rule, the seed's random draws decide every token, "
        "drafted or not, so HD writes plain sampling's sample."
    )
    return Question(text, options, answer, why)


def exit_quiz(
    lm: LoadedModel, prompt: str, tiers: Sequence[DraftTier], game: CardGame, max_new_tokens: int = 64
) -> Quiz:
    """The five questions, each answered by running the engine on `lm` and `prompt` with `tiers`
    (the paper's three, in order); `game` is the class's card game."""
    plain = generate(lm, prompt, tiers=[], max_new_tokens=max_new_tokens)
    hd = generate(lm, prompt, tiers=list(tiers), max_new_tokens=max_new_tokens, budget=QUIZ_BUDGET)
    sampled = dict(max_new_tokens=max_new_tokens, temperature=1.0, seed=SEED)
    hd_sample = generate(lm, prompt, tiers=list(tiers), **sampled)
    plain_sample = generate(lm, prompt, tiers=[], **sampled)
    contexts = [list(plain.prompt_ids) + list(plain.tokens[:k]) for k in range(4, len(plain.tokens), 2)]
    seconds = lookup_latency(tiers, contexts)
    questions = (
        lossless_question(hd, plain),
        rejected_step_question(hd),
        order_question(game),
        slowest_lookup_question(seconds),
        sampling_question(hd_sample, plain_sample),
    )
    return Quiz(questions, lm.name)


STYLE = """
.hd-quiz { font-family: sans-serif; font-size: 11pt; max-width: 19cm; color: #222; }
.hd-quiz h1 { font-size: 15pt; margin: 0 0 4pt; }
.hd-quiz ol.q > li { margin: 6pt 0; }
.hd-quiz ul { list-style: none; padding-left: 8pt; margin: 2pt 0; }
.hd-quiz .answers { border-top: 2pt dashed #444; margin-top: 10pt; padding-top: 4pt; font-size: 10pt; }
"""


def quiz_page(quiz: Quiz, standalone: bool = True) -> str:
    """The questions with a box per option, then the engine's answers below a cut line (folded
    when shown in a notebook)."""
    items = []
    for q in quiz.questions:
        options = "".join(f"<li>\u2610 {html.escape(o)}</li>" for o in q.options)
        items.append(f"<li>{html.escape(q.text)}<ul>{options}</ul></li>")
    answers = "".join(
        f"<li><b>{html.escape(q.options[q.answer])}</b>. {html.escape(q.why)}</li>" for q in quiz.questions
    )
    fold_open, fold_close = folded("the engine's answers", standalone)
    body = f"""<div class="hd-quiz">
<h1>Exit quiz: five questions</h1>
<p>Tick one box per question. The answers were given by running hdlib on {html.escape(quiz.model or "the model")}.</p>
<ol class="q">{"".join(items)}</ol>
<div class="answers">{fold_open}<p><b>The answers</b> (cut off before handing out), as the engine ran them:</p>
<ol>{answers}</ol>{fold_close}</div>
</div>"""
    return printable("HD exit quiz", STYLE, body, standalone)


def class_prompt(question_id: int = CLASS_PROMPT) -> str:
    """One of the project's prompts (data/prompts/prompts.jsonl): by default `CLASS_PROMPT`."""
    questions = load_questions(data_dir() / "prompts" / "prompts.jsonl")
    return next(q.turns[0] for q in questions if q.question_id == question_id)


def card_prompt() -> str:
    """The card game's prompt, `CARD_PROMPT`."""
    return class_prompt(CARD_PROMPT)


def write_handouts(
    lm: LoadedModel, out: str | Path, prompt: str | None = None, rounds: int = 4, cards: str | None = None
) -> tuple[CardGame, Quiz, list[Path]]:
    """The card game (the paper's three tiers of `lm`, `rounds` rounds of its greedy answer to `cards`)
    and the exit quiz on `prompt`, written to `out` as cards.html and quiz.html; the game, the quiz and
    the two paths. A `prompt` given and no `cards`: both from it; neither: the quiz on `class_prompt()`,
    the cards on `card_prompt()`."""
    cards = cards if cards is not None else prompt if prompt is not None else card_prompt()
    prompt = class_prompt() if prompt is None else prompt
    tiers = [make_tier(tier, lm) for tier in DECKS]
    game = CardGame.deal(lm, cards, tiers, rounds=rounds)
    quiz = exit_quiz(lm, prompt, tiers, game)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "cards.html", out / "quiz.html"]
    paths[0].write_text(card_page(game), encoding="utf-8")
    paths[1].write_text(quiz_page(quiz), encoding="utf-8")
    return game, quiz, paths
