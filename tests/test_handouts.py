"""The class's handouts (hdlib.viz.cards, hdlib.viz.quiz): the card game's key is what the engine
does with the cards, and each quiz answer is the option the engine's run fits."""

from __future__ import annotations

import html
from dataclasses import replace

import pytest
from support.tiny import save_tiny

from hdlib.decoding import generate
from hdlib.errors import HDError
from hdlib.models.loading import load_model
from hdlib.tiers.base import DraftTier, Tier
from hdlib.viz.cards import DECKS, DEPTH, ORDERS, CardGame, CardRound
from hdlib.viz.quiz import card_prompt, class_prompt, lossless_question, order_question, rejected_step_question

HAND_TIER = Tier("hand", "H", "#332288")


class Hand(DraftTier):
    """The cards played at a round, as a tier: what the engine is given to verify."""

    tier = HAND_TIER

    def __init__(self, cards):
        self.cards = [tuple(c) for c in cards]

    def propose(self, context, budget):
        return self.cards


def test_an_order_plays_each_decks_cards_in_turn_up_to_the_hand():
    round = CardRound(0, "", (5, 6, 7, 8), {"C": ((5, 6, 9),), "M": ((5, 6, 7, 8),), "S": ((1,), (2,))})
    game = CardGame((round,), hand_size=2)
    assert game.hand(round, "CMS") == ((5, 6, 9), (5, 6, 7, 8))
    assert game.hand(round, "SCM") == ((1,), (2,))
    assert game.scores("CMS") == (5,) and game.scores("SCM") == (1,)
    assert game.scores("MSC") == (5,)
    with pytest.raises(HDError, match="each deck's letter"):
        game.scores("CXS")
    with pytest.raises(HDError, match="each deck's letter"):
        game.scores("CCS")


def test_the_rounds_are_picked_so_that_the_order_matters_in_some_and_not_in_others():
    """pick_rounds: of made-up rounds, one where a lower deck's card writes under CMS (the C card missed),
    one where the orders write different counts, one where the same, then the earliest that fit; each
    at least `spacing` tokens from the others, in the answer's order."""
    from hdlib.viz.cards import pick_rounds

    reply = (5, 6, 7, 8)
    same = {"C": (reply,), "M": ((9,),), "S": (reply,)}  # both orders play a card of all four
    differs = {"C": (reply,), "M": ((9,),), "S": ((1,), (2,))}  # SCM: its S cards and C's; CMS: C's
    lower = {"C": ((1,),), "M": (reply[:2],), "S": ((3,), (4,))}  # C misses, M writes 2 under CMS
    rounds = tuple(CardRound(i * 4, "", reply, cards) for i, cards in enumerate([same, same, differs, lower, same]))
    game = CardGame(rounds, hand_size=2)
    assert [game.winner(r, "CMS") for r in rounds] == ["C", "C", "C", "M", "C"]
    picked = pick_rounds(game, 3, spacing=4)
    assert [r.index for r in picked] == [0, 8, 12]  # the same, then the one that differs, then the lower deck's
    scores = [(game.scores(o)) for o in ORDERS]
    assert scores[0] != scores[1]
    assert [r.index for r in pick_rounds(game, 3, spacing=8)] == [0, 12]  # too close to fit a third


def test_a_round_scores_what_the_engine_emits_from_its_hand_on_a_tiny_model(tmp_path):
    lm = load_model(str(save_tiny(tmp_path / "m")))
    prompt = [5, 6, 7, 8, 9] * 3
    reply = generate(lm, prompt, tiers=[], max_new_tokens=DEPTH + 1, chat=False).tokens
    assert len(reply) == DEPTH + 1  # (no end-of-sequence token among them)
    cards = {"C": (tuple(reply[:2]) + (0,),), "M": ((reply[0], 1),), "S": (tuple(reply[:DEPTH]), (2,))}
    game = CardGame((CardRound(0, "", tuple(reply[:DEPTH]), cards),), hand_size=2)
    for order in ("CMS", "SCM", "MSC"):
        (hand,) = [game.hand(r, order) for r in game.rounds]
        step = generate(lm, prompt, tiers=[Hand(hand)], budget=16, max_new_tokens=DEPTH + 1, chat=False).steps[0]
        assert (len(step.tokens),) == game.scores(order), order


def test_the_card_games_key_is_what_the_engine_emits_for_every_round_and_order(handouts):
    game, _, _ = handouts
    lm = load_model("smollm2-135m")
    prompt_ids = lm.encode_prompt(card_prompt())
    answer = generate(lm, prompt_ids, tiers=[], max_new_tokens=game.rounds[-1].index + DEPTH)
    assert len(game.rounds) == 4
    cms, scm = (game.scores(order) for order in ORDERS)  # the order matters in some rounds, not in others
    assert any(a != b for a, b in zip(cms, scm)) and any(a == b for a, b in zip(cms, scm))
    assert any(game.winner(r, "CMS") in ("M", "S") for r in game.rounds)  # a lower deck's card wrote, C's missed
    for n, r in enumerate(game.rounds):
        assert r.reply == tuple(answer.tokens[r.index : r.index + DEPTH])  # the model's own next tokens
        assert all(r.cards[t.letter] for t in DECKS)  # every deck holds a card at every round
        context = prompt_ids + answer.tokens[: r.index]
        for order in ORDERS:
            hand = Hand(game.hand(r, order))
            step = generate(lm, context, tiers=[hand], budget=16, max_new_tokens=DEPTH + 1).steps[0]
            assert len(step.tokens) == game.scores(order)[n], (r.index, order)


def test_the_cards_are_the_tiers_own_drafts_there(handouts):
    from hdlib.databases.registry import make_tier
    from hdlib.viz.lookup import tier_drafts

    game, _, _ = handouts
    lm = load_model("smollm2-135m")
    prompt_ids = lm.encode_prompt(card_prompt())
    first = game.rounds[0]
    answer = generate(lm, prompt_ids, tiers=[], max_new_tokens=first.index)
    drafts = tier_drafts([make_tier(t, lm) for t in DECKS], prompt_ids + answer.tokens)
    for letter, cards in first.cards.items():
        assert set(cards) <= {d.tokens[:DEPTH] for d in drafts if d.tier.letter == letter}


def test_the_handouts_print_their_cards_key_and_the_engines_answers(handouts):
    game, quiz, out = handouts
    cards, printed_quiz = (out / "cards.html").read_text(), (out / "quiz.html").read_text()
    totals = [sum(game.scores(order)) for order in ORDERS]
    assert f"<th>{totals[0]}</th><th>{totals[1]}</th>" in cards  # the key's totals
    assert cards.count('class="card"') == sum(len(c) for r in game.rounds for c in r.cards.values())
    assert len(quiz.questions) == 5 and printed_quiz.count("\u2610") == sum(len(q.options) for q in quiz.questions)
    for q in quiz.questions:
        assert f"<li><b>{html.escape(q.options[q.answer])}</b>. {html.escape(q.why)}</li>" in printed_quiz
    answers = {q.text.split("?")[0]: q.options[q.answer] for q in quiz.questions}
    assert next(a for t, a in answers.items() if "which order wrote more" in t) == (
        "CMS" if totals[0] > totals[1] else "SCM" if totals[1] > totals[0] else "the same"
    )
    assert next(a for t, a in answers.items() if "How many of HD's tokens differ" in t) == "none"  # float32
    assert next(a for t, a in answers.items() if "rejects every draft" in t).startswith("1:")
    sampling = next(t for t in answers if t.startswith("HD, accepting drafts by hdlib's Gumbel rule"))
    assert answers[sampling] == "the same text" and "plain sampling" in sampling  # the rule named in the question


def test_the_command_writes_both_pages_and_prints_the_games_totals(monkeypatch, tmp_path, capsys):
    """`hdlib handouts` is the library's write_handouts with what it printed: checked here on a game
    and a quiz made by hand (the packaged model's are checked above)."""
    import hdlib.viz.quiz as quiz_module
    from hdlib.cli import main
    from hdlib.viz.quiz import Question, Quiz

    game = CardGame((CardRound(0, "", (5, 6), {"C": ((5, 6),), "M": ((9,),), "S": ((7,), (8,))}),), hand_size=2)
    asked = {}

    def write(lm, out, prompt, rounds):
        asked.update(out=out, prompt=prompt, rounds=rounds)
        return game, Quiz((Question("q?", ("a", "b"), 0, "why"),)), [tmp_path / "cards.html", tmp_path / "quiz.html"]

    monkeypatch.setattr(quiz_module, "write_handouts", write)
    monkeypatch.setattr("hdlib.models.loading.load_model", lambda *a, **k: None)
    assert main(["handouts", "--out", str(tmp_path), "--rounds", "3", "--prompt", "Hi"]) == 0
    assert asked == {"out": tmp_path, "prompt": "Hi", "rounds": 3}
    printed = capsys.readouterr().out
    assert "card game: 1 rounds; tokens written: CMS 3, SCM 1" in printed
    assert f"wrote {tmp_path / 'cards.html'}" in printed and "exit quiz: 1 questions" in printed
    assert main(["handouts", "--rounds", "0"]) == 2  # not a number of rounds


def test_a_quiz_answer_follows_the_run_not_the_author():
    from hdlib.databases.registry import make_tier

    lm = load_model("smollm2-135m")
    tiers = [make_tier(t, lm) for t in DECKS]
    prompt = class_prompt()
    plain = generate(lm, prompt, tiers=[], max_new_tokens=24)
    hd = generate(lm, prompt, tiers=tiers, max_new_tokens=24, budget=4)
    assert lossless_question(hd, plain).answer == 0
    # a run where a few tokens differ picks the second option; the answer is the run's
    step = hd.steps[-1]
    changed = replace(step, tokens=(*step.tokens[:-1], step.tokens[-1] + 1))
    assert lossless_question(replace(hd, steps=[*hd.steps[:-1], changed]), plain).answer == 1
    rejected = rejected_step_question(hd)
    assert rejected.options[rejected.answer].startswith("1:")
    round = CardRound(0, "", (5, 6), {"C": ((7,),), "M": ((9,),), "S": ((5, 6),)})
    question = order_question(CardGame((round,), hand_size=2))  # CMS plays C's and M's cards and writes 1 token, SCM 3
    assert question.options[question.answer] == "SCM"
    with pytest.raises(HDError, match="rejected every draft"):
        rejected_step_question(replace(hd, steps=[s for s in hd.steps if s.n_accepted_drafts]))
