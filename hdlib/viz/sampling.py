"""Lossless sampling, seen at one node: the rule's trials, and thousands of draws against the truth.

`trials_figure` draws what `node_trials` computes: the model's distribution at a node, then, for
each drafted child in turn, the residual it is tried against and its acceptance probability
(`outcome_distribution`: the exact distribution of the token emitted). `outcomes_figure` puts the
tokens drawn by hdlib's `Sampler` (`sampler_outcomes`) beside plain sampling's and the exact
distribution, with the chi-square p-value (`chi_square_p_value`); the same for a broken rule
(`accept_every_draft`) shows what a lossy rule looks like. No model is needed: the distribution is
given. The engine's `reject_step`, `gumbel_token` and `position_noise` are importable from here too,
so that a notebook reads the rule and its statistics from one module.

The textbook first, as notebook 06 teaches it, exactly on a small vocabulary:

- `textbook_output(p, q)`: a draft x drawn from q is accepted with probability min(1, p(x)/q(x)),
  else a token is drawn from the residual `residual(p, q)` = norm(max(0, p - q)); the token emitted
  has distribution min(p, q) + (1 - sum min(p, q)) * residual, which is p (`textbook_figure` draws it);
- `expected_tokens_per_step(a, g)`: a chain of g drafts, each accepted with rate a, emits
  (1 - a^(g+1)) / (1 - a) tokens per step on average; `chain_lengths` measures it with hdlib's
  `Sampler` walking a real chain;
- deterministic drafts (q a point mass, `point_mass`): accept x with p(x), else draw from p with x
  removed, which is `hdlib.engine.sampling.reject_step`;
- several candidates (`candidates_output`, SpecInfer's rule): each tried in turn against a residual
  updated after every rejection; for deterministic candidates, `outcome_distribution`;
- `sampler_outcomes`: the token one node emits, drawn by hdlib's `Sampler` itself (either rule; with
  no candidates it is plain sampling's draw, as `generate(..., tiers=())` makes it);
- `coupling`: plain sampling and HD on one prompt and seed, side by side (the Gumbel rule: the same text).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from hdlib.bench.divergence import first_divergence, next_logits
from hdlib.bench.paper_drafter import ChainTree
from hdlib.decoding import generate
from hdlib.engine.sampling import RejectStep, Sampler, Warp, reject_step

# The engine's rule, read beside the statistics below from one module (notebook 06 does)
from hdlib.engine.sampling import gumbel_token as gumbel_token
from hdlib.engine.sampling import position_noise as position_noise
from hdlib.engine.trace import Generation
from hdlib.engine.tree import DraftTree
from hdlib.errors import HDError
from hdlib.models.loading import LoadedModel
from hdlib.tiers import BONUS
from hdlib.viz.generation import ACCEPTED_COLOR, REJECTED_COLOR, RUN_COLORS, TokenLabel, bracket_label


def trials_figure(
    probs: torch.Tensor, trials: Sequence[Trial], final: torch.Tensor, label: TokenLabel | None = None, top: int = 10
) -> go.Figure:
    """One panel per stage: the model's distribution, the residual each candidate is tried against
    (the candidate's bar in orange, with its acceptance probability), the final draw's residual."""
    label = label or bracket_label
    base = probs.to(torch.float64) / probs.sum()
    shown = base.topk(min(top, base.numel())).indices.tolist()
    shown += [t.token for t in trials if t.token not in shown]
    names = [label(t) for t in shown]
    stages = [("the model's distribution", base, None)]
    stages += [(f"try {label(t.token)!r}: accept with p = {t.accept:.2f}", t.residual, t.token) for t in trials]
    stages.append(("all rejected: draw from what is left", final, None))
    fig = make_subplots(rows=len(stages), cols=1, shared_xaxes=True, subplot_titles=[s[0] for s in stages])
    for row, (_, dist, tried) in enumerate(stages, start=1):
        colors = [ACCEPTED_COLOR if t == tried else "#0072B2" for t in shown]
        fig.add_trace(
            go.Bar(
                x=names,
                y=[float(dist[t]) for t in shown],
                marker_color=colors,
                showlegend=False,
                hovertemplate="%{x}: %{y:.3f}<extra></extra>",
            ),
            row=row,
            col=1,
        )
        fig.update_yaxes(range=[0, 1], row=row, col=1)
    fig.update_layout(height=150 * len(stages) + 60, template="plotly_white", margin={"t": 50})
    return fig


def outcomes_figure(
    exact: torch.Tensor,
    runs: Mapping[str, Counter[int]],
    label: TokenLabel | None = None,
    top: int = 12,
) -> go.Figure:
    """Each run's share of draws per token (e.g. plain sampling, HD's rule, a broken rule) beside
    the exact distribution; each run's chi-square p-value against it in the legend."""
    label = label or bracket_label
    p = exact.to(torch.float64) / exact.sum()
    drawn = {t for counts in runs.values() for t in counts}
    shown = sorted(set(p.topk(min(top, p.numel())).indices.tolist()) | drawn, key=lambda t: -float(p[t]))[:top]
    names = [label(t) for t in shown]
    expected = {t: float(p[t]) for t in range(p.numel()) if p[t] > 0}
    fig = go.Figure(
        go.Scatter(
            name="exact",
            x=names,
            y=[float(p[t]) for t in shown],
            mode="markers",
            marker={"symbol": "line-ew-open", "size": 28, "color": "#000000", "line": {"width": 3}},
        )
    )
    for i, (name, counts) in enumerate(runs.items()):
        n = sum(counts.values())
        p_value = chi_square_p_value(counts, expected)
        fig.add_bar(
            name=f"{name}: {n:,} draws, chi-square p = {p_value:.3g}",
            x=names,
            y=[counts.get(t, 0) / n for t in shown],
            marker_color=REJECTED_COLOR if p_value < 1e-3 else RUN_COLORS[(i + 1) % len(RUN_COLORS)],
        )
    return _grouped(fig, "the token one node emits: draws against the exact distribution", "share of draws", 420)


def _grouped(fig: go.Figure, title: str, yaxis_title: str, height: int) -> go.Figure:
    """The layout of this module's grouped bar figures: a title, the y axis named, the legend below."""
    fig.update_layout(
        title=title,
        barmode="group",
        yaxis_title=yaxis_title,
        template="plotly_white",
        height=height,
        legend={"orientation": "h", "y": -0.2},
    )
    return fig


# One node, fixed probabilities, no model: the rule's trials, exactly ------------------------------

Rule = RejectStep  # a rejection step: (residual, token) -> (acceptance, the residual after a rejection)


def next_token_probs(lm: LoadedModel, context: Sequence[int], warp: Warp) -> torch.Tensor:
    """(V,) float64 on the CPU: the distribution plain sampling draws the token after `context` from
    (its logits as plain decoding computes them, on the model's device and in its dtype, then `warp`),
    ready for the exact rules here whichever device the model is on."""
    return warp(next_logits(lm.model, context).cpu())


def accept_every_draft(residual: torch.Tensor, token: int) -> tuple[float, torch.Tensor]:
    """A broken rule, for negative controls: every draft accepted, whatever the model thinks of it."""
    return 1.0, residual.clone()


@dataclass(frozen=True)
class Trial:
    """One candidate tried at a node: the distribution it was tried against and what became of it."""

    token: int
    reach: float  # probability that the walk gets to try this candidate (all before it rejected)
    accept: float  # probability it is accepted once tried: residual(token), the residual normalised
    residual: torch.Tensor  # (V,) the normalised residual it was tried against


def node_trials(
    probs: torch.Tensor, candidates: Sequence[int], rule: Rule | None = None
) -> tuple[list[Trial], torch.Tensor]:
    """Each candidate of one node tried in order by `rule` (default `reject_step`) against `probs`
    (V,), and the normalised residual the final draw takes when all are rejected."""
    rule = rule or reject_step
    trials, reach, residual = [], 1.0, probs.to(torch.float64)
    for token in candidates:
        accept, rest = rule(residual, token)
        trials.append(Trial(int(token), reach, accept, residual / residual.sum()))
        reach *= 1 - accept
        if reach == 0:
            break
        residual = rest
    return trials, residual / residual.sum()


def outcome_distribution(probs: torch.Tensor, candidates: Sequence[int], rule: Rule | None = None) -> torch.Tensor:
    """The exact distribution of the token one node emits (a candidate accepted, or the final draw)."""
    trials, residual = node_trials(probs, candidates, rule)
    out = torch.zeros_like(residual)
    for t in trials:
        out[t.token] += t.reach * t.accept
    reach = trials[-1].reach * (1 - trials[-1].accept) if trials else 1.0
    return out + reach * residual


def chi_square_p_value(counts: Counter, expected: dict) -> float:
    """Pearson's test of `counts` against the probabilities `expected` (outcome -> p, summing to 1);
    cells expecting fewer than 5 draws are pooled into one. An outcome of probability 0 drawn: 0."""
    n = sum(counts.values())
    if any(expected.get(k, 0.0) <= 0 for k in counts):
        return 0.0
    stat, pooled_o, pooled_e, cells = 0.0, 0, 0.0, 0
    for outcome, p in expected.items():
        e = n * p
        if e < 5:
            pooled_o, pooled_e = pooled_o + counts.get(outcome, 0), pooled_e + e
            continue
        stat += (counts.get(outcome, 0) - e) ** 2 / e
        cells += 1
    if pooled_e > 0:
        stat += (pooled_o - pooled_e) ** 2 / pooled_e
        cells += 1
    if cells < 2:
        return 1.0
    dof = torch.tensor((cells - 1) / 2, dtype=torch.float64)
    return float(torch.special.gammaincc(dof, torch.tensor(stat / 2, dtype=torch.float64)))


# The textbook rule, exactly, on a small vocabulary -------------------------------------------


def _distribution(p: torch.Tensor) -> torch.Tensor:
    p = p.to(torch.float64)
    if p.dim() != 1 or bool((p < 0).any()) or not float(p.sum()) > 0:
        raise HDError("a distribution is a 1-D tensor of non-negative numbers with a positive sum")
    return p / p.sum()


def point_mass(token: int, vocab: int) -> torch.Tensor:
    """(vocab,) the distribution of a deterministic draft: all its mass on `token`."""
    q = torch.zeros(vocab, dtype=torch.float64)
    q[token] = 1.0
    return q


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """(V,) norm(max(0, p - q)): what a rejection leaves to draw from. Where p <= q everywhere (p = q)
    a rejection never happens, and p itself is returned."""
    p, q = _distribution(p), _distribution(q)
    rest = (p - q).clamp(min=0)
    return rest / rest.sum() if float(rest.sum()) > 0 else p


def textbook_parts(p: torch.Tensor, q: torch.Tensor) -> tuple[torch.Tensor, float, torch.Tensor]:
    """The rule's two ways to emit a token: (V,) P(x drafted and accepted) = q(x) min(1, p(x)/q(x)) =
    min(p(x), q(x)); the probability of a rejection, 1 - sum min(p, q); (V,) the residual drawn from then."""
    p, q = _distribution(p), _distribution(q)
    accepted = torch.minimum(p, q)
    return accepted, max(0.0, 1.0 - float(accepted.sum())), residual(p, q)


def textbook_output(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """(V,) the exact distribution of the token the textbook rule emits: p, whatever q."""
    accepted, rejected, rest = textbook_parts(p, q)
    return accepted + rejected * rest


def candidates_output(p: torch.Tensor, qs: Sequence[torch.Tensor], update: bool = True) -> torch.Tensor:
    """(V,) the exact distribution of the token emitted when candidates drawn from `qs` (one
    distribution each; `point_mass` for a deterministic one) are tried in turn, SpecInfer's rule:
    candidate i is accepted with min(1, r(x)/q_i(x)) and, if rejected, r <- norm(max(0, r - q_i)),
    r starting at p; when all are rejected the token is drawn from r. `update=False` keeps trying
    against p: the mistake the update is there to avoid (a negative control)."""
    p = _distribution(p)
    r, out, reach = p, torch.zeros_like(p), 1.0
    for q in qs:
        accepted, rejected, rest = textbook_parts(r if update else p, q)
        out += reach * accepted
        reach *= rejected
        r = rest
    return out + reach * r


def textbook_figure(p: torch.Tensor, q: torch.Tensor, label: TokenLabel | None = None) -> go.Figure:
    """Per token: the draft distribution q, and the two parts of what the rule emits stacked, the
    drafts accepted (min(p, q)) and the draws after a rejection ((1 - sum min(p, q)) * residual),
    reaching exactly the target p (the black marks)."""
    label = label or bracket_label
    p, q = _distribution(p), _distribution(q)
    accepted, rejected, rest = textbook_parts(p, q)
    names = [label(t) for t in range(p.numel())]
    fig = go.Figure()
    fig.add_bar(name="q: the draft's distribution", x=names, y=q.tolist(), marker_color="#BBBBBB", offsetgroup="q")
    accepted_name, rejected_name = "drafted and accepted: min(p, q)", f"rejected ({rejected:.2f}), then the residual"
    fig.add_bar(name=accepted_name, x=names, y=accepted.tolist(), marker_color=ACCEPTED_COLOR, offsetgroup="out")
    fig.add_bar(
        name=rejected_name,
        x=names,
        y=(rejected * rest).tolist(),
        base=accepted.tolist(),
        marker_color="#0072B2",
        offsetgroup="out",
    )
    target = {"symbol": "line-ew-open", "size": 28, "color": "#000000", "line": {"width": 3}}
    fig.add_scatter(name="p: the target", x=names, y=p.tolist(), mode="markers", marker=target)
    return _grouped(fig, "the textbook rule: what it emits, per token, adds up to p", "probability", 400)


# Chains and nodes walked by hdlib's own Sampler ----------------------------------------------


def expected_tokens_per_step(a: float, g: int) -> float:
    """Tokens a step emits on average when a chain of `g` drafts is tried, each accepted with rate
    `a` once the walk reaches it: 1 + a + a^2 + ... + a^g = (1 - a^(g+1)) / (1 - a), the accepted
    drafts and the one token drawn after them."""
    if not 0 <= a <= 1 or g < 0:
        raise HDError(f"need an acceptance rate in [0, 1] and g >= 0 drafts, got a={a!r}, g={g!r}")
    return float(g + 1) if a == 1 else (1 - a ** (g + 1)) / (1 - a)


def chain_lengths(a: float, g: int, n: int, seed: int = 0, rule: str = "rejection") -> list[int]:
    """Tokens emitted by `n` steps of hdlib's `Sampler` walking a chain of `g` drafts (token 1)
    where the model gives each draft probability `a` (token 0 the rest): each draft, once reached,
    is accepted with rate a, independently."""
    tree = DraftTree(root=1)
    tree.add([1] * g, BONUS, max_new=g, max_depth=g)  # a chain: each draft the only child of the one before
    probs = torch.tensor([1 - a, a], dtype=torch.float64)
    sampler = Sampler(Warp(temperature=1.0), seed=seed, rule=rule)
    # the Gumbel rule's noise is keyed by position: every step walks positions of its own
    return [len(sampler.walk(tree, lambda node: probs, i * (g + 1))[0]) for i in range(n)]


def sampler_outcomes(
    probs: torch.Tensor, candidates: Sequence[int], n: int, seed: int = 0, rule: str | Rule = "gumbel"
) -> Counter[int]:
    """The token one node emits, drawn `n` times by hdlib's `Sampler` walking a tree whose root has
    `candidates` as children, counted. With no candidates under the Gumbel rule this is plain
    sampling's draw (`generate(..., tiers=())`) at positions 0 to n - 1 of the seed. `rule` is a
    sampling rule's name, or a rejection step of one's own (`accept_every_draft`, a broken one) that
    the sampler's rejection rule takes instead of `reject_step`."""
    tree = ChainTree(root=0)  # candidates side by side: a token given twice is tried twice
    for token in candidates:
        tree.add([int(token)], BONUS, max_new=1, max_depth=1)
    base = _distribution(probs)
    sampler = Sampler(Warp(temperature=1.0), seed=seed, rule=rule if isinstance(rule, str) else "rejection")
    step = reject_step if isinstance(rule, str) else rule
    counts: Counter[int] = Counter()
    for i in range(n):
        path, last = sampler.walk(tree, lambda node: base, i, step=step)
        counts[tree.tokens[path[1]] if len(path) > 1 else last] += 1
    return counts


@dataclass(frozen=True)
class Coupling:
    """Plain sampling and HD on one prompt with one seed: the Gumbel rule's promise, checked."""

    plain: Generation  # `generate(lm, prompt, tiers=(), temperature=T, seed=s)`: hdlib's plain sampling
    hd: Generation

    @property
    def same(self) -> bool:
        return self.plain.tokens == self.hd.tokens

    @property
    def parted_at(self) -> int | None:
        """The first token where the answers differ; None when they are the same."""
        return first_divergence(self.plain.tokens, self.hd.tokens)

    def describe(self) -> str:
        head = f"{self.hd.sampling_rule} rule, seed {self.hd.seed}: HD's MAT {self.hd.mat:.2f}"
        if self.same:
            return f"{head}; HD's {len(self.hd.tokens)} tokens are plain sampling's, token for token"
        return f"{head}; HD's answer parts from plain sampling's at token {self.parted_at}"


def coupling(
    lm: LoadedModel,
    prompt: str | Sequence[int],
    temperature: float,
    seed: int,
    max_new_tokens: int = 24,
    rule: str = "gumbel",
    **hd_options,
) -> Coupling:
    """Plain sampling (hdlib's keyed sampler, no tiers) and HD (`hd_options`: tiers, budget, ...),
    both with `rule` and `seed`. Under the Gumbel rule they agree token for token."""
    sampled = {"temperature": temperature, "seed": seed, "max_new_tokens": max_new_tokens, "sampling_rule": rule}
    return Coupling(generate(lm, prompt, tiers=(), **sampled), generate(lm, prompt, **hd_options, **sampled))
