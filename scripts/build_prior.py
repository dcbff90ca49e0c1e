#!/usr/bin/env python3
"""Build the acceptance prior shipped with a packaged model (default data/priors/smollm2-135m.json).

    python scripts/build_prior.py                 # the packaged default model, the 12 project prompts
    python scripts/build_prior.py --limit 4       # fewer prompts, for a quick look

The auto budget (`hdlib.engine.value.ValueBudget`) starts every generation from a prior: acceptance
rates per node kind. The cache's prior learns from every generation on the machine, so numbers drift
with the machine's history; the shipped one is read-only, so every machine starts from the same
rates. It is learned here, in memory only (nothing in the cache is read or changed), from the
project's own prompts (data/prompts/prompts.jsonl, never the Spec-Bench questions the project
reports on), answered in file order at the auto budget with hdlib's default tiers, each starting
from what the ones before it learned. The file holds the rates only (kind -> [rate, weight]); which
nodes were verified, and so observed, still depended on this machine's forward time.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from tqdm import tqdm

import hdlib
from hdlib.bench.specbench import load_questions
from hdlib.engine.prior import AcceptancePrior
from hdlib.models.loading import DEFAULT_MODEL
from hdlib.paths import data_dir

PROMPTS = data_dir() / "prompts" / "prompts.jsonl"


def build(model: str, limit: int, max_new_tokens: int) -> AcceptancePrior:
    """A prior learned in memory from the first `limit` project prompts, answered in turn."""
    lm = hdlib.load_model(model)
    prior = AcceptancePrior()  # learns, writes nothing: no file
    for question in tqdm(load_questions(PROMPTS)[:limit], desc="prompts", unit="prompt"):
        hdlib.generate(lm, question.turns[0], max_new_tokens=max_new_tokens, prior=prior)
    return prior


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=DEFAULT_MODEL, help=f"a packaged model's name (default {DEFAULT_MODEL})")
    parser.add_argument("--limit", type=int, default=12, help="the first N project prompts (default 12: all)")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--out", type=Path, default=None, help="default data/priors/MODEL.json")
    args = parser.parse_args()
    start = time.perf_counter()
    prior = build(args.model, args.limit, args.max_new_tokens)
    out = args.out or data_dir() / "priors" / f"{args.model}.json"
    prior.save(out)
    print(f"{out}: {len(prior.rates())} kinds, digest {prior.digest()}, in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
