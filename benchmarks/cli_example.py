"""The README's example of the command line: `hdlib generate` on the project's summary prompt, run once
as a user runs it, its console output kept as it printed it.

    python -m benchmarks.cli_example [--out benchmarks/results/<machine>/cli_example.json]

One run, so its speeds are one measurement of this machine in that minute, not an estimate: the
speedup it prints is the ratio of two single runs (HD's and plain decoding's, one after the other).
docs/benchmarks.md has the measured comparisons, with their intervals; the README shows this file's
output and says so (tests/test_cli_example.py checks that it is this file's).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Mapping
from typing import Any

from benchmarks.common import ROOT, results_path, write_results
from benchmarks.markdown import code

COMMAND = ["hdlib", "generate", "--prompt-file", "data/prompts/summarize.txt", "--max-new-tokens", "128"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=results_path("cli_example.json"))
    args = parser.parse_args()
    from hdlib.decoding import forward_profile
    from hdlib.models.loading import load_model

    lm = load_model("smollm2-135m")  # the profile the command's auto budget reads, for the record
    python = [sys.executable, "-m", "hdlib", *COMMAND[1:], "--color", "never"]
    done = subprocess.run(python, cwd=ROOT, capture_output=True, text=True, check=True)
    print(done.stdout)
    write_results(args.out, "cli_example", lm=lm, profile=forward_profile(lm), cli=" ".join(COMMAND),
                  output=done.stdout.rstrip("\n"))  # fmt: skip


def tables(data: Mapping[str, Any]) -> list[str]:
    """The command and what it printed (the README's example)."""
    return [f"One run of {code(data['cli'])}, as it printed it (one measurement, no interval):",
            f"```console\n$ {data['cli']}\n{data['output']}\n```"]  # fmt: skip


if __name__ == "__main__":
    main()
