"""hdlib.viz.step_through: the step-through widget driven on a tiny model.

The widget tests click what a user clicks (checkboxes, order, temperature, seed, prompt, step) and
read back the figures the widgets show, comparing it with the generation the cache holds for the
new settings; test tiers (oracles that draft the true answer with mistakes) stand in for every
tier, so that every tier's tokens can appear.
"""

from __future__ import annotations

import html

import pytest
from support.echo import ECHO, PROMPT, Echo
from support.hand_traces import trace_of
from support.oracle import OracleTier
from support.tiny import VOCAB
from support.tiny_prompts import MAX_NEW, PROMPTS

import hdlib
from hdlib import viz
from hdlib.engine.trace import Generation
from hdlib.errors import HDError
from hdlib.tiers import BONUS, Tier

C, R, M, S, T = Tier.CONTEXT, Tier.RECYCLED, Tier.MODEL, Tier.STATISTICS, BONUS


def colour_of_points(fig) -> list[str]:
    """The colour of every token drawn in a token figure, one entry per token."""
    return [t.textfont.color for t in fig.data for _ in t.x or ()]


class ShortOracle(OracleTier):
    """An oracle that drafts at most 3 tokens, so that the tiers after it get some budget too."""

    def propose(self, context, budget):
        return super().propose(context, min(budget, 3))


class CountingGenerate:
    """A generate function for StepThrough: oracle tiers in the order asked; it records its calls."""

    def __init__(self, lm, truths):
        self.lm, self.truths, self.calls = lm, truths, []

    def __call__(self, s: viz.Settings) -> Generation:
        self.calls.append(s)
        tiers = [ShortOracle(self.truths[s.prompt], VOCAB, seed=k, tier=t) for k, t in enumerate(s.tiers)]
        return hdlib.generate(
            self.lm, s.prompt, tiers=tiers, max_new_tokens=s.max_new_tokens, budget=s.budget,
            temperature=s.temperature, seed=s.seed,
        )  # fmt: skip


@pytest.fixture
def view(lm, truths):
    fn = CountingGenerate(lm, truths)
    v = viz.StepThrough(lm, PROMPTS, generate=fn, max_new_tokens=MAX_NEW, budget=8)
    v.calls = fn.calls
    return v


def shown_tokens(view) -> dict[str, list[int]]:
    """Trace name -> token ids drawn in the token figure."""
    return {t.name: [int(c[0]) for c in t.customdata or ()] for t in view.tokens_fig.figure.data}


def expected_tokens(gen: Generation, upto: int) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {viz.generation.tier_name(t): [] for t in viz.figure_tiers(gen)}
    for s in gen.steps[: upto + 1]:
        for token, tier in zip(s.tokens, s.tiers):
            out[viz.generation.tier_name(tier)].append(token)
    return out


def tree_nodes(view) -> dict[str, list[int]]:
    return {
        t.name: [int(c[0]) for c in t.customdata or ()] for t in view.tree_fig.figure.data if t.customdata is not None
    }


def last_step(view) -> None:
    view.step.value = view.step.max


def test_the_figures_show_the_generation_and_the_step(view):
    gen = view.generation
    assert len(view.calls) == 1 and view.calls[0] == view.settings
    assert view.calls[0].tiers == (C, R, M, S)
    assert len(gen.steps) > 3
    for k in range(len(gen.steps)):
        view.step.value = k
        assert shown_tokens(view) == expected_tokens(gen, k)
        tree = gen.steps[k].tree
        assert int(trace_of(view.tree_fig.figure, "root").customdata[0][1]) == tree.root
        for tier in (C, R, M, S):
            assert tree_nodes(view)[tier.name] == [i for i in range(1, len(tree)) if tree.tiers[i] is tier]
        assert view.steps_fig.figure.layout.shapes[0].x0 == k - 0.5
    view.play.value = 1  # the play button drives the slider
    assert view.step.value == 1
    assert len(view.calls) == 1  # stepping never generates
    # All three test tiers drafted accepted tokens: each appears in its own colour.
    last_step(view)
    colours = set(colour_of_points(view.tokens_fig.figure))
    assert {t.color for t in gen.tier_counts} == colours
    assert len(gen.tier_counts) >= 3


def test_only_the_context_tier_colours_nothing_as_model_or_statistics(view):
    view.tier_boxes[R].value = False
    view.tier_boxes[M].value = False
    view.tier_boxes[S].value = False
    assert view.calls[-1].tiers == (C,)
    gen = view.generation
    assert gen.tier_order == [C]
    last_step(view)
    colours = colour_of_points(view.tokens_fig.figure)
    assert len(colours) == len(gen.tokens)
    assert M.color not in colours and S.color not in colours and R.color not in colours
    assert C.color in colours  # the oracle context tier did get drafts accepted
    for k in range(len(gen.steps)):
        view.step.value = k
        nodes = tree_nodes(view)
        assert not {"recycled", "model", "statistics"} & set(nodes)  # tiers not asked have no trace at all
    bars = {t.name: list(t.y) for t in view.steps_fig.figure.data}
    assert not {"recycled", "model", "statistics"} & set(bars)
    assert sum(bars["context"]) == gen.tier_counts[C] > 0
    # No tier at all: plain decoding, every token the model's own, one per step.
    view.tier_boxes[C].value = False
    last_step(view)
    assert view.generation.mat == 1.0
    assert set(colour_of_points(view.tokens_fig.figure)) == {T.color}


def test_reordering_tiers_reaches_the_drafter_and_the_figures(view):
    view.order.value = (S, M, R, C)
    assert view.calls[-1].tiers == (S, M, R, C) and len(view.calls) == 2
    gen = view.generation
    assert gen.tier_order == [S, M, R, C]
    view.step.value = 0
    assert tree_nodes(view)["statistics"][:1] == [1]  # the first tier asked drafts the first node
    last_step(view)
    assert shown_tokens(view) == expected_tokens(gen, view.step.value)
    bars = {t.name: list(t.y) for t in view.steps_fig.figure.data}
    assert bars == {
        **{
            viz.generation.tier_name(t): [sum(x == t for x in s.tiers) for s in gen.steps]
            for t in viz.figure_tiers(gen)
        },
        "drafted": [s.tree.n_drafted for s in gen.steps],
    }
    # A disabled tier keeps its place in the order: re-enabling it gives back the same setting.
    view.tier_boxes[M].value = False
    assert view.calls[-1].tiers == (S, R, C)
    view.tier_boxes[M].value = True
    assert len(view.calls) == 3 and view.generation is gen


def test_temperature_and_seed_regenerate_once_per_setting(view):
    greedy = view.generation
    view.seed.value = 5  # greedy ignores the seed: nothing to generate
    assert len(view.calls) == 1
    view.temperature.value = 0.8
    assert len(view.calls) == 2 and view.calls[-1].temperature == 0.8 and view.calls[-1].seed == 5
    sampled = view.generation
    assert (sampled.temperature, sampled.seed) == (0.8, 5)
    last_step(view)
    assert shown_tokens(view) == expected_tokens(sampled, view.step.value)
    view.seed.value = 6
    assert len(view.calls) == 3 and view.generation.seed == 6
    other = view.generation
    view.seed.value = 5
    assert len(view.calls) == 3 and view.generation is sampled  # back to a cached setting
    view.temperature.value = 0.0
    assert len(view.calls) == 3 and view.generation is greedy
    assert other is not sampled
    assert [s.seed for s in view.cache.traces] == [None, 5, 6]


def test_prompt_from_the_list_or_typed_and_bad_prompts_said(view, truths):
    view.prompt_choice.value = PROMPTS["second"]
    assert view.prompt_text.value == PROMPTS["second"] == view.calls[-1].prompt
    assert view.generation.prompt_ids == truths[PROMPTS["second"]][: len(view.generation.prompt_ids)]
    view.prompt_text.value = "how are you"
    assert view.calls[-1].prompt == "how are you" and len(view.calls) == 3
    last_step(view)
    before = shown_tokens(view)
    assert before == expected_tokens(view.generation, view.step.value)
    view.prompt_text.value = "   "
    assert view.error and "empty" in html.unescape(view.status.value)
    assert shown_tokens(view) == before  # the last figures stay


def test_default_generate_uses_the_tier_factory_and_stays_lossless(lm, truths):
    prompt = PROMPTS["first"]
    made = []

    def factory(tier):
        made.append(tier)
        return OracleTier(truths[prompt], VOCAB, seed=3, tier=tier)

    view = viz.StepThrough(lm, [prompt], tier_factory=factory, tiers=["context", "statistics"], max_new_tokens=MAX_NEW)
    assert made == [C, S] and view.order.value == (C, S, R, M) and not view.tier_boxes[M].value
    gen = view.generation
    plain = truths[prompt][len(gen.prompt_ids) :]
    assert gen.tokens == plain[: len(gen.tokens)] and len(gen.tokens) == len(plain)
    assert gen.tier_order == [C, S]
    assert gen.pieces and len(gen.pieces) == len(gen.tokens)  # hdlib.generate gives each token's text


def test_a_tier_that_cannot_be_made_is_said_not_raised(lm):
    def factory(tier):
        raise HDError(f"no {tier.name} database here")

    view = viz.StepThrough(lm, ["how are you"], tier_factory=factory, tiers=["model"], max_new_tokens=4)
    assert view.generation is None and "no model database here" in view.status.value
    view.step.value = 0  # nothing to draw, nothing raised
    view.tier_boxes[M].value = False  # plain decoding needs no tier
    assert view.generation is not None and view.generation.mat == 1.0 and view.error is None
    last_step(view)
    assert colour_of_points(view.tokens_fig.figure) == [T.color] * len(view.generation.tokens)


def test_descriptions_longer_than_the_default_width_get_room(view):
    """ipywidgets cuts a description past its default width (about 8 characters): "temperat\u2026"."""

    def walk(w):
        yield w
        for child in getattr(w, "children", ()):
            yield from walk(child)

    boxes = list(view.tier_boxes.values())  # a checkbox's description is beside it, never cut
    long = [w for w in walk(view.widget) if w not in boxes and len(getattr(w, "description", "")) > 8]
    assert view.temperature in long
    assert all(w.style.description_width == "initial" for w in long)


def test_the_budget_control_regenerates_with_that_budget_once_per_setting(view):
    assert view.budget_choice.options == ("4", "8", "16", "64", "auto") and view.budget_choice.value == "8"
    assert view.calls[-1].budget == 8
    first = view.generation
    for choice, budget in [("4", 4), ("64", 64), ("auto", None)]:
        view.budget_choice.value = choice
        assert view.calls[-1].budget == budget and view.generation is not first
        steps = view.generation.steps
        if budget is None:  # the value-ranked tree: each step sized by its estimates
            assert all(s.estimates is not None for s in steps)
        else:
            assert all(s.estimates is None and s.tree.n_drafted <= budget for s in steps)
            assert max(s.budget for s in steps) == budget
    assert len(view.calls) == 4
    view.budget_choice.value = "8"  # back to a cached setting
    assert len(view.calls) == 4 and view.generation is first
    with pytest.raises(HDError, match="budget"):
        viz.Settings("hello", budget=0)


def test_the_step_through_shows_each_tiers_rates(view):
    gen = view.generation
    for r in viz.generation.tier_rates(gen):
        proposers = [s.tree.proposers[i] for s in gen.steps for i in range(1, len(s.tree))]
        drafted = sum(any(t is r.tier for t, _ in p) for p in proposers)
        accepted = sum(
            r.tier in s.tree.proposing_tiers(node)
            for s in gen.steps
            for node, tier in zip(s.accepted_nodes[1:], s.tiers)
            if tier is not T
        )
        assert (r.drafted, r.accepted) == (drafted, accepted) and drafted > 0
        assert r.accepted >= r.stats.credited and f"{r.tier.name}</td>" in view.tier_table.value
    view.tier_boxes[M].value = False
    assert "model</td>" not in view.tier_table.value  # the table follows the generation


def test_it_shows_in_its_own_colour_in_step_through(lm):
    view = viz.StepThrough(lm, {"p": PROMPT}, tiers=["C", Echo()], max_new_tokens=24, budget=8)
    # The given tiers in order, ticked, then hdlib's others, unticked.
    offered = ["context", "echo", "recycled", "model", "statistics"]
    assert [box.description for box in view.tier_boxes.values()] == offered
    assert [t for t, box in view.tier_boxes.items() if box.value] == [C, ECHO]
    gen = view.generation
    assert gen.tier_order == [C, ECHO] and gen.tier_counts[ECHO] > 0
    view.step.value = view.step.max
    (echo_tokens,) = [t for t in view.tokens_fig.figure.data if t.name == "echo"]
    assert echo_tokens.textfont.color == ECHO.color and len(echo_tokens.x) == gen.tier_counts[ECHO]
    drafted = []
    for k in range(len(gen.steps)):
        view.step.value = k
        (echo_nodes,) = [t for t in view.tree_fig.figure.data if t.name == "echo"]
        assert echo_nodes.marker.color == ECHO.color
        drafted += list(echo_nodes.customdata or ())
    assert drafted  # it drafted, step after step
    assert "echo" in view.status.value and ECHO.color in view.status.value
    view.tier_boxes[ECHO].value = False
    assert view.generation.tier_order == [C] and "echo" not in [t.name for t in view.tokens_fig.figure.data]


def drawn_verdict(fig) -> tuple[int, int, int]:
    """Points of the accepted path's edges, crosses and bonus token drawn in a tree figure."""
    return tuple(len(trace_of(fig, name).x or ()) for name in ("accepted path", "rejected", "bonus"))


def drawn_outcome(view, index: int) -> dict[str, int]:
    """What the widget draws of step `index`: its tokens, its bar, its tree's verdict, the tier table."""
    tokens = sum(int(c[2]) == index for t in view.tokens_fig.figure.data for c in t.customdata or ())
    bars = sum(x == index for t in view.steps_fig.figure.data if t.type == "bar" for x in t.x or ())
    return {"tokens": tokens, "bars": bars, "verdict": sum(drawn_verdict(view.tree_fig.figure)),
            "tier table": len(view.tier_table.value)}  # fmt: skip


def locked(view) -> dict[str, bool]:
    """Whether each control a game locks is disabled: what moves the step, what regenerates, next, predict."""
    controls = {"step": view.step, "play": view.play, "prompt": view.prompt_choice, "text": view.prompt_text,
                "order": view.order, "budget": view.budget_choice, "temperature": view.temperature, "seed": view.seed,
                "next": view.next_step, "predict": view.predict,
                **{t.name: box for t, box in view.tier_boxes.items()}}  # fmt: skip
    return {name: w.disabled for name, w in controls.items()}


def test_the_predict_game_hides_each_step_until_revealed_and_keeps_the_score(view):
    """A game on a teacher's steps, played in the generation's order: until a step is revealed nothing
    of it, of later steps or of the whole generation is drawn, and every control that could show them
    is disabled; a reveal scores by the rule (a step with no draft accepted worth one point); the game
    over, everything is drawn and the controls come back."""
    gen = view.generation
    k = max(range(1, len(gen.steps)), key=lambda i: len(gen.steps[i].accepted_nodes))
    assert all(drawn_outcome(view, view.step.value).values()) and view.predict_box.layout.display == "none"
    assert not any(v for name, v in locked(view).items() if name != "next")  # "next" is the game's alone
    game = view.play_game([k, k - 1, 0])  # a teacher's steps: played in the generation's order
    assert game.steps == sorted({0, k - 1, k}) and view.step.value == 0 and view.predict.value
    assert view.predict_box.layout.display != "none" and view.rule.layout.display != "none"
    assert all(locked(view).values())  # nothing can move to another step, regenerate, or leave the game
    assert not (view.guess_accepted.disabled or view.guess_tier.disabled or view.reveal.disabled)
    for hidden in (0, k - 1, k):
        assert drawn_outcome(view, hidden)["tokens"] == 0 and drawn_outcome(view, hidden)["verdict"] == 0
    assert not view.steps_fig.figure.data and view.steps_fig.widget.outputs == ()  # no whole-generation chart
    assert "MAT" not in view.status.value and "guess, then reveal" in view.score.value
    assert list(view.guess_tier.options) == viz.game.tier_options(gen) and "none" not in view.guess_tier.options
    view.step.value = k  # what a disabled slider would do, were it moved: still nothing of the game's steps
    assert drawn_outcome(view, k - 1)["tokens"] == 0
    view.step.value = 0
    scored = []
    for step in game.steps:
        truth = viz.Outcome.of(gen.steps[step])
        assert view.step.value == step and drawn_outcome(view, step)["verdict"] == 0
        view.guess_accepted.value = truth.accepted
        view.guess_tier.value = truth.tier if truth.accepted else view.guess_tier.options[0]
        view.reveal.click()
        worth = 2 if truth.accepted else 1
        scored.append(worth)
        assert f"{worth} of {worth} point" in view.score.value
        shown = drawn_outcome(view, step)
        assert shown["tokens"] == len(gen.steps[step].tokens) and shown["verdict"] > 0
        if step != k:
            assert not view.next_step.disabled and not view.predict.disabled and view.step.disabled
            assert not view.steps_fig.figure.data  # the game goes on: still no chart
            view.next_step.click()
    assert f"score: {sum(scored)} of {sum(scored)} points after {len(game.steps)} steps" in view.score.value
    assert "the game is over" in view.score.value and "MAT" in view.status.value
    assert not any(v for name, v in locked(view).items() if name != "next") and view.next_step.disabled
    assert view.steps_fig.figure.data and drawn_outcome(view, k)["bars"] > 0  # the game over: all drawn
    guesses = [(r.step, r.accepted, r.tier) for r in game.rounds]
    assert game.points == viz.game.score(gen, guesses) == sum(scored)  # the engine's count, computed afresh
    view.predict.value = False  # out of the game
    assert view.reveal.disabled and view.game is None and view.predict_box.layout.display == "none"
    view.predict.value = True  # predict on again: a new game on the view's own steps and seed
    assert view.game is not game and view.game.steps == viz.game.pick_steps(gen, 5, seed=0)
    assert len(view.calls) == 1  # playing never generates
    with pytest.raises(HDError, match=r"must be among this generation's 0\.\.\d+"):
        view.play_game([len(gen.steps)])


def test_a_game_draws_its_steps_by_seed_among_those_that_drafted(view):
    """pick_steps: the same seed, the same steps; another seed, others; only steps where something was
    drafted; as many as asked, or all there are; a view opened in the game draws nothing of it."""
    gen = view.generation
    drafted = [s.index for s in gen.steps if s.tree.n_drafted > 0]
    picked = viz.game.pick_steps(gen, 3, seed=7)
    assert picked == viz.game.pick_steps(gen, 3, seed=7) == sorted(picked) and set(picked) <= set(drafted)
    assert any(viz.game.pick_steps(gen, 3, seed=s) != picked for s in range(8))
    assert viz.game.pick_steps(gen, 10_000) == drafted
    with pytest.raises(HDError, match="at least one step"):
        viz.game.pick_steps(gen, 0)
    assert view.play_game(3, seed=7).steps == picked


def test_a_view_opened_in_the_game_draws_nothing_of_it(lm, truths):
    fn = CountingGenerate(lm, truths)
    v = viz.StepThrough(lm, PROMPTS, generate=fn, max_new_tokens=MAX_NEW, budget=8, predict=True, game_steps=2,
                        game_seed=3)  # fmt: skip
    gen = v.generation
    assert v.game is not None and v.game.steps == viz.game.pick_steps(gen, 2, seed=3)
    assert not v.steps_fig.figure.data and v.tier_table.value == "" and all(locked(v).values())
    assert drawn_outcome(v, v.game.steps[0])["tokens"] == 0


def test_a_round_is_worth_one_point_where_no_draft_was_accepted():
    """A guess of "0, none" is one judgement: a step with no draft accepted scores the count alone."""
    outcome = viz.Outcome(0, viz.game.NONE)
    assert viz.Round(3, 0, "context", outcome).points == 1 and viz.Round(3, 0, "context", outcome).worth == 1
    assert viz.Round(3, 2, "context", outcome).points == 0
    assert viz.Round(3, 2, "context", viz.Outcome(2, "context")).points == 2
    assert "1 of 1 point" in viz.Round(3, 0, "model", outcome).message


def test_the_step_through_passes_its_prior_to_every_auto_budget_generation(lm, tmp_path, monkeypatch):
    import hdlib.decoding
    from hdlib.engine.forward_time import flat_profile
    from hdlib.engine.prior import AcceptancePrior

    monkeypatch.setenv("HDLIB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(hdlib.decoding, "load_or_measure", lambda model, *args, **kwargs: flat_profile())
    view = viz.StepThrough(lm, {"p": PROMPT}, tiers=["C"], max_new_tokens=8, budget=None, prior="fresh")
    assert (view.generation.prior_source, view.generation.prior_digest) == ("fresh", AcceptancePrior.fresh().digest())
    view.budget_choice.value = "4"  # a fixed budget: no prior
    assert view.generation.prior_source == ""
    assert not (tmp_path / "cache" / "acceptance").exists()
