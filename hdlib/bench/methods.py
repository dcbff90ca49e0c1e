"""The methods a benchmark compares, by name: `ar`, `hf`, `hf-pld`, `hd`, `hd:ORDER`, `hd:all-orders`
(`hd` and `hd:ORDER` with `+window`: a Lookahead window feeding the context tier; `+ask-all`: every
tier asked at every step, the hierarchy's gate off; `+no-recycling`: the recycled tier left out;
`+candidates=N` and `+share-window=N`: one of hdlib's chosen constants set otherwise), the paper's HD as
its authors ran it (`hd-paper`, `+mend`, `+trie`) and the field's drafters verified by hdlib's
engine (`recycling`, `rest`, `suffix`, `lookahead`); each but `ar` and transformers' with an optional
fixed budget `@N` (see hdlib.bench)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from itertools import permutations

from hdlib.bench.arms import method_of, split_arm, with_arms
from hdlib.bench.baselines import PROMPT_LOOKUP_TOKENS
from hdlib.bench.paper_drafter import PaperSettings
from hdlib.bench.serving import VLLM_METHODS, vllm_method
from hdlib.databases.registry import make_tier, parse_tiers
from hdlib.errors import HDError
from hdlib.tiers import DEFAULT_TIERS, PAPER_TIERS, ContextSettings, ContextTier, Tier
from hdlib.tiers.base import DraftTier
from hdlib.tiers.other_methods import LOOKAHEAD, RECYCLING, RECYCLING_BRANCHES, REST, SUFFIX, SuffixSettings
from hdlib.tiers.window import WindowSettings

ALL_ORDERS = "hd:all-orders"
PAPER = "hd-paper"  # the paper's HD as its authors ran it (hdlib.bench.paper_drafter), with `+mend`, `+trie`
# The field's drafters alone, each at its published tree size unless `@N` says otherwise.
PEERS: dict[str, tuple[Tier, int]] = {
    "recycling": (RECYCLING, sum(RECYCLING_BRANCHES.values())),  # Token Recycling's 80-node static tree
    "rest": (REST, 64),  # REST's default number of draft tokens
    "suffix": (SUFFIX, SuffixSettings().max_tree_depth),  # SuffixDecoding's default: as deep as its trees
    "lookahead": (LOOKAHEAD, WindowSettings().guesses * WindowSettings().levels),  # G drafts of N - 1
}
# Switches after hd or hd:ORDER (before any @N), for ablations: the context tier fed by a Lookahead
# window (hdlib.tiers.window); every tier asked at every step (hdlib.engine.gate off); the order without the
# model's recycled guesses (the recycled tier left out: the paper's three databases).
WINDOW, ASK_ALL, NO_RECYCLING = "+window", "+ask-all", "+no-recycling"
HD_SWITCHES = (WINDOW, ASK_ALL, NO_RECYCLING)
# Switches with a value, each setting one constant hdlib's HD chose (docs/benchmarks.md says on which
# questions), so that it can be re-checked against its default on other questions: the value-ranked
# tree's candidates per tier and step (hdlib.engine.value.CANDIDATES), and the context tier's recent
# occurrences of a key its shares are counted over (hdlib.tiers.context.SHARE_WINDOW).
CANDIDATES, SHARE_WINDOW = "+candidates=", "+share-window="
HD_SETTINGS = (CANDIDATES, SHARE_WINDOW)
OWN_TABLES = (RECYCLING, SUFFIX)  # tiers whose tables outlive a request: each method keeps its own


@dataclass(frozen=True)
class Method:
    name: str  # as given, `@N` included: results are keyed by it
    tiers: tuple[Tier | DraftTier, ...] = ()  # hdlib methods: the tiers in order; empty is plain decoding
    transformers: bool = False  # answered by `model.generate` instead of hdlib's loop
    prompt_lookup: int | None = None  # transformers only: prompt lookup decoding, tokens per draft
    budget: int | None = None  # hd methods: draft tokens per step; None chooses it per step
    paper: PaperSettings | None = None  # hd-paper methods: the authors' drafting, with these switches
    serving: bool = False  # vLLM's engine answers it, in vLLM's environment (hdlib.bench.serving)
    gate: bool = True  # hd methods with the value-ranked tree: False asks every tier at every step
    candidates: int | None = None  # hd methods with the value-ranked tree: candidates per tier (None: the default)

    @property
    def drafts(self) -> bool:
        """Whether hdlib's loop drafts for this method (not `ar`, not transformers')."""
        return bool(self.tiers) or self.paper is not None

    @property
    def times_phases(self) -> bool:
        """Whether its answers time drafting and the engine's overhead apart (hdlib's loop does;
        transformers' `generate` and vLLM's engine do not, so their records hold zeros there)."""
        return not (self.transformers or self.serving)

    @classmethod
    def parse(cls, name: str) -> Method:
        method, arm = split_arm(name)
        if arm > 1:  # an A/A arm: the method itself, under the arm's name (hdlib.bench.arms)
            return replace(cls.parse(method), name=name)
        base, budget = split_budget(name)
        if base == "ar":
            return cls(name)
        if base == "hf":
            return cls(name, transformers=True)
        if base == "hf-pld":
            return cls(name, transformers=True, prompt_lookup=PROMPT_LOOKUP_TOKENS)
        if vllm_method(base):
            return cls(name, serving=True)
        base, switches, settings = hd_switches(name, base)
        if base == "hd":
            return cls.hd(name, DEFAULT_TIERS, budget, switches, settings)
        if base == PAPER or base.startswith(PAPER + "+"):
            paper = paper_settings(name, base)
            return cls(name, budget=paper.budget if budget is None else budget, paper=paper)
        if base in PEERS:
            tier, size = PEERS[base]
            return cls(name, (tier,), budget=size if budget is None else budget)
        if base.startswith("hd:") and len(base) > 3:
            return cls.hd(name, tuple(parse_tiers(list(base[3:]))), budget, switches, settings)  # type: ignore[arg-type]
        raise HDError(
            f"unknown method {name!r}: use ar, hf, hf-pld, hd, hd:ORDER (tier letters C, R, M, S, T, E, U, L or a "
            f"registered tier's, e.g. hd:CM), either with {WINDOW}, {ASK_ALL}, {NO_RECYCLING}, {CANDIDATES}N and "
            f"{SHARE_WINDOW}N, {ALL_ORDERS}, "
            f"{PAPER}[+mend][+trie], "
            f"{', '.join(PEERS)}, {', '.join(VLLM_METHODS)}, vllm-hd:ORDER (of C, M, S), vllm-hd+cost=X and "
            "vllm-hd+clock=0; "
            "any but ar, hf, hf-pld and vLLM's may end in @N for "
            "a fixed budget of N draft tokens per step (e.g. hd:CMS@64)"
        )

    @classmethod
    def hd(
        cls, name: str, tiers: tuple[Tier, ...], budget: int | None, switches: set[str], settings: dict[str, int]
    ) -> Method:
        for switch in (ASK_ALL, CANDIDATES):
            if (switch in switches or switch in settings) and budget is not None:
                raise HDError(
                    f"method {name!r}: {switch.rstrip('=')} sets the value-ranked tree's choice; a fixed budget @N "
                    "asks the tiers in order until it is full"
                )
        if NO_RECYCLING in switches:
            if Tier.RECYCLED not in tiers:
                raise HDError(f"method {name!r}: {NO_RECYCLING} leaves the recycled tier out, and the order has none")
            tiers = tuple(t for t in tiers if t != Tier.RECYCLED)
        context = ContextSettings(
            window=WindowSettings() if WINDOW in switches else None,
            share_window=settings.get(SHARE_WINDOW, ContextSettings.share_window),
        )
        ordered = with_context(tiers, context, name) if context != ContextSettings() else tiers
        return cls(name, ordered, budget=budget, gate=ASK_ALL not in switches, candidates=settings.get(CANDIDATES))


def hd_switches(name: str, base: str) -> tuple[str, set[str], dict[str, int]]:
    """`hd:CM+window+candidates=8` -> ("hd:CM", {"+window"}, {"+candidates=": 8}); refused after
    anything but hd or hd:ORDER, or twice."""
    head, *parts = base.split("+")
    ours = [p for p in parts if "+" + p in HD_SWITCHES or ("+" + p).startswith(HD_SETTINGS)]
    if not parts or (head == PAPER and not ours):  # hd-paper's own switches: paper_settings reads them
        return base, set(), {}
    if not (head == "hd" or (head.startswith("hd:") and head != ALL_ORDERS)):
        raise HDError(
            f"method {name!r}: {', '.join(HD_SWITCHES)}, {CANDIDATES}N and {SHARE_WINDOW}N go after hd or hd:ORDER "
            f"(e.g. hd:CM{WINDOW}@64)"
        )
    switches: list[str] = []
    settings: dict[str, int] = {}
    for switch in ("+" + p for p in parts):
        setting = next((s for s in HD_SETTINGS if switch.startswith(s)), None)
        if switch in HD_SWITCHES:
            if switch in switches:
                raise HDError(f"method {name!r}: each switch at most once")
            switches.append(switch)
        elif setting is not None:
            value = switch.removeprefix(setting)
            if not (value.isascii() and value.isdigit()) or value[0] == "0" or setting in settings:
                raise HDError(f"method {name!r}: {setting}N takes a positive integer N, once (e.g. hd{setting}8)")
            settings[setting] = int(value)
        else:
            raise HDError(
                f"method {name!r}: unknown switch {switch!r}; hd and hd:ORDER take "
                f"{', '.join(HD_SWITCHES)}, {CANDIDATES}N and {SHARE_WINDOW}N"
            )
    return head, set(switches), settings


def with_context(tiers: tuple[Tier, ...], settings: ContextSettings, name: str) -> tuple[Tier | DraftTier, ...]:
    """The order with its context tier made with `settings` (a Lookahead window feeding it, another
    share window): one tier made for the run, which `begin` starts afresh with every request."""
    if Tier.CONTEXT not in tiers:
        raise HDError(
            f"method {name!r}: {WINDOW} and {SHARE_WINDOW}N set the context tier, and the order "
            f"{''.join(t.letter for t in tiers)} has none"
        )
    context = ContextTier(settings)
    return tuple(context if t == Tier.CONTEXT else t for t in tiers)


def paper_settings(name: str, base: str) -> PaperSettings:
    """`hd-paper+mend+trie` -> the authors' drafting with those switches on (each at most once)."""
    switches = base.split("+")[1:]
    known = ("mend", "trie")
    if any(s not in known for s in switches) or len(set(switches)) != len(switches):
        raise HDError(
            f"method {name!r}: {PAPER} takes the switches +mend (their three defects mended) and +trie (shared "
            f"prefixes merged), each at most once, e.g. {PAPER}+mend+trie"
        )
    return PaperSettings(mend="mend" in switches, trie="trie" in switches)


def with_own_tables(method: Method) -> Method:
    """`method` with a table of its own for each tier whose table outlives a request (Token
    Recycling's, SuffixDecoding's global tree), kept across the questions of a run: no method
    drafts from what another method's answers to the same question taught a table."""
    if not any(t in OWN_TABLES for t in method.tiers):
        return method
    return replace(method, tiers=tuple(make_tier(t) if t in OWN_TABLES else t for t in method.tiers))  # type: ignore[arg-type]


def split_budget(name: str) -> tuple[str, int | None]:
    """`hd:CMS@64` -> ("hd:CMS", 64); a name without `@` -> (name, None); an arm's name as its method's
    (`hd@64#2`). `ar`, `hf` and `hf-pld` take no `@N`."""
    name = method_of(name)
    base, at, suffix = name.partition("@")
    if not at:
        return name, None
    if base in ("ar", "hf", "hf-pld") or vllm_method(base):
        raise HDError(
            f"method {name!r}: only the methods hdlib verifies take a fixed budget @N (hd@N, hd:ORDER@N, "
            f"{ALL_ORDERS}@N, {PAPER}@N, {', '.join(f'{p}@N' for p in PEERS)}), not {base}"
        )
    # Digits only, no leading zero: `hd:C@8` and `hd:C@08` would otherwise be two methods in the results.
    if not (suffix.isascii() and suffix.isdigit()) or (len(suffix) > 1 and suffix[0] == "0"):
        raise HDError(
            f"method {name!r}: the budget after @ must be a non-negative integer, the draft tokens per step "
            f"(e.g. {base}@16; @0 drafts nothing)"
        )
    return base, int(suffix)


def all_orders() -> list[str]:
    """The 15 ordered non-empty subsets of the paper's three databases (context, model, statistics)
    as method names: hd:C ... hd:SMC, as the paper's order ablation."""
    letters = [t.letter for t in PAPER_TIERS]
    return [f"hd:{''.join(p)}" for n in range(1, len(letters) + 1) for p in permutations(letters, n)]


def expand(name: str) -> list[str]:
    """hd:all-orders (with its `@N`, if any, on every order) -> the 15 orders; any other name -> itself."""
    base, budget = split_budget(name)
    if base != ALL_ORDERS:
        return [name]
    return [order if budget is None else f"{order}@{budget}" for order in all_orders()]


def parse_methods(names: str | Sequence[str]) -> list[Method]:
    """Method names ("hf,hd:C@8" or a list) -> methods, `ar` first, hd:all-orders expanded; a method
    named again is its next arm (`hd,hd`: `hd` and `hd#2`, an A/A run: hdlib.bench.arms); a first
    `ar` named is the one that leads anyway."""
    items = [n.strip() for n in names.split(",")] if isinstance(names, str) else [n.strip() for n in names]
    if any(not n for n in items):
        raise HDError(f"empty method name in {names!r}")
    if "ar" in items:
        items.remove("ar")
    expanded: list[str] = []  # an order hd:all-orders gives and another name gave too is one method
    for name in with_arms(["ar", *items]):
        method, arm = split_arm(name)
        expanded += [n for n in (o if arm == 1 else f"{o}#{arm}" for o in expand(method)) if n not in expanded]
    return [Method.parse(n) for n in expanded]
