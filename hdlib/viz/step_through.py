"""The step-through: one generation replayed step by step, with the settings that made it as widgets.

The logic is in small plain classes (`Settings`, `TraceCache`: `hdlib.viz.step_settings`) that tests
drive without a browser; `StepThrough` only wires widgets to them with `observe`. Each figure is a
`FigureOutput` (`hdlib.viz.figure_output`), replaced whole when it changes. Nothing is generated
twice: moving the step slider only redraws, and returning to earlier settings is a dictionary lookup.

    view = StepThrough(lm)                       # in a notebook cell: the whole GUI
    view.tier_boxes[Tier.MODEL].value = False    # what a click does; the figures follow
    view.budget_choice.value = "4"               # a tight budget: the order of the tiers matters
    view.play_game(5, seed=7)                    # the predict game: 5 steps drawn by the teacher's seed
    StepThrough(lm, predict=True, game_seed=7)   # a view that opens in the game: nothing of it drawn before
    StepThrough(lm, tiers=["C", MyTier(), "M"])  # a tier of your own, in its colour, beside hdlib's
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from contextlib import contextmanager
from itertools import permutations

import ipywidgets as widgets

from hdlib.databases.registry import make_tier, parse_tiers
from hdlib.decoding import PriorChoice, generate
from hdlib.engine.budget import FIXED_BUDGET
from hdlib.engine.trace import Generation
from hdlib.errors import HDError
from hdlib.models.loading import LoadedModel
from hdlib.tiers import DEFAULT_TIERS, DraftTier, Tier
from hdlib.viz.figure_output import FigureOutput
from hdlib.viz.game import GAME_STEPS, RULE, Game, pick_steps, tier_options
from hdlib.viz.generation import (
    TokenLabel,
    tier_stats_html,
    tier_steps_figure,
    token_figure,
    token_labeller,
)
from hdlib.viz.step_settings import (
    AUTO,
    GenerateFn,
    Settings,
    TierFactory,
    TraceCache,
    budget_options,
    prompt_choices,
    summary_html,
)
from hdlib.viz.tree import draft_tree_figure


class StepThrough:
    """One generation replayed step by step, with the settings that made it as widgets.

    `tiers` are the tiers enabled at first, in order: names, letters, `Tier`s or ready `DraftTier`s
    (a tier of your own gets a checkbox and its colour like hdlib's); hdlib's tiers not among them
    are offered unticked. `generate` (Settings -> Generation) defaults to `hdlib.generate` on `lm`
    with tiers from `tier_factory` (default: the given `DraftTier`, else `make_tier(tier, lm)`);
    tests inject a tiny model or test tiers through either. `budget` is the draft budget the budget
    control opens on (4, 16, 64 or auto: None, the value-ranked tree); `prior` is the acceptance prior
    the auto budget starts from (`hdlib.decoding.resolve_prior`; None: the packaged model's, read-only,
    else the cache's learned one). `prompts` maps labels to prompt texts (default: the project's
    prompt set); the text box holds the prompt actually used and can be typed into.

    Predict mode (`predict`, or `play_game`) is a game (`hdlib.viz.game`) on `game_steps` steps of
    the generation (a number, drawn among the steps that drafted anything by `game_seed`, which a
    teacher announces so that the class plays the same steps; or the steps themselves), played in
    the generation's order. While it is on, nothing of a step not yet revealed is drawn (its tokens,
    its tree's verdict, and no later step's tokens), nor anything of the whole generation (the tokens
    per step, the tiers' table, the summary), and every control that could show them is disabled (the
    step slider, play, the settings that regenerate, and the predict toggle itself until the step is
    revealed). The student guesses in `guess_accepted` how many drafts the model accepts and in
    `guess_tier` which tier drafted most of them; `reveal` draws the step and scores the round
    (`hdlib.viz.game.RULE`, shown under the score), and `score` keeps the running score (`game`).
    `next_step` ("next") goes to the game's next step. When the last step is revealed the game is
    over and everything is drawn. With `predict=True` the view opens in the game, so that its first
    drawing holds nothing of it.
    """

    def __init__(
        self,
        lm: LoadedModel | None = None,
        prompts: Mapping[str, str] | Sequence[str] | None = None,
        *,
        generate: GenerateFn | None = None,
        tier_factory: TierFactory | None = None,
        label: TokenLabel | None = None,
        tiers: Sequence[Tier | str | DraftTier] = DEFAULT_TIERS,
        temperature: float = 0.0,
        seed: int = 0,
        max_new_tokens: int = 64,
        budget: int | None = FIXED_BUDGET,
        prior: PriorChoice = None,
        width: int = 80,
        predict: bool = False,
        game_steps: int | Sequence[int] = GAME_STEPS,
        game_seed: int = 0,
    ) -> None:
        if generate is None and lm is None:
            raise HDError("StepThrough needs a model (lm) or a generate function")
        self.lm = lm
        self.prior = prior
        self.max_new_tokens = max_new_tokens
        self.width = width
        given = parse_tiers(tiers)
        ready = {t.tier: t for t in given if isinstance(t, DraftTier)}
        self.tier_factory = tier_factory or (lambda tier: ready[tier] if tier in ready else make_tier(tier, lm))
        self.label = label or (token_labeller(lm) if lm is not None else None)
        self.cache = TraceCache(generate or self._generate)
        self.error: str | None = None  # why the last settings gave no generation
        self._gen: Generation | None = None
        self._quiet = False
        self.game: Game | None = None  # predict mode: the rounds played on this generation
        self.game_steps, self.game_seed = game_steps, game_seed  # what a game plays unless told otherwise

        if prompts is None:
            prompts = prompt_choices()
        choices = dict(prompts) if isinstance(prompts, Mapping) else {p: p for p in prompts}
        if not choices:
            raise HDError("StepThrough needs at least one prompt")
        enabled = [t.tier if isinstance(t, DraftTier) else t for t in given]
        offered = enabled + [t for t in DEFAULT_TIERS if t not in enabled]

        self._make_controls(choices, offered, enabled, temperature, seed, budget)
        self._make_predict_controls()
        self.predict.value = predict  # before the first drawing: a game's view never shows the whole generation
        self.tokens_fig, self.tree_fig, self.steps_fig = FigureOutput(), FigureOutput(), FigureOutput()
        self.widget = self._wire()
        self.refresh()

    def _make_controls(
        self,
        choices: dict[str, str],
        offered: list[Tier],
        enabled: list[Tier],
        temperature: float,
        seed: int,
        budget: int | None,
    ) -> None:
        """The prompt, tier, order, budget, temperature, seed and step controls."""
        self.prompt_choice = widgets.Dropdown(
            options=list(choices.items()), description="prompt", layout={"width": "95%"}
        )
        self.prompt_text = widgets.Textarea(
            value=self.prompt_choice.value, continuous_update=False, layout={"width": "95%", "height": "4em"}
        )
        self.tier_boxes = {
            t: widgets.Checkbox(value=t in enabled, description=t.name, indent=False, layout={"width": "110px"})
            for t in offered
        }
        self.order = widgets.Dropdown(
            options=[(" \u2192 ".join(t.name for t in p), p) for p in permutations(offered)],
            value=tuple(offered),
            description="order",
        )
        self.temperature = widgets.FloatSlider(
            value=temperature,
            min=0.0,
            max=1.5,
            step=0.05,
            description="temperature",
            continuous_update=False,
            style={"description_width": "initial"},  # the default width cuts the word to "temperat…"
        )
        self.budget_choice = widgets.ToggleButtons(
            options=budget_options(budget),
            value=AUTO if budget is None else str(budget),
            description="budget",
            tooltips=["draft tokens per step"] * (len(budget_options(budget)) - 1) + ["the value-ranked tree"],
            style={"button_width": "64px"},  # "auto" whole (48 px cut it to "a…")
        )
        self.seed = widgets.BoundedIntText(value=seed, min=0, max=2**31 - 1, description="seed")
        self.status = widgets.HTML()
        self.tier_table = widgets.HTML()
        self.step = widgets.IntSlider(value=0, min=0, max=0, description="step", continuous_update=False)
        self.play = widgets.Play(value=0, min=0, max=0, interval=800, description="play")
        widgets.link((self.play, "value"), (self.step, "value"))  # kernel-side, so tests see it too

    def _make_predict_controls(self) -> None:
        """Predict mode: its toggle, the two guesses, the reveal and next buttons and the score."""
        self.predict = widgets.ToggleButton(value=False, description="predict", tooltip="play the predict game")
        self.guess_accepted = widgets.BoundedIntText(value=0, min=0, max=4096, description="accepted")
        self.guess_tier = widgets.Dropdown(options=[], description="tier")
        self.reveal = widgets.Button(description="reveal", tooltip="draw the step and score the guess")
        self.next_step = widgets.Button(description="next", tooltip="the next step of the game")
        self.score = widgets.HTML()
        self.score.add_class("hd-score")  # the browser test reads it
        self.rule = widgets.HTML(f"<small>{html.escape(RULE)}</small>")
        self.predict_box = widgets.HBox([self.guess_accepted, self.guess_tier, self.reveal, self.next_step])

    def _wire(self) -> widgets.VBox:
        """The controls observed, and all of them laid out in one box."""
        self.prompt_choice.observe(self._on_choice, names="value")
        settings = [self.prompt_text, self.order, self.budget_choice, self.temperature, self.seed]
        for w in [*settings, *self.tier_boxes.values()]:
            w.observe(self._on_settings, names="value")
        self.step.observe(self._on_step, names="value")
        self.predict.observe(self._on_predict, names="value")
        self.reveal.on_click(lambda button: self.reveal_guess())
        self.next_step.on_click(lambda button: self.go_to_next_step())

        return widgets.VBox(
            [
                self.prompt_choice,
                self.prompt_text,
                widgets.HBox([*self.tier_boxes.values(), self.order]),
                self.budget_choice,
                widgets.HBox([self.temperature, self.seed]),
                self.status,
                widgets.HBox([self.play, self.step, self.predict]),
                self.predict_box,
                self.score,
                self.rule,
                self.tokens_fig.widget,
                self.tree_fig.widget,
                self.steps_fig.widget,
                self.tier_table,
            ]
        )

    # The logic -------------------------------------------------------------------------------------

    @property
    def settings(self) -> Settings:
        return Settings(
            prompt=self.prompt_text.value,
            tiers=tuple(t for t in self.order.value if self.tier_boxes[t].value),
            temperature=round(float(self.temperature.value), 6),
            seed=int(self.seed.value),
            max_new_tokens=self.max_new_tokens,
            budget=None if self.budget_choice.value == AUTO else int(self.budget_choice.value),
        )

    @property
    def generation(self) -> Generation | None:
        """The generation on show (None until one could be made)."""
        return self._gen

    def _generate(self, s: Settings) -> Generation:
        assert self.lm is not None
        return generate(
            self.lm,
            s.prompt,
            tiers=[self.tier_factory(t) for t in s.tiers],
            max_new_tokens=s.max_new_tokens,
            budget=s.budget,
            temperature=s.temperature,
            seed=s.seed,
            prior=self.prior,
        )

    def refresh(self) -> None:
        """Show the generation of the current settings (generated now unless cached)."""
        try:
            settings = self.settings
            cached = settings in self.cache
            if not cached:
                self.status.value = "<i>generating\u2026</i>"
            gen = self.cache.get(settings)
        except HDError as error:  # a bad prompt, a missing database: said, and the last figures stay
            self.error = str(error)
            self.status.value = f'<span style="color:#D55E00">{html.escape(self.error)}</span>'
            return
        self.error = None
        if gen is not self._gen:
            self.game = None  # another generation: another game
        self._gen = gen
        last = max(len(gen.steps) - 1, 0)
        with self._hold():
            self.play.max = self.step.max = last
            self.step.value = min(self.step.value, last)
        note = "from the cache" if cached else f"generated in {self.cache.last_s:.2f} s"
        self.status.value = summary_html(gen, f"{note}; {len(self.cache.traces)} settings cached")
        self.tier_table.value = tier_stats_html(gen)
        if self.predict.value and self.game is None and gen.steps:
            self.play_game()
        else:
            self._draw_step()

    @property
    def playing(self) -> bool:
        """Whether a game is on: predict mode, with a step of the game not revealed yet."""
        return bool(self.predict.value and self.game is not None and self.game.next_step is not None)

    @property
    def revealed(self) -> bool:
        """Whether the step on show may be drawn whole: out of a game, or played in it."""
        return not self.playing or (self.game is not None and self.game.round_of(self.step.value) is not None)

    @property
    def _locked(self) -> list[widgets.Widget]:
        """What a game disables while it is on: what moves the step, and what regenerates."""
        settings = [self.prompt_choice, self.prompt_text, self.order, self.budget_choice, self.temperature, self.seed]
        return [self.step, self.play, *settings, *self.tier_boxes.values()]

    def _draw_step(self) -> None:
        """The step on show; in a game, nothing of a step not revealed, of later steps, or of the whole
        generation, and the controls that could show them disabled."""
        gen, index = self._gen, self.step.value
        if gen is None:
            return
        shown, playing = self.revealed, self.playing
        self.predict_box.layout.display = self.rule.layout.display = None if self.predict.value else "none"
        self.guess_accepted.disabled = self.guess_tier.disabled = self.reveal.disabled = shown or not playing
        self.next_step.disabled = not (playing and shown)
        for w in self._locked:
            w.disabled = playing
        self.predict.disabled = playing and not shown  # out of the game only from a revealed step
        last = index if shown else index - 1  # the last step whose tokens may be drawn
        if playing and self.game is not None and self.game.next_step is not None:
            last = min(last, self.game.next_step - 1)  # never past a step of the game not revealed
        self.tokens_fig.show(token_figure(gen, last, self.label, self.width))
        step = gen.steps[index] if gen.steps else None
        if step is not None:
            hide = not shown
            self.tree_fig.show(draft_tree_figure(step, self.label, tiers=gen.tier_order, hide_outcome=hide))
        if playing:
            self.steps_fig.clear()
            self.tier_table.value = ""
            self.status.value = "<i>the predict game: the summaries are held back until the game ends</i>"
        else:
            self.steps_fig.show(tier_steps_figure(gen, index))
            self.tier_table.value = tier_stats_html(gen)
        if self.predict.value:
            played = self.game.round_of(index) if self.game is not None else None
            said = html.escape(played.message) if played is not None else "guess, then reveal"
            if self.game is not None and not playing:
                said = f"the game is over: {said}" if played is not None else "the game is over"
                self.status.value = summary_html(gen, "the game is over")
            self.score.value = f"<b>{said}</b><br>{html.escape(self.game.summary) if self.game else ''}"

    def play_game(self, steps: int | Sequence[int] | None = None, seed: int | None = None) -> Game:
        """Start the predict game and show its first step, hidden. `steps`: how many steps to play,
        drawn by `seed` among the steps that drafted anything (`hdlib.viz.game.pick_steps`: a teacher
        announces the seed, and the class plays the same steps), or the steps themselves; played in
        the generation's order. Default: the view's `game_steps` and `game_seed`."""
        gen = self._gen
        if gen is None or not gen.steps:
            raise HDError("there is no generation to play on")
        steps = self.game_steps if steps is None else steps
        seed = self.game_seed if seed is None else seed
        if isinstance(steps, int):
            chosen = pick_steps(gen, steps, seed)
        else:
            chosen = sorted({int(s) for s in steps})
            if not chosen or any(not 0 <= s < len(gen.steps) for s in chosen):
                raise HDError(
                    f"the game's steps must be among this generation's 0..{len(gen.steps) - 1}, got {list(steps)} "
                    "(or give how many to play: play_game(5, seed=...))"
                )
        self.game = Game(chosen)
        self.guess_tier.options = tier_options(gen)
        with self._hold():
            self.predict.value = True
            self.step.value = chosen[0]
        self._draw_step()
        return self.game

    def reveal_guess(self) -> None:
        """Score the guess against the step's record (`hdlib.viz.game`) and draw the step whole."""
        gen = self._gen
        if gen is None or not gen.steps or self.game is None or self.revealed:
            return
        self.game.play(gen.steps[self.step.value], self.guess_accepted.value, self.guess_tier.value)
        self._draw_step()

    def go_to_next_step(self) -> None:
        """The game's next step, once the one on show is revealed."""
        if self.playing and self.revealed and self.game is not None and (following := self.game.next_step) is not None:
            self.guess_accepted.value = 0
            with self._hold():
                self.step.value = following
            self._draw_step()  # hidden

    # The wiring ------------------------------------------------------------------------------------

    @contextmanager
    def _hold(self):
        self._quiet = True
        try:
            yield
        finally:
            self._quiet = False

    def _on_choice(self, change: dict) -> None:
        self.prompt_text.value = change["new"]  # its own observer regenerates

    def _on_settings(self, change: dict) -> None:
        self.refresh()

    def _on_step(self, change: dict) -> None:
        if not self._quiet:
            self._draw_step()

    def _on_predict(self, change: dict) -> None:
        if self._quiet:
            return
        if change["new"]:
            if self._gen is not None and self._gen.steps:
                self.play_game()  # a new game each time predict is turned on
        else:  # out of the game: everything drawn again
            self.game = None
            self._draw_step()
            if self._gen is not None:
                self.status.value = summary_html(self._gen, "the game is over")

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)
