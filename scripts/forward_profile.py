#!/usr/bin/env python3
"""Measure a model's forward-time profile on this machine into a file, with where and how it was measured.

    python scripts/forward_profile.py        # the packaged default model: tests/data/forward_profile_smollm2-135m.json

The tests check what the notebooks say of the auto budget on the packaged model with this file
injected (`hdlib.generate(..., profile=...)`, or HDLIB_FORWARD_PROFILE for a notebook's kernel and
the command line), so that their numbers are the same on every CPU. The profile is measured as
`hdlib` measures it for its cache (`hdlib.engine.forward_time.measure_forward`); a profile measured
on a busy machine is not written: run it again while nothing else runs.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shlex
import sys
from dataclasses import asdict
from pathlib import Path

import hdlib
from hdlib.engine.forward_time import QUIET, measure_forward
from hdlib.models.cpu import describe_machine
from hdlib.models.loading import DEFAULT_MODEL
from hdlib.presentation import progress_bar

TESTS_DATA = Path(__file__).resolve().parents[1] / "tests" / "data"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=DEFAULT_MODEL, help=f"a model's name or folder (default {DEFAULT_MODEL})")
    parser.add_argument("--out", type=Path, default=None, help="default tests/data/forward_profile_MODEL.json")
    args = parser.parse_args()
    lm = hdlib.load_model(args.model)
    profile = measure_forward(lm.model, progress=progress_bar("measuring forward time"))
    if profile.verdict != QUIET:
        print(f"measured on a busy machine (spread up to {max(profile.spread):.0%}, fall {profile.fall:.0%}): "
              "not written; run it again while nothing else runs", file=sys.stderr)  # fmt: skip
        return 1
    out = args.out or TESTS_DATA / f"forward_profile_{Path(args.model).name}.json"
    provenance = {
        "model": lm.name,
        "device": str(lm.device),
        "dtype": str(lm.model.dtype),
        "machine": describe_machine(),
        "date": datetime.date.today().isoformat(),
        "command": shlex.join(["python", "scripts/forward_profile.py", *sys.argv[1:]]),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"provenance": provenance, **asdict(profile)}, indent=1) + "\n")
    ms = " / ".join(f"{1e3 * profile.seconds[k - 1]:.1f}" for k in (1, 16, 32, 64))
    print(f"{out}: forward of 1 / 16 / 32 / 64 tokens = {ms} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
