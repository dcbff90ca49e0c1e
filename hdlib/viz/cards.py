"""The card game: the paper's hierarchy played by hand, from a real trace of the model.

Three decks, C (context), M (model) and S (statistics), hold the drafts the paper's three databases
really give at a few points of the model's greedy answer: `CardGame.deal` asks each tier what it
would draft there (`tier_drafts`, each card cut to the paper's chains of `DEPTH` tokens) and keeps
the model's own next tokens for the teacher, who plays the model. A round is played as the paper's
HD drafts: take this round's cards from the decks in the order played (CMS, say) until the hand
holds `HAND` cards; the model keeps the card that matches its next tokens furthest (a card counts
the tokens it matches from its start) and adds one token of its own. The game is played twice, CMS
then SCM, and the class compares the tokens each order wrote.

The rounds are dealt so that choosing the order matters in some and not in others (`pick_rounds`):
where the answer allows, one round where a lower deck's card writes the tokens under CMS because
the C cards missed, one where the two orders write different counts, and one where they write the
same; the key gives each round's count under each order and the deck whose card wrote it, and the
page asks the question the tally answers (`QUESTION`).

`card_page` prints the game on one page: the text so far of every round, the cards to cut out, and
the teacher's key (the model's tokens and each order's score), which is cut off before handing out.
A test checks the key against the engine: a one-step generation whose only tier drafts the hand
emits exactly the round's score.

    >>> game = CardGame(rounds=(CardRound(0, "...the", (5, 6, 7, 8), {"C": ((5, 6, 9),), "S": ((1,), (5,))}),),
    ...                 hand_size=2)
    >>> game.hand(game.rounds[0], "CMS"), game.hand(game.rounds[0], "SCM")
    (((5, 6, 9), (1,)), ((1,), (5,)))
    >>> game.scores("CMS"), game.scores("SCM")
    ((3,), (2,))
    >>> game.winner(game.rounds[0], "CMS"), game.winner(game.rounds[0], "SCM")
    ('C', 'S')
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from hdlib.decoding import generate
from hdlib.engine.budget import FIXED_BUDGET
from hdlib.errors import HDError
from hdlib.models.loading import LoadedModel
from hdlib.tiers.base import DraftTier, Tier
from hdlib.viz.generation import TokenLabel, bracket_label, token_labeller
from hdlib.viz.lookup import tier_drafts

DECKS = (Tier.CONTEXT, Tier.MODEL, Tier.STATISTICS)  # the paper's three databases
HAND = 3  # cards played per round: fewer than the decks hold, so the order decides which are played, and
# more than one deck holds, so the deck asked second is played too
DEPTH = 4  # tokens per card: the paper's chains
CARDS_PER_DECK = 2  # each tier's best drafts at a round
TEXT_TOKENS = 24  # of the answer so far, printed above a round's cards
ORDERS = ("CMS", "SCM")  # the paper's order, then the statistics tier first
QUESTION = (
    "In which rounds did a card of a lower deck (M or S) write the tokens when you played CMS? What had "
    "the C cards matched in those rounds? Why does a lower deck's card only matter when the higher ones missed?"
)


def matched(card: Sequence[int], reply: Sequence[int]) -> int:
    """Tokens of `card` that match the model's `reply` from their start: what verification accepts."""
    n = 0
    for drafted, said in zip(card, reply):
        if drafted != said:
            break
        n += 1
    return n


@dataclass(frozen=True)
class CardRound:
    """One point of the answer: the text so far (its end), the model's next tokens, each deck's cards."""

    index: int  # the answer's tokens before this point
    text: str  # the end of the answer so far, as printed
    reply: tuple[int, ...]  # the model's next DEPTH tokens (greedy): the teacher's
    cards: Mapping[str, tuple[tuple[int, ...], ...]]  # deck letter -> its cards, best first


@dataclass(frozen=True)
class CardGame:
    rounds: tuple[CardRound, ...]
    decks: tuple[Tier, ...] = DECKS
    hand_size: int = HAND
    prompt: str = ""
    model: str = ""
    label: TokenLabel = field(default=bracket_label, compare=False, repr=False)

    def hand(self, round: CardRound, order: str) -> tuple[tuple[int, ...], ...]:
        """The cards played at `round` under `order` (deck letters): each deck's in turn, up to the hand."""
        unknown = set(order) - {tier.letter for tier in self.decks}
        if unknown or len(set(order)) != len(order):
            raise HDError(f"an order is each deck's letter at most once, of {self._letters()}; got {order!r}")
        return tuple(card for letter in order for card in round.cards.get(letter, ()))[: self.hand_size]

    def scores(self, order: str) -> tuple[int, ...]:
        """Tokens written at each round under `order`: the best played card's matched tokens, plus the
        model's own token."""
        return tuple(max((matched(c, r.reply) for c in self.hand(r, order)), default=0) + 1 for r in self.rounds)

    def winner(self, round: CardRound, order: str) -> str | None:
        """The deck whose card wrote the tokens at `round` under `order`: the first played card that
        matches furthest (None: no card matched a token, the model wrote its own alone)."""
        hand = self.hand(round, order)
        best = max((matched(c, round.reply) for c in hand), default=0)
        if best == 0:
            return None
        card = next(c for c in hand if matched(c, round.reply) == best)
        return next(letter for letter in order if card in round.cards.get(letter, ()))

    def _letters(self) -> str:
        return "".join(tier.letter for tier in self.decks)

    @classmethod
    def deal(
        cls,
        lm: LoadedModel,
        prompt: str,
        tiers: Sequence[DraftTier],
        rounds: int = 4,
        spacing: int = 8,
        max_new_tokens: int = 96,
    ) -> CardGame:
        """The game at `rounds` points of `lm`'s greedy answer to `prompt` where every one of `tiers`
        drafts something, at least `spacing` tokens apart (the first after 4 tokens, so the context
        tier has text to match), chosen by `pick_rounds` so that the order matters in some rounds
        and not in others; each tier is asked as `tier_drafts` asks it, with the fixed budget of the
        notebooks."""
        if rounds < 1:
            raise HDError(f"a card game has at least one round, got {rounds}")
        gen = generate(lm, prompt, tiers=[], max_new_tokens=max_new_tokens)  # greedy: the model's reply
        label = token_labeller(lm)
        answer = list(gen.tokens)
        points: list[CardRound] = []
        for k in range(4, len(answer) - DEPTH + 1):
            context = list(gen.prompt_ids) + answer[:k]
            rows = tier_drafts(tiers, context, budget=FIXED_BUDGET)
            cards = {
                tier.tier.letter: tuple(dict.fromkeys(r.tokens[:DEPTH] for r in rows if r.tier == tier.tier))[
                    :CARDS_PER_DECK
                ]
                for tier in tiers
            }
            if all(cards.values()):
                text = lm.decode(answer[max(0, k - TEXT_TOKENS) : k])  # (special tokens skipped)
                points.append(CardRound(k, text, tuple(answer[k : k + DEPTH]), cards))
        every = cls(tuple(points), tuple(t.tier for t in tiers), HAND, prompt, lm.name, label)
        dealt = pick_rounds(every, rounds, spacing)
        if len(dealt) < rounds:
            raise HDError(
                f"only {len(dealt)} of {rounds} rounds: the answer has too few points where every tier "
                "drafts; try a longer answer or another prompt"
            )
        return replace(every, rounds=dealt)

    def _repr_html_(self) -> str:
        return card_page(self, standalone=False)


def pick_rounds(game: CardGame, n: int, spacing: int = 8) -> tuple[CardRound, ...]:
    """`n` of `game`'s rounds, at least `spacing` answer tokens apart, in the answer's order, chosen so
    that the order matters in some and not in others: first, where the answer has them, a round where
    under the first order (CMS) a lower deck's card writes the tokens because the first deck's cards
    missed, a round where the two orders write different counts, and one where they write the same;
    then the earliest rounds that fit."""
    first, second = ORDERS
    a, b = game.scores(first), game.scores(second)

    def lower(i: int) -> bool:
        return game.winner(game.rounds[i], first) not in (None, first[0])

    kinds = [lower, lambda i: a[i] != b[i], lambda i: a[i] == b[i], lambda i: True]
    chosen: list[int] = []
    for kind in kinds:
        for i in range(len(game.rounds)):
            if len(chosen) == n:
                break
            far = all(abs(game.rounds[i].index - game.rounds[j].index) >= spacing for j in chosen)
            if i not in chosen and far and kind(i):
                chosen.append(i)
                if kind is not kinds[-1]:
                    break  # one of each kind, then the earliest that fit
    return tuple(game.rounds[i] for i in sorted(chosen))


def _shortened(text: str, words: int = 40) -> str:
    split = text.split()
    return " ".join(split[:words]) + (" \u2026" if len(split) > words else "")


def _tokens_html(tokens: Sequence[int], label: TokenLabel) -> str:
    return "".join(f'<span class="tok">{_visible(label(t))}</span>' for t in tokens)


def _visible(text: str) -> str:
    """A token's text as printed: spaces as a dot, line breaks as a return sign, so none is lost."""
    return html.escape(text.replace(" ", "\u00b7").replace("\n", "\u21b5"))


STYLE = """
.hd-cards { font-family: sans-serif; font-size: 11pt; max-width: 19cm; color: #222; }
.hd-cards h1 { font-size: 15pt; margin: 0 0 4pt; }
.hd-cards p, .hd-cards li { margin: 2pt 0; }
.hd-cards table.deal { border-collapse: separate; border-spacing: 4pt; width: 100%; }
.hd-cards td.card { border: 1.5pt dashed #888; padding: 4pt; vertical-align: top; width: 15%; height: 38pt; }
.hd-cards td.text { font-size: 9.5pt; padding-top: 6pt; }
.hd-cards .deck { font-weight: bold; font-size: 9pt; }
.hd-cards .tok { display: inline-block; border: 1pt solid #bbb; border-radius: 3pt; padding: 0 2pt;
  margin: 1pt; font-family: monospace; font-size: 10pt; }
.hd-cards .key { border-top: 2pt dashed #444; margin-top: 8pt; padding-top: 4pt; font-size: 10pt; }
.hd-cards .key table { border-collapse: collapse; }
.hd-cards .key td, .hd-cards .key th { border: 1pt solid #ccc; padding: 1pt 5pt; }
"""


def card_page(game: CardGame, standalone: bool = True) -> str:
    """The game as one printable page: rules, one row per round (its text so far, then each deck's
    cards, to cut out), and the teacher's key below the cut line (folded when shown in a notebook)."""
    label = game.label
    first, second = ORDERS
    decks = list(game.decks)
    width = max(len(r.cards.get(t.letter, ())) for r in game.rounds for t in decks)
    head = "".join(f'<th colspan={width} style="color:{t.color}">{t.letter}: {t.name}</th>' for t in decks)
    rows = []
    for n, r in enumerate(game.rounds, 1):
        cut = "\u2026" if r.index > TEXT_TOKENS else ""
        text = html.escape(r.text).replace("\n", " \u21b5 ")
        rows.append(
            f'<tr><td class="text" colspan={1 + width * len(decks)}><b>round {n}</b>, the answer so far: '
            f"{cut}{text}</td></tr>"
        )
        cells = ["<td></td>"]
        for tier in decks:
            cards = r.cards.get(tier.letter, ())
            for c in cards:
                cells.append(
                    f'<td class="card"><div class="deck" style="color:{tier.color}">{tier.letter} \u00b7 round {n}'
                    f"</div>{_tokens_html(c, label)}</td>"
                )
            cells.extend(["<td></td>"] * (width - len(cards)))
        rows.append("<tr>" + "".join(cells) + "</tr>")
    key_rows = []
    for n, (r, a, b) in enumerate(zip(game.rounds, game.scores(first), game.scores(second)), 1):
        by = [game.winner(r, order) or "none" for order in ORDERS]
        key_rows.append(
            f"<tr><td>{n}</td><td>{_tokens_html(r.reply, label)}</td><td>{a} ({by[0]})</td><td>{b} ({by[1]})</td></tr>"
        )
    fold_open, fold_close = folded("the teacher's key", standalone)
    total = (sum(game.scores(first)), sum(game.scores(second)))
    key_rows.append(
        f"<tr><th colspan=2>tokens written in {len(game.rounds)} rounds</th><th>{total[0]}</th><th>{total[1]}</th></tr>"
    )
    body = f"""<div class="hd-cards">
<h1>The hierarchy, by hand: {len(decks)} decks, {len(game.rounds)} rounds</h1>
<p>The prompt: <i>{html.escape(_shortened(game.prompt))}</i></p>
<p>The cards are what each database of {html.escape(game.model or "the model")} really drafts at these
points of its answer. Cut them out and sort them into decks {", ".join(t.letter for t in decks)}.
The teacher plays the model.</p>
<ol>
<li>Read the round's text so far. Take this round's cards from the decks in the order played
({first} first: every {first[0]} card, then {first[1]}, then {first[2]}) until you hold {game.hand_size}.</li>
<li>The teacher reads the model's next tokens. A card scores the tokens it matches from its start
(a dot is a space); the round writes the best card's score plus 1, the model's own token.</li>
<li>Play all rounds in order {first}, then again in order {second}; note each round's tokens and the
deck of the card that wrote them. Which order wrote more? Why?</li>
<li>{html.escape(QUESTION)}</li>
</ol>
<table class="deal"><tr><th></th>{head}</tr>
{"".join(rows)}
</table>
<div class="key">{fold_open}
<p><b>The teacher's key</b> (cut off before handing out): the model's next tokens (greedy) and the
tokens each order writes, with the deck whose card wrote them (none: the model's own token alone).</p>
<table><tr><th>round</th><th>the model's next tokens</th><th>{first}</th><th>{second}</th></tr>
{"".join(key_rows)}</table>{fold_close}</div>
</div>"""
    return printable("HD card game", STYLE, body, standalone)


def folded(summary: str, standalone: bool) -> tuple[str, str]:
    """What opens and closes an answer key: nothing on paper; in a notebook, on a projector, a fold
    the teacher opens."""
    return ("", "") if standalone else (f"<details><summary>{html.escape(summary)}</summary>", "</details>")


def printable(title: str, style: str, body: str, standalone: bool = True) -> str:
    """`body` with its style: a whole A4 page to print, or (not `standalone`) a notebook's output."""
    style = f"<style>{style}\n@page {{ size: A4; margin: 1cm; }}</style>"
    if not standalone:
        return style + body
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"{style}</head><body>{body}</body></html>"
    )
