"""The `hdlib` command line.

    hdlib generate --prompt TEXT [--model M] [--tiers context,model,statistics] [--budget N] [--max-new-tokens N]
        [--temperature T [--top-p P] [--top-k K] [--seed S] [--sampling-rule gumbel|rejection]]
        [--dtype auto|float32|bfloat16|float16] [--prompt-format auto|chat-template|vicuna|raw]
    hdlib build-db model|statistics [--model M] [--source PATH|sharegpt] [--limit N] [--out PATH]
        [--engine vllm [--engine-arg KEY=VALUE ...] | --server URL [--concurrency N]]
    hdlib db info PATH [--model M]
    hdlib warmup [--model M] [--dtype D]
    hdlib handouts [--out DIR] [--prompt TEXT] [--rounds N] [--model M] [--dtype D]
    hdlib serve [MODEL] [--tiers CMS] [--num-speculative-tokens N] [-- VLLM_SERVER_ARGS ...]
    hdlib bench-serve [-- VLLM_BENCH_SERVE_ARGS ...]
    hdlib bench [--questions PATH] [--per-task K] [--tasks LIST] [--max-new-tokens N] [--methods LIST] [--temperature T]
        [--sampling-rule gumbel|rejection] [--model M] [--dtype D] [--prompt-format F]
        [--out results.json] [--html report.html] [--resume]

Every user mistake is one line on stderr, `hdlib: error: ...`, and exit status 2, checked before
the model is loaded where it can be; nothing is printed to stdout until the answer is complete.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from hdlib.cli.commands import (
    cmd_bench,
    cmd_bench_serve,
    cmd_build_db,
    cmd_db_info,
    cmd_generate,
    cmd_handouts,
    cmd_serve,
    cmd_warmup,
)
from hdlib.cli.parser import build_parser
from hdlib.errors import HDError

__all__ = ["build_parser", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    try:
        argv = list(sys.argv[1:] if argv is None else argv)
        ours, passed = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
        args = build_parser().parse_args(ours)
        if "--" in argv and args.command not in ("serve", "bench-serve"):
            raise HDError(
                f"`hdlib {args.command}` takes no arguments after --: only `hdlib serve` and `hdlib bench-serve` "
                "pass them on"
            )
        args.argv, args.passed = argv, passed  # how the command was asked for (database metadata); for vLLM
        commands = {
            "generate": cmd_generate,
            "warmup": cmd_warmup,
            "build-db": cmd_build_db,
            "db": cmd_db_info,
            "bench": cmd_bench,
            "handouts": cmd_handouts,
            "serve": cmd_serve,
            "bench-serve": cmd_bench_serve,
        }
        return commands[args.command](args)
    except HDError as e:
        print(f"hdlib: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("hdlib: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
