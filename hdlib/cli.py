"""The `hdlib` command line.

    hdlib generate --prompt TEXT [--model M] [--tiers context,model,statistics] [--budget N] [--max-new-tokens N]
        [--temperature T [--top-p P] [--top-k K] [--seed S] [--sampling-rule gumbel|rejection]]
        [--dtype auto|float32|bfloat16|float16] [--prompt-format auto|chat-template|vicuna|raw]
    hdlib build-db model|statistics [--model M] [--source PATH|sharegpt] [--limit N] [--out PATH]
        [--engine vllm [--engine-arg KEY=VALUE ...] | --server URL [--concurrency N]]
    hdlib db info PATH [--model M]
    hdlib warmup [--model M] [--dtype D]
    hdlib bench [--questions PATH] [--per-task K] [--max-new-tokens N] [--methods LIST] [--temperature T]
        [--sampling-rule gumbel|rejection] [--model M] [--dtype D] [--prompt-format F]
        [--out results.json] [--html report.html] [--resume]

Every user mistake is one line on stderr, `hdlib: error: ...`, and exit status 2, checked before
the model is loaded where it can be; nothing is printed to stdout until the answer is complete.
"""

from __future__ import annotations

import argparse
import json
import secrets
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from tqdm.auto import tqdm

from hdlib import presentation
from hdlib.errors import HDError
from hdlib.paths import data_dir
from hdlib.tiers import DEFAULT_TIERS, Tier

DEFAULT_QUESTIONS = data_dir() / "prompts" / "prompts.jsonl"
DTYPE_HELP = (
    "weights and activations: auto (default) is bfloat16 on CUDA (float16 without bfloat16) and float32 on the "
    "CPU; in bfloat16/float16 HD can differ from plain decoding at near-ties"
)
PROMPT_FORMAT_HELP = (
    "auto (default): the model's chat template, or vicuna when it has none; chat-template; vicuna, FastChat's "
    "vicuna_v1.1 conversation as Spec-Bench uses it (the paper's models); raw, the text as it is"
)
SAMPLING_RULE_HELP = (
    "sampling: gumbel (default), HD's answer is plain sampling's for the seed; rejection, recursive rejection "
    "sampling, the same distribution but another answer"
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, no usage dump
        raise HDError(message)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _budget(text: str) -> int | None:
    if text == "auto":
        return None
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 'auto' or a non-negative integer, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    from hdlib.cpu import DEFAULT_PREPACK, PREPACK_CHOICES
    from hdlib.models import DEFAULT_MODEL, DTYPE_CHOICES, PROMPT_FORMATS
    from hdlib.sampling import SAMPLING_RULES

    parser = _Parser(prog="hdlib", description="Hierarchy Drafting: lossless speculative decoding from tiers of n-gram databases.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    gen = sub.add_parser("generate", help="answer a prompt with HD and compare with plain decoding")
    source = gen.add_mutually_exclusive_group(required=True)
    source.add_argument("--prompt", help="the prompt text")
    source.add_argument("--prompt-file", type=Path, help="a UTF-8 text file holding the prompt")
    gen.add_argument("--model", default=DEFAULT_MODEL, help=f"packaged name, local folder or Hub id (default {DEFAULT_MODEL})")
    gen.add_argument("--tiers", default=",".join(t.name for t in DEFAULT_TIERS), help="tiers in the order they are asked, by name or letter, hdlib's or registered (default context,model,statistics)")
    gen.add_argument("--budget", type=_budget, default=None, metavar="N|auto", help="draft tokens per step (default: auto, from the measured forward time)")
    gen.add_argument("--max-new-tokens", type=_positive, default=256)
    gen.add_argument("--temperature", type=float, default=0.0, help="0 is greedy (default); above 0 samples, losslessly")
    gen.add_argument("--top-p", type=float, default=1.0, help="sampling: nucleus mass kept (default 1, all)")
    gen.add_argument("--top-k", type=int, default=0, help="sampling: most likely tokens kept (default 0, all)")
    gen.add_argument("--seed", type=int, default=None, help="sampling: makes the answer reproducible (default: drawn, then printed)")
    gen.add_argument("--sampling-rule", choices=SAMPLING_RULES, default=SAMPLING_RULES[0], help=SAMPLING_RULE_HELP)
    gen.add_argument("--device", default=None, help="cuda or cpu (default: cuda when present)")
    gen.add_argument("--prepack", choices=PREPACK_CHOICES, default=DEFAULT_PREPACK, help="CPU: which linear layers may run with oneDNN-prepacked weights (default all; each where it is faster)")
    gen.add_argument("--dtype", choices=DTYPE_CHOICES, default="auto", help=DTYPE_HELP)
    gen.add_argument("--prompt-format", choices=PROMPT_FORMATS, default="auto", help=PROMPT_FORMAT_HELP)
    gen.add_argument("--no-compare", action="store_true", help="skip the plain-decoding run (no speedup reported)")
    gen.add_argument("--color", choices=["auto", "always", "never"], default="auto")

    build = sub.add_parser("build-db", help="build the model or statistics database of a model")
    build.add_argument("tier", choices=["model", "statistics"])
    build.add_argument("--model", default=DEFAULT_MODEL)
    build.add_argument("--source", default="sharegpt", help="'sharegpt' (the train split) or a JSONL/text file")
    build.add_argument("--limit", type=_positive, default=None, help="use at most N prompts / conversations")
    build.add_argument("--out", type=Path, default=None, help="where to write it (default: where hdlib looks for it)")
    build.add_argument("--device", default=None)
    model_build = build.add_argument_group("model database only")
    model_build.add_argument("--n", type=_positive, default=5, help="n-gram length (default 5)")
    model_build.add_argument("--top-k", type=_positive, default=100_000, help="n-grams kept (default 100,000)")
    model_build.add_argument("--max-new-tokens", type=_positive, default=256, help="answer length (default 256)")
    model_build.add_argument("--batch-size", type=_positive, default=8, help="prompts per batch (transformers; default 8)")
    model_build.add_argument("--shard-size", type=_positive, default=64, help="answers per resumable shard")
    model_build.add_argument("--max-prompt-tokens", type=_positive, default=512, help="longer prompts are cut (default 512)")
    model_build.add_argument("--work-dir", type=Path, default=None, help="where the answer shards go (default: the cache)")
    model_build.add_argument(
        "--engine", choices=["transformers", "vllm"], default="transformers",
        help="who answers: transformers here (default), or vLLM's offline engine (needs vllm: make setup-vllm)",
    )  # fmt: skip
    model_build.add_argument(
        "--engine-arg", action="append", default=[], metavar="KEY=VALUE", type=_engine_arg,
        help="passed to vllm.LLM, e.g. tensor_parallel_size=4, dtype=bfloat16, max_model_len=4096 (repeatable)",
    )  # fmt: skip
    model_build.add_argument("--server", default=None, metavar="URL", help="answers from an OpenAI-compatible server")
    model_build.add_argument("--served-model", default=None, help="with --server: the model name it serves")
    model_build.add_argument("--concurrency", type=_positive, default=8, help="with --server: requests at a time")

    db = sub.add_parser("db", help="inspect a database file")
    db_sub = db.add_subparsers(dest="db_command", required=True, parser_class=_Parser)
    info = db_sub.add_parser("info", help="what a database holds, how it was built, sizes, a sample")
    info.add_argument("path", type=Path)
    info.add_argument("--model", default=None, help="decode the sample with this model's tokenizer")

    bench = sub.add_parser("bench", help="Spec-Bench: methods side by side over the same questions")
    bench.add_argument("--questions", type=Path, default=DEFAULT_QUESTIONS, help="Spec-Bench question file (default: the project's data/prompts/prompts.jsonl)")
    bench.add_argument("--per-task", type=_positive, default=None, metavar="K", help="the first K questions of each task (default: all)")
    bench.add_argument("--max-new-tokens", type=_positive, default=256, help="per turn (default 256)")
    bench.add_argument("--methods", default="hf,hf-pld,hd", help="ar, hf, hf-pld, hd, hd:ORDER (e.g. hd:CM), hd:all-orders; an hd method may end in @N, a fixed budget of N draft tokens per step (e.g. hd:CMS@64, hd:all-orders@16); ar always runs (default hf,hf-pld,hd)")
    bench.add_argument("--temperature", type=float, default=0.0, help="0 is greedy (default); above 0 every method samples")
    bench.add_argument("--sampling-rule", choices=SAMPLING_RULES, default=SAMPLING_RULES[0], help=SAMPLING_RULE_HELP)
    bench.add_argument("--model", default=DEFAULT_MODEL)
    bench.add_argument("--prepack", choices=PREPACK_CHOICES, default=DEFAULT_PREPACK, help="CPU: which linear layers may run with oneDNN-prepacked weights (default all; each where it is faster)")
    bench.add_argument("--dtype", choices=DTYPE_CHOICES, default="auto", help=DTYPE_HELP)
    bench.add_argument("--prompt-format", choices=PROMPT_FORMATS, default="auto", help=PROMPT_FORMAT_HELP)
    bench.add_argument("--out", type=Path, default=Path("bench.json"), help="results JSON (default bench.json); raw results go beside it, NAME.raw.jsonl")
    bench.add_argument("--html", type=Path, default=None, help="also write an HTML report with charts")
    bench.add_argument("--resume", action="store_true", help="continue an interrupted run from its raw results")

    warm = sub.add_parser("warmup", help="convert and cache the model, open its databases, measure its forward time")
    warm.add_argument("--model", default=DEFAULT_MODEL)
    warm.add_argument("--device", default=None)
    warm.add_argument("--dtype", choices=DTYPE_CHOICES, default="auto", help=DTYPE_HELP)
    return parser


def read_prompt(args: argparse.Namespace) -> str:
    if args.prompt_file is not None:
        try:
            text = args.prompt_file.read_bytes().decode("utf-8")
        except OSError as e:
            raise HDError(f"cannot read prompt file {args.prompt_file}: {e.strerror or e}") from None
        except UnicodeDecodeError as e:
            raise HDError(f"prompt file {args.prompt_file} is not UTF-8 text (byte {e.start})") from None
    else:
        text = args.prompt
    if not text.strip():
        raise HDError("the prompt is empty")
    return text


def cmd_generate(args: argparse.Namespace) -> int:
    from hdlib.databases import parse_tiers
    from hdlib.decoding import DecodeSettings, generate
    from hdlib.models import dtype_name, load_model

    # Everything that can be checked without the model is checked first.
    tiers = parse_tiers(args.tiers)
    # Plain decoding and HD sample with one seed, drawn here when none is given, so that the two can be compared.
    seed = args.seed if args.seed is not None or args.temperature == 0 else secrets.randbits(63)
    sampling = {
        "temperature": args.temperature,
        "top_p": args.top_p,
        "top_k": args.top_k,
        "seed": seed,
        "sampling_rule": args.sampling_rule,
    }
    DecodeSettings(max_new_tokens=args.max_new_tokens, **sampling)
    prompt = read_prompt(args)

    lm = load_model(args.model, device=args.device, dtype=args.dtype, prepack=args.prepack)
    # Encoded once, so that the warm-up, plain decoding and HD read the same ids.
    prompt_ids = lm.encode_prompt(prompt, prompt_format=args.prompt_format)
    generate(lm, prompt_ids, tiers, max_new_tokens=1, budget=0)  # warm-up; also checks the prompt length
    plain = None if args.no_compare else generate(lm, prompt_ids, (), max_new_tokens=args.max_new_tokens, **sampling)
    hd = generate(lm, prompt_ids, tiers, max_new_tokens=args.max_new_tokens, budget=args.budget, **sampling)

    use_color = args.color == "always" or (args.color == "auto" and sys.stdout.isatty())
    out = [presentation.tokens_ansi(hd.pieces, hd.token_tiers) if use_color else "".join(hd.pieces), ""]
    if use_color:
        out.append("colours: " + presentation.legend_ansi(hd.legend()))
    out.extend(report_lines(hd, plain, dtype_name(lm.model.dtype)))
    print("\n".join(out))
    return 0


def report_lines(hd, plain, dtype: str = "float32") -> list[str]:
    """The summary printed under the answer: MAT, speed, speedup, tiers, engine overhead."""
    n_steps = max(len(hd.steps), 1)
    t = hd.step_time
    order = ",".join(x.name for x in hd.tier_order) or "no tiers"
    per_step = ", ".join(
        f"{name} {1e3 * seconds / n_steps:.2f} ms"
        for name, seconds in (
            ("drafting", t.draft),
            ("budget", t.policy),
            ("tree", t.tree),
            ("acceptance", t.accept),
            ("cache+update", t.update),
        )
    )
    lines = [
        (
            f"HD ({order}): {presentation.headline(len(hd.tokens), len(hd.steps), hd.mat)}, "
            f"{hd.tokens_per_s:.1f} tokens/s; stop: {hd.stop_message}"
        ),
        f"accepted tokens by tier: {presentation.counts_text(hd.legend())}",
        (
            f"engine overhead: {100 * hd.overhead_frac:.1f} % of step time "
            f"(per step: {per_step}; forward {1e3 * t.forward / n_steps:.1f} ms)"
        ),
    ]
    # The Gumbel rule's answer is plain sampling's, as greedy HD's is plain greedy's; the rejection
    # rule's is another draw from the same distribution, which changes with the tree.
    exact = hd.seed is None or hd.sampling_rule == "gumbel"
    if hd.seed is not None:
        replay = (
            f"--seed {hd.seed} replays it"
            if exact
            else "the rejection rule: the same distribution as plain sampling, but the answer changes with the "
            "draft tree, so a seed does not replay it; the default rule, gumbel, does"
        )
        lines.append(f"sampled at temperature {hd.temperature:g} with seed {hd.seed} ({replay})")
    if plain is not None:
        if plain.tokens == hd.tokens:
            same = "identical"
        elif not exact:
            same = "a different sample from the same distribution"
        elif dtype != "float32":
            same = f"different ({presentation.rounding_note(dtype)})"
        else:
            same = "DIFFERENT (a bug: please report it)"
        lines.append(
            f"plain decoding: {len(plain.tokens)} tokens, {plain.tokens_per_s:.1f} tokens/s; "
            f"speedup {hd.tokens_per_s / plain.tokens_per_s:.2f}x (measured in this run); output {same}"
        )
    return lines


def cmd_warmup(args: argparse.Namespace) -> int:
    from hdlib.databases import make_tier
    from hdlib.models import dtype_name, load_model
    from hdlib.profile import load_or_measure

    lm = load_model(args.model, device=args.device, dtype=args.dtype)
    for tier in (Tier.MODEL, Tier.STATISTICS):  # the statistics database is built here on first use
        try:
            make_tier(tier, lm)
        except HDError as error:
            print(f"hdlib: the {tier.name} tier is not ready: {error}", file=sys.stderr)
    profile = load_or_measure(lm.model)
    s = profile.seconds
    times = f"{1e3 * s[0]:.1f} / {1e3 * s[15]:.1f} / {1e3 * s[63]:.1f} ms"
    print(f"{args.model} on {lm.device} in {dtype_name(lm.model.dtype)}: forward of 1 / 16 / 64 tokens = {times}")
    return 0


def _answerer(args: argparse.Namespace):
    """The model (or only its tokenizer side) and who answers: None for transformers on the model."""
    from hdlib.models import load_model, load_text

    engine_args = dict(args.engine_arg)
    if args.server is not None and args.engine != "transformers":
        raise HDError("--server and --engine vllm are two ways to answer: give one")
    if engine_args and args.engine != "vllm":
        raise HDError("--engine-arg goes to vLLM's engine: add --engine vllm")
    if args.server is not None:
        from hdlib.answerers import ServerAnswerer

        text = load_text(args.model)
        return text, ServerAnswerer(text, args.server, args.served_model, concurrency=args.concurrency)
    if args.engine == "vllm":
        from hdlib.answerers import VllmAnswerer

        text = load_text(args.model)
        return text, VllmAnswerer(text, engine_args)
    return load_model(args.model, device=args.device), None


def _engine_arg(text: str) -> tuple[str, object]:
    """KEY=VALUE, the value read as JSON where it is (4, 0.9, true, null), else kept as text."""
    key, sep, value = text.partition("=")
    if not sep or not key.isidentifier():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(value)
    except ValueError:
        return key, value


def cmd_build_db(args: argparse.Namespace) -> int:
    from hdlib.models import load_model

    source = args.source
    if source != "sharegpt" and not Path(source).is_file():
        raise HDError(f"--source must be 'sharegpt' or an existing file, got {source!r}")
    if args.tier == "model":
        from hdlib.modeldb import build_model_db, default_model_db_path

        lm, answerer = _answerer(args)
        try:
            path = build_model_db(
                lm,
                args.out or default_model_db_path(lm),
                prompts=None if source == "sharegpt" else Path(source),
                limit=args.limit,
                n=args.n,
                top_k=args.top_k,
                max_new_tokens=args.max_new_tokens,
                batch_size=args.batch_size,
                shard_size=args.shard_size,
                work_dir=args.work_dir,
                max_prompt_tokens=args.max_prompt_tokens,
                command=" ".join(["hdlib", *args.argv]),
                answerer=answerer,
            )
        finally:
            if answerer is not None:
                answerer.close()
    else:
        from hdlib.statsdb import build_statistics_db, default_statistics_path

        lm = load_model(args.model, device=args.device)
        path = build_statistics_db(lm, args.out or default_statistics_path(lm), source=source, limit=args.limit)
    from hdlib.store import read_meta

    meta = read_meta(path)
    counts = ", ".join(f"{k} {v:,}" for k, v in meta.get("counts", {}).items() if isinstance(v, int))
    print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB): {counts}")
    return 0


def cmd_db_info(args: argparse.Namespace) -> int:
    from hdlib.databases import describe

    print(describe(args.path, model=args.model))
    return 0


def _writable(path: Path, option: str) -> None:
    if not path.parent.is_dir():
        raise HDError(f"{option} {path}: folder {path.parent} does not exist")
    if path.is_dir():
        raise HDError(f"{option} {path} is a folder")


def cmd_bench(args: argparse.Namespace) -> int:
    from hdlib.bench import parse_methods, run_benchmark, summary
    from hdlib.benchlog import ResultsLog, raw_path, run_settings
    from hdlib.decoding import DecodeSettings
    from hdlib.models import dtype_name, get_device, load_model, resolve_dtype
    from hdlib.specbench import load_questions, per_task
    from hdlib.store import write_text_atomic

    # Everything that can be checked without the model is checked first.
    DecodeSettings(max_new_tokens=args.max_new_tokens, temperature=args.temperature)
    methods = [m.name for m in parse_methods(args.methods)]
    _writable(args.out, "--out")
    if args.html is not None:
        _writable(args.html, "--html")
        try:
            import hdlib.viz.bench  # noqa: F401  (plotly and the notebook extras)
        except ImportError as e:
            raise HDError(f"--html needs the notebook extras ({e.name} is missing): pip install -e '.[notebooks]'") from None

    def bad_line(message: str) -> None:
        print(f"hdlib: warning: skipped {message}", file=sys.stderr)

    questions = per_task(load_questions(args.questions, on_bad_line=bad_line), args.per_task)
    if args.prompt_format == "raw" and any(len(q.turns) > 1 for q in questions):
        raise HDError(
            "--prompt-format raw has no turns, and some questions have several: use auto, vicuna or chat-template"
        )
    device = get_device()
    dtype = dtype_name(resolve_dtype(args.dtype, device))  # what "auto" means here, recorded as such
    settings = run_settings(
        args.model, str(device), args.temperature, args.max_new_tokens, methods, questions, dtype, args.sampling_rule,
        args.prompt_format,
    )  # fmt: skip
    log = ResultsLog(raw_path(args.out), settings, resume=args.resume)

    lm = load_model(args.model, device=device, dtype=dtype, prepack=args.prepack)
    bar = tqdm(total=len(questions), initial=len(log.done), desc="questions", unit="q", file=sys.stderr)

    def on_question(question, answered) -> None:
        log.append(answered)
        bar.update(1)
        bar.set_postfix_str(f"q{question.question_id} {question.task}")

    try:
        results = run_benchmark(
            lm, questions, methods, args.max_new_tokens, on_question, args.temperature, log.done,
            sampling_rule=args.sampling_rule, prompt_format=args.prompt_format,
        )  # fmt: skip
    except KeyboardInterrupt:
        bar.close()
        again = shlex.join(["hdlib", *args.argv, *([] if args.resume else ["--resume"])])
        print(
            f"hdlib: interrupted: {len(log.done)} of {len(questions)} questions done, kept in {log.path}; "
            f"continue with: {again}",
            file=sys.stderr,
        )
        return 130
    bar.close()
    write_text_atomic(args.out, json.dumps(results.to_json(), indent=1))
    if args.html is not None:
        from hdlib.viz.bench import write_html_report

        write_html_report(results, args.html)
    print(summary(results))
    print(f"\nwrote {args.out} (raw results: {log.path})" + (f" and {args.html}" if args.html else ""))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    try:
        argv = list(sys.argv[1:] if argv is None else argv)
        args = build_parser().parse_args(argv)
        args.argv = argv  # how the command was asked for, for database metadata
        commands = {
            "generate": cmd_generate,
            "warmup": cmd_warmup,
            "build-db": cmd_build_db,
            "db": cmd_db_info,
            "bench": cmd_bench,
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
