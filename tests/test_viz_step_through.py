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


def test_the_predict_game_hides_each_step_until_revealed_and_keeps_the_score(view):
    gen = view.generation
    k = max(range(1, len(gen.steps)), key=lambda i: len(gen.steps[i].accepted_nodes))
    assert all(drawn_outcome(view, view.step.value).values()) and view.predict_box.layout.display == "none"
    game = view.play_game([k, k - 1, 0])  # a teacher's sequence
    assert view.step.value == k and view.predict.value and view.predict_box.layout.display != "none"
    assert drawn_outcome(view, k) == {"tokens": 0, "bars": 0, "verdict": 0, "tier table": 0}
    assert all(drawn_outcome(view, later)["tokens"] == 0 for later in range(k, len(gen.steps)))  # nor later steps
    assert "MAT" not in view.status.value and "guess, then reveal" in view.score.value
    assert list(view.guess_tier.options) == viz.game.tier_options(gen)
    truth = viz.Outcome.of(gen.steps[k])
    view.guess_accepted.value, view.guess_tier.value = truth.accepted, truth.tier
    assert drawn_outcome(view, k)["verdict"] == 0  # a guess reveals nothing
    view.reveal.click()
    shown = drawn_outcome(view, k)
    assert shown["tokens"] == len(gen.steps[k].tokens) and shown["bars"] > 0 and shown["verdict"] > 0
    assert "2 of 2 points" in view.score.value and view.reveal.disabled and view.guess_accepted.disabled
    view.next_step.click()  # the sequence's next step: hidden again
    assert view.step.value == k - 1 and drawn_outcome(view, k - 1)["verdict"] == 0 and not view.reveal.disabled
    wrong = viz.Outcome.of(gen.steps[k - 1])
    view.guess_accepted.value = wrong.accepted + 1
    view.guess_tier.value = next(t for t in view.guess_tier.options if t != wrong.tier)
    view.reveal.click()
    assert "0 of 2 points" in view.score.value and "score: 2 of 4 points after 2 steps" in view.score.value
    guesses = [(r.step, r.accepted, r.tier) for r in game.rounds]
    assert game.points == viz.game.score(gen, guesses) == 2  # the engine's count, computed afresh
    view.step.value = k  # a played step comes back revealed, its round's message with it
    assert drawn_outcome(view, k)["verdict"] > 0 and "2 of 2 points" in view.score.value
    view.predict.value = False  # out of the game: everything drawn again
    assert all(drawn_outcome(view, k).values()) and "MAT" in view.status.value
    assert len(view.calls) == 1  # playing never generates
    with pytest.raises(HDError, match="must be among"):
        view.play_game([len(gen.steps)])


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
