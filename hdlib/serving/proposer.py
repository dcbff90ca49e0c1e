"""hdlib's HD as a vLLM speculative proposer: the tiers draft, vLLM verifies.

    from vllm import LLM
    llm = LLM(model=FOLDER, speculative_config={
        "method": "custom_class", "model": "hdlib.serving.proposer.HDProposer", "num_speculative_tokens": 16})

vLLM makes the class with its `VllmConfig` and, after every step, calls `propose` with the tokens
each batch row just emitted, each row's length and every row's tokens; it wants one list of draft
tokens per row, which it verifies as a chain, losslessly. It names no request in that call, but the
caller is vLLM's model runner, whose input batch holds the rows' request ids and whose `requests`
every request still alive: the proposer reads both (never writes), after checking at every call that
the runner's batch is the very arrays it was given. So a request's state (`hdlib.serving.chain`) is
keyed by its id and freed when the request finishes or is aborted. Where that check fails (another
vLLM, another caller), the proposer says so once and, at that call, finds states by the tokens they
hold.

Per request: the context tier over the row's own tokens, then the model tier's phrase database and
the statistics corpus (each opened once per worker process), asked in that order (`HDLIB_VLLM_TIERS`,
letters of C, M, S; default `CMS`); the chain is the hierarchy's, and an offline tier is asked for
a row only where its lookup pays at the batch's rate (`hdlib.serving.gate`: alone in a batch nearly
always, among hundreds of rows seldom).
Of the chain (at most `num_speculative_tokens`), a row is given the prefix whose drafts are worth
verifying at the batch's size (`hdlib.serving.length`): each draft's chance of acceptance, learned
while serving per tier and the length of the match it followed, position and how the row's last
chain fared, against what one more draft token adds to a step of that many rows, from the step
times measured on this machine (`HDLIB_VLLM_STEP_COST` names another machine's: run
`benchmarks/vllm_step_cost.py` there), scaled by what the engine's own steps, timed while serving,
say a draft costs them (`HDLIB_VLLM_CLOCK`, on by default).

The module imports numpy and hdlib's tiers only (no torch, no transformers, no `hdlib.bench`, and
numba, which vLLM depends on, only once the first context index is made): every vLLM worker imports
it. Making the proposer reads the served tokenizer's vocabulary, to open the databases built for it.

What it does not do: no recycled guesses (a proposer sees no logits) and no tree (vLLM verifies a
chain); the databases must be built for the served model's tokenizer (refused otherwise).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hdlib.errors import HDError
from hdlib.paths import built_db_path, data_dir
from hdlib.serving.chain import MAX_BYTES, ChainDrafter
from hdlib.serving.gate import Gate
from hdlib.serving.length import SCALE, StepClock, StepCost
from hdlib.store import read_meta, tokenizer_fingerprint
from hdlib.tiers import DraftTier, ModelTier, StatisticsTier, Tier

log = logging.getLogger(__name__)

TIERS_ENV = "HDLIB_VLLM_TIERS"  # the tiers, by letter, in the order asked (default CMS)
MODEL_DB_ENV = "HDLIB_VLLM_MODEL_DB"  # the model tier's database file (default: the served tokenizer's)
STATISTICS_DB_ENV = "HDLIB_VLLM_STATISTICS_DB"  # the statistics tier's (default: the tokenizer's, cached)
STATE_BYTES_ENV = "HDLIB_VLLM_STATE_BYTES"  # the requests' states, at most this many bytes per worker
STEP_COST_ENV = "HDLIB_VLLM_STEP_COST"  # a vllm_step_cost.json measured on the serving machine (default: this one's)
COST_SCALE_ENV = "HDLIB_VLLM_COST_SCALE"  # the draft tokens' cost, times this (default SCALE; 0: every draft)
CLOCK_ENV = "HDLIB_VLLM_CLOCK"  # 1 (default): the drafts' cost learned from the served steps' own times; 0: as measured
_OPENED: dict[tuple[str, str], DraftTier] = {}  # the offline tiers, opened once per worker process


def tier_order(spec: str | None) -> str:
    """The proposer's tiers, by letter, of C (context), M (model), S (statistics); each once."""
    order = (spec or "CMS").upper()
    if not order or any(letter not in "CMS" for letter in order) or len(set(order)) != len(order):
        raise HDError(f"{TIERS_ENV}={spec!r}: tiers by letter, each once, of C (context), M (model), S (statistics)")
    return order


def state_bytes(spec: str | None) -> int:
    """The bound on the states' bytes: `HDLIB_VLLM_STATE_BYTES` (a whole number), default 1 GiB."""
    if not spec:
        return MAX_BYTES
    if not spec.strip().isdigit() or int(spec) < 1:
        raise HDError(f"{STATE_BYTES_ENV}={spec!r}: a whole number of bytes, at least 1")
    return int(spec)


def cost_scale(spec: str | None) -> float:
    """The weight of a draft token's cost: `HDLIB_VLLM_COST_SCALE`, a number of at least 0 (default
    `hdlib.serving.length.SCALE`)."""
    try:
        scale = SCALE if not spec else float(spec)
    except ValueError:
        scale = -1.0
    if not scale >= 0 or scale == float("inf"):
        raise HDError(f"{COST_SCALE_ENV}={spec!r}: a number of at least 0 (1: the cost as measured)")
    return scale


def clock_on(spec: str | None) -> bool:
    """Whether the drafts' cost is learned from the served steps' own times: `HDLIB_VLLM_CLOCK`, 1
    (the default) or 0 (the step cost as measured, alone)."""
    if spec in (None, "", "1"):
        return True
    if spec == "0":
        return False
    raise HDError(f"{CLOCK_ENV}={spec!r}: 1 (learn the drafts' cost from the served steps) or 0 (as measured)")


def model_db_for(fingerprint: str) -> Path:
    """The model database built for the tokenizer of `fingerprint`: `HDLIB_VLLM_MODEL_DB`, else a
    shipped one that was, else the cached one."""
    if os.environ.get(MODEL_DB_ENV):
        return Path(os.environ[MODEL_DB_ENV])
    for path in sorted((data_dir() / "db").glob("*.model.npz")):
        if read_meta(path).get("tokenizer") == fingerprint:
            return path
    return built_db_path("model", fingerprint)


def database_paths(fingerprint: str) -> dict[str, Path]:
    """The model ("M") and statistics ("S") databases for the tokenizer of `fingerprint`: the ones the
    environment names, else the defaults."""
    statistics = os.environ.get(STATISTICS_DB_ENV)
    default = built_db_path("statistics", fingerprint)
    return {"M": model_db_for(fingerprint), "S": Path(statistics) if statistics else default}


def offline_tiers(fingerprint: str, order: str) -> list[DraftTier]:
    """The model and statistics tiers `order` names, for the tokenizer of `fingerprint`, each opened
    once."""
    paths = database_paths(fingerprint)
    how = {"M": (ModelTier, "hdlib build-db model --model MODEL"), "S": (StatisticsTier, "hdlib warmup --model MODEL")}
    tiers = []
    for letter in order:
        if letter not in how:
            continue
        (kind, build), path = how[letter], paths[letter]
        if not path.is_file():
            name = kind.__name__.removesuffix("Tier").lower()
            raise HDError(f"no {name} database for this model's tokenizer at {path}: build it with `{build}`")
        key = (str(path), fingerprint)
        if key not in _OPENED:
            _OPENED[key] = kind.from_file(path, fingerprint)  # refused when built for another tokenizer
        tiers.append(_OPENED[key])
    return tiers


def served_fingerprint(model_config: Any) -> str:
    """The fingerprint of the served tokenizer's vocabulary (as `hdlib.store` computes it)."""
    # transformers is imported here, when vLLM makes the proposer (its worker has it loaded already),
    # and not when the module is: importing the proposer must stay light.
    from transformers import AutoTokenizer

    source = str(model_config.tokenizer or model_config.model)
    revision = getattr(model_config, "tokenizer_revision", None)
    trust = bool(getattr(model_config, "trust_remote_code", False))
    return tokenizer_fingerprint(AutoTokenizer.from_pretrained(source, revision=revision, trust_remote_code=trust))


class HDProposer:
    """HD's tiers as vLLM's `custom_class` proposer (see the module's docstring)."""

    def __init__(self, vllm_config: Any) -> None:
        spec, model = vllm_config.speculative_config, vllm_config.model_config
        order = tier_order(os.environ.get(TIERS_ENV))
        cost = StepCost.from_file(os.environ[STEP_COST_ENV]) if os.environ.get(STEP_COST_ENV) else StepCost.measured()
        self.drafter = ChainDrafter(
            offline_tiers(served_fingerprint(model), order) if order != Tier.CONTEXT.letter else [],
            order,
            int(spec.num_speculative_tokens),
            state_bytes(os.environ.get(STATE_BYTES_ENV)),
            cost,
            cost_scale(os.environ.get(COST_SCALE_ENV)),
            vocab_size=int(model.get_vocab_size()),
            gate=Gate(),
            clock=StepClock(cost) if clock_on(os.environ.get(CLOCK_ENV)) else None,
        )
        self.unbound: str | None = None  # why the rows' request ids could not be had, when they once could not

    def load_model(self, *args: Any, **kwargs: Any) -> None:
        """vLLM's CPU runner hands every drafter the target model: HD needs none."""

    def propose(
        self,
        sampled_token_ids: Sequence[Sequence[int]],
        num_tokens_no_spec: np.ndarray,
        token_ids_cpu: np.ndarray,
        slot_mappings: object = None,
    ) -> list[list[int]]:
        runner = sys._getframe(1).f_locals.get("self")  # vLLM's model runner, whose method calls this one
        ids, alive = self.request_ids(runner, len(sampled_token_ids), num_tokens_no_spec, token_ids_cpu)
        return self.drafter.propose(sampled_token_ids, num_tokens_no_spec, token_ids_cpu, ids, alive)

    def request_ids(
        self, runner: Any, rows: int, num_tokens: np.ndarray, token_ids: np.ndarray
    ) -> tuple[list[str] | None, dict[str, Any] | None]:
        """The rows' request ids and the requests alive, read from the runner; (None, None), said once,
        where the caller is not a runner whose input batch is the very rows `propose` was given."""
        batch = getattr(runner, "input_batch", None)
        requests = getattr(runner, "requests", None)
        if not (isinstance(requests, dict) and hasattr(batch, "req_ids")):
            self.give_up(f"its caller ({type(runner).__name__}) has no input batch and requests")
        elif batch.token_ids_cpu is token_ids and batch.num_tokens_no_spec is num_tokens and len(batch.req_ids) == rows:
            return batch.req_ids, requests
        else:
            self.give_up("the runner's input batch is not the rows propose was given")
        return None, None

    def give_up(self, why: str) -> None:
        """Say once why the requests' states are found by the tokens they hold at this call."""
        if self.unbound is None:
            log.warning(
                "hdlib: vLLM's request ids cannot be had (%s): states are found by the tokens they hold and let "
                "go by the byte bound (%s)",
                why,
                STATE_BYTES_ENV,
            )
        self.unbound = why
