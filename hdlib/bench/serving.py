"""The serving engine's own speculative decoding as bench methods: vLLM, batch 1, greedy, plain
(`vllm`) and with its `speculative_config` (`vllm-ngram`: prompt lookup; `vllm-suffix`:
SuffixDecoding; `vllm-hd`: hdlib's tiers as its proposer, `hdlib.serving.proposer`), as a user who
serves the model would compare.

vLLM lives in its own environment (.venv-vllm, `make setup-vllm`: it pins another transformers), so
`hdlib bench` run in hdlib's environment answers the vLLM methods in a second pass: the same command
in .venv-vllm with `ar` and the vLLM methods only (`second_pass`), its results in a file of their
own beside `--out`. In that pass `ar` runs side by side with vLLM, interleaved question by question,
so the tokens per second of each are measured in one run, and every vLLM answer is checked against
`ar`'s, token for token.

Each method is one `vllm.LLM` (started once per run, at its first question), asked one prompt at a
time as token ids with greedy sampling. Its MAT comes from the engine's own statistics of accepted
draft tokens, step by step: a step emits its accepted tokens and one more, so steps = tokens -
accepted.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hdlib.bench.arms import method_of
from hdlib.databases.answerers import shut_down
from hdlib.errors import HDError
from hdlib.models.loading import LoadedModel
from hdlib.serving.proposer import CLOCK_ENV, COST_SCALE_ENV, TIERS_ENV, clock_on, cost_scale, tier_order

# method name -> vLLM's speculative_config (None: plain decoding)
VLLM_METHODS: dict[str, dict[str, Any] | None] = {
    "vllm": None,
    # vLLM's n-gram (prompt lookup) proposer: 8 tokens after a match of 4 down to 2 tokens
    "vllm-ngram": {"method": "ngram", "num_speculative_tokens": 8, "prompt_lookup_max": 4, "prompt_lookup_min": 2},
    # SuffixDecoding through arctic-inference, as hdlib's `suffix` method is set (hdlib.tiers.other_methods)
    "vllm-suffix": {"method": "suffix", "num_speculative_tokens": 24, "suffix_decoding_max_tree_depth": 24},
    # hdlib's HD as vLLM's proposer: the tiers' trie reduced to a chain of at most 16 (hdlib.serving)
    "vllm-hd": {"method": "custom_class", "model": "hdlib.serving.proposer.HDProposer", "num_speculative_tokens": 16},
}
HD = "vllm-hd"  # and `vllm-hd:ORDER`: the proposer's tiers by letter, in the order asked; `+cost=X`: COST_SCALE_ENV
HD_OPTIONS = {"cost": COST_SCALE_ENV, "clock": CLOCK_ENV}  # vllm-hd+NAME=VALUE: its engine's environment


def vllm_method(name: str) -> tuple[str, dict[str, str]] | None:
    """A vLLM method's entry in VLLM_METHODS and the environment its engine starts with (`vllm-hd:SC`:
    `vllm-hd`, asking the statistics tier, then the context tier; `vllm-hd+cost=0.5`: its draft tokens'
    cost weighed by 0.5; `vllm-hd+clock=0`: that cost as measured, not learned from the served steps);
    None for a name that is not vLLM's. An A/A arm's (`vllm-hd#2`) is its method's."""
    head, *options = method_of(name).split("+")
    base, colon, order = head.partition(":")
    if options and base != HD:
        if base in VLLM_METHODS:
            raise HDError(f"method {name!r}: only {HD} takes +cost=X or +clock=0|1")
        return None
    env: dict[str, str] = {}
    for option in options:
        key, _, value = option.partition("=")
        try:
            env[HD_OPTIONS[key]] = str(cost_scale(value)) if key == "cost" else str(int(clock_on(value)))
        except (KeyError, HDError):
            raise HDError(f"method {name!r}: {HD} takes +cost=X, X a number of at least 0, and +clock=0 or 1") from None
    if base == HD and colon:
        try:
            return base, {TIERS_ENV: tier_order(order), **env}
        except HDError:
            raise HDError(f"method {name!r}: {HD}:ORDER takes tiers by letter, each once, of C, M, S") from None
    return (head, env) if head in VLLM_METHODS else None


# The CPU engine as tests/test_vllm.py runs it: float32 as hdlib runs the model, no graph capture.
# Its statistics on: the counters of accepted draft tokens.
ENGINE_ARGS: dict[str, Any] = {"max_model_len": 4096, "enforce_eager": True, "seed": 0, "disable_log_stats": False}
KV_CACHE_GIB = "2"  # VLLM_CPU_KVCACHE_SPACE, unless set: each engine's KV cache on the CPU
VLLM_VENV = Path(__file__).resolve().parents[2] / ".venv-vllm"


def has_vllm() -> bool:
    """Whether vLLM is installed in this environment (found, not imported: importing it takes seconds)."""
    return importlib.util.find_spec("vllm") is not None


@dataclass(frozen=True)
class VllmAnswer:
    ids: list[int]  # the answer's tokens, the end token included where it came
    wall_s: float  # the request, prefill included
    steps: int  # forward passes that emitted tokens: tokens - accepted draft tokens


class VllmEngine:
    """One vLLM engine for `lm`'s weights with one method's speculative config."""

    def __init__(self, lm: LoadedModel, method: str) -> None:
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", KV_CACHE_GIB)
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")  # its start-up lines would bury the progress
        try:
            import vllm
        except ImportError as error:
            raise HDError(
                f"method {method!r} runs in vLLM's environment: `make setup-vllm` makes .venv-vllm, and "
                "`hdlib bench` run here answers it there in a second pass"
            ) from error
        self._vllm = vllm
        self.method = method
        base, env = vllm_method(method) or (method, {})
        spec = VLLM_METHODS[base]
        dtype = str(lm.model.dtype).removeprefix("torch.")
        args = {**ENGINE_ARGS, "dtype": dtype, **({"speculative_config": spec} if spec else {})}
        with environment(env):  # the engine's processes, started here, read it
            self._llm = vllm.LLM(model=lm.source, tokenizer=lm.source, **args)
        self._params = vllm.SamplingParams(temperature=0.0, max_tokens=1, stop_token_ids=sorted(lm.eos_token_ids))
        self.accepted = 0  # draft tokens accepted in this engine's steps so far
        self._count_accepted()

    def _count_accepted(self) -> None:
        """Count the accepted draft tokens of this engine's steps as its engine records them. vLLM's
        own counters (`LLM.get_metrics`) are one process-wide registry that the last engine started
        takes over, so each engine's statistics are read where it records them (vLLM 0.32)."""
        manager = getattr(getattr(self._llm, "llm_engine", None), "logger_manager", None)
        if manager is None:
            version = self._vllm.__version__
            raise HDError(f"vLLM {version}: no statistics where hdlib reads them (llm_engine.logger_manager)")
        record = manager.record

        def counting(scheduler_stats: Any = None, *args: Any, **kwargs: Any) -> Any:
            spec = getattr(scheduler_stats, "spec_decoding_stats", None)
            if spec is not None:
                self.accepted += int(spec.num_accepted_tokens)
            return record(scheduler_stats, *args, **kwargs)

        manager.record = counting

    def answer(self, prompt_ids: Sequence[int], max_new_tokens: int) -> VllmAnswer:
        params = self._params.clone()
        params.max_tokens = max_new_tokens
        before = self.accepted
        start = time.perf_counter()
        out = self._llm.generate([self._vllm.TokensPrompt(prompt_token_ids=list(prompt_ids))], params, use_tqdm=False)
        wall = time.perf_counter() - start
        ids = [int(t) for t in out[0].outputs[0].token_ids]
        accepted = self.accepted - before
        return VllmAnswer(ids, wall, max(len(ids) - accepted, 1))

    def close(self) -> None:
        shut_down(self._llm)
        del self._llm


class VllmEngines:
    """The engines of one run, started at their method's first question, closed together (`with`
    closes them: none is started where a run has no vLLM method)."""

    def __init__(self) -> None:
        self._engines: dict[str, VllmEngine] = {}

    def get(self, lm: LoadedModel, method: str) -> VllmEngine:
        if method not in self._engines:
            self._engines[method] = VllmEngine(lm, method)
        return self._engines[method]

    def close(self) -> None:
        for engine in self._engines.values():
            engine.close()
        self._engines.clear()

    def __enter__(self) -> VllmEngines:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    """os.environ with `values` set, within; as it was, after."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def free_port(exclude: set[int] = frozenset()) -> int:  # type: ignore[assignment]
    """A TCP port on 127.0.0.1 that nothing listens on now, and not one of `exclude` (given to a
    server that has not bound it yet)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in exclude:
            return port


def vllm_python() -> Path:
    """The Python that has vLLM: this one if it does, else .venv-vllm's (`make setup-vllm`)."""
    if importlib.util.find_spec("vllm") is not None:
        return Path(sys.executable)
    python = VLLM_VENV / "bin" / "python"
    if not python.exists():
        raise HDError(f"vLLM is neither installed here nor in {VLLM_VENV}: `make setup-vllm` makes it")
    return python


def server_command(python: Path, folder: str, spec: dict[str, Any] | None, args: Sequence[str]) -> list[str]:
    """vLLM's OpenAI-compatible server for the model at `folder`, with `spec` as its speculative config.
    Its module, not the `vllm` command: vllm-cpu 0.32's fails on its own package metadata."""
    return [
        str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", folder,
        *(["--speculative-config", json.dumps(spec)] if spec else []), *args,
    ]  # fmt: skip


@contextmanager
def vllm_server(
    folder: str, method: str = "vllm", log: Path | None = None, args: Sequence[str] = (), timeout_s: float = 600
) -> Iterator[str]:
    """`vllm serve` for the model at `folder` with `method`'s speculative config, started from
    .venv-vllm on a free port of 127.0.0.1: within, its URL, once it answers; after, it and only it is
    stopped (the server and the engine processes it started, by their process group)."""
    with vllm_servers(folder, [method], {method: log} if log else {}, args, timeout_s) as urls:
        yield urls[method]


@contextmanager
def vllm_servers(
    folder: str, methods: Sequence[str], logs: Mapping[str, Path] = {}, args: Sequence[str] = (), timeout_s: float = 600
) -> Iterator[dict[str, str]]:  # fmt: skip
    """One `vllm serve` per method (as `vllm_server` starts one), all started before any is waited for,
    so that their start-ups overlap: within, each method's URL, once every one answers; after, each
    is stopped, those and only those."""
    python = vllm_python()
    started: dict[str, tuple[subprocess.Popen[bytes], str]] = {}
    with contextlib.ExitStack() as stack:
        for method in methods:
            port = free_port(exclude={int(url.rsplit(":", 1)[1]) for _, url in started.values()})
            base, extra = vllm_method(method) or (method, {})
            spec = VLLM_METHODS[base]
            common = ["--host", "127.0.0.1", "--port", str(port), "--served-model-name", method_of(method), "--seed",
                      "0"]  # fmt: skip
            if base == HD:  # as a user serves with HD: `hdlib serve`, the proposer and the model's databases
                order = extra.get(TIERS_ENV, "CMS")
                hdlib = [str(python), "-m", "hdlib", "serve", folder, "--tiers", order]
                command = [*hdlib, "--", *common, "--enforce-eager", *args]
            else:
                command = server_command(python, folder, spec, [*common, "--enforce-eager", *args])
            env = {"VLLM_CPU_KVCACHE_SPACE": KV_CACHE_GIB, "TOKENIZERS_PARALLELISM": "false", **os.environ, **extra}
            out = stack.enter_context(open(logs.get(method) or os.devnull, "w"))
            server = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
            stack.callback(stop, server)
            started[method] = (server, f"http://127.0.0.1:{port}")
        deadline = time.monotonic() + timeout_s
        for method, (server, url) in started.items():
            while True:
                if server.poll() is not None:
                    log = logs.get(method)
                    tail = Path(log).read_text()[-3000:] if log else ""
                    raise HDError(f"vllm serve ({method}) stopped with status {server.returncode}\n{tail}")
                try:
                    with urllib.request.urlopen(f"{url}/v1/models", timeout=5):
                        break
                except OSError:
                    if time.monotonic() > deadline:
                        raise HDError(f"vllm serve ({method}) did not answer within {timeout_s:.0f} s") from None
                    time.sleep(2)
        yield {method: url for method, (_, url) in started.items()}


def stop(server: subprocess.Popen[bytes]) -> None:
    """Stop a server started in a session of its own, and the processes it started."""
    os.killpg(server.pid, signal.SIGTERM)
    try:
        server.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()


def warm_up(url: str, method: str, prompt: str = "Say hello.", max_tokens: int = 16) -> None:
    """One untimed completion from the server at `url` (started for `method`), before a measured load:
    its first request pays for what a server does once (kernels chosen, buffers allocated)."""
    body = json.dumps({"model": method_of(method), "prompt": prompt, "max_tokens": max_tokens, "temperature": 0})
    request = urllib.request.Request(
        f"{url}/v1/completions", body.encode(), {"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=300) as answer:
        answer.read()


# `vllm bench serve`, run as a module: vllm-cpu 0.32's `vllm` command fails on its own metadata lookup.
BENCH_SERVE = (
    "import sys\n"
    "from vllm.benchmarks import serve\n"
    "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
    "parser = FlexibleArgumentParser()\n"
    "serve.add_cli_args(parser)\n"
    "serve.main(parser.parse_args(sys.argv[1:]))\n"
)


def bench_serve(
    url: str, served: str, tokenizer: str, prompts: Sequence[str], concurrency: int, max_tokens: int, folder: Path,
    timeout_s: float = 3600,
) -> dict[str, Any]:  # fmt: skip
    """vLLM's own load generator (`vllm bench serve`, from .venv-vllm) against the server at `url`:
    each of `prompts` once, in order, as a user turn in the model's chat template, greedy, at most
    `concurrency` in flight, each answer at most `max_tokens`; its detailed results (per request:
    output tokens, latency, time to the first token, inter-token latencies, the generated text; the
    server's accepted draft tokens over the run), as it saves them. Bounded: it sends len(prompts)
    requests and stops."""
    python = VLLM_VENV / "bin" / "python"
    if not python.exists():
        raise HDError(f"vllm bench serve runs in {VLLM_VENV}, which is missing: `make setup-vllm` makes it")
    folder.mkdir(parents=True, exist_ok=True)
    dataset = folder / f"prompts-c{concurrency}.jsonl"
    dataset.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in prompts), encoding="utf-8")
    result = folder / f"result-c{concurrency}.json"
    command = [
        str(python), "-c", BENCH_SERVE, "--backend", "openai", "--base-url", url, "--endpoint", "/v1/completions",
        "--model", served, "--tokenizer", tokenizer, "--dataset-name", "custom", "--dataset-path", str(dataset),
        "--disable-shuffle", "--custom-output-len", str(max_tokens), "--num-prompts", str(len(prompts)),
        "--max-concurrency", str(concurrency), "--temperature", "0", "--save-result", "--save-detailed",
        "--result-dir", str(folder), "--result-filename", result.name, "--percentile-metrics", "ttft,tpot,itl,e2el",
        "--metric-percentiles", "50,99",
    ]  # fmt: skip
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout_s)
    if done.returncode != 0 or not result.exists():
        raise HDError(f"vllm bench serve failed (status {done.returncode}):\n{(done.stdout + done.stderr)[-3000:]}")
    return json.loads(result.read_text(encoding="utf-8"))


def second_pass_path(out: str | Path) -> Path:
    """Where the vLLM pass of `hdlib bench --out OUT` writes its results: OUT's name with `-vllm`."""
    out = Path(out)
    return out.with_name(f"{out.stem}-vllm{out.suffix}")


class Terminated(KeyboardInterrupt):
    """SIGTERM (`kill`), raised where Ctrl-C's KeyboardInterrupt would be: a run stops as on Ctrl-C,
    its answers kept and vLLM's engines shut down."""


@contextmanager
def stop_on_terminate() -> Iterator[None]:
    """Within: SIGTERM raises `Terminated` (once; a second one while stopping is ignored)."""

    def stop(signum: int, frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the stop itself is not cut short
        raise Terminated

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def second_pass(
    argv: Sequence[str], methods: Sequence[str], out: str | Path, compare: Sequence[tuple[str, str]] = ()
) -> int:
    """Run `hdlib bench` again in .venv-vllm with `ar` and the vLLM `methods` only, and the paired
    comparisons `compare` of that pass only, writing its results beside `out`: the exit status of
    that run."""
    python = VLLM_VENV / "bin" / "python"
    if not python.exists():
        raise HDError(
            f"the vLLM methods {', '.join(methods)} run in {VLLM_VENV}, which is missing: `make setup-vllm` makes it"
        )
    rest = strip_options(argv, {"--methods", "--out", "--html", "--compare"})
    pairs = [arg for pair in compare for arg in ("--compare", ",".join(pair))]
    # an arm goes by its method's name: the pass names it again (vllm-hd,vllm-hd), as the user did
    names = ",".join(method_of(m) for m in methods)
    command = [str(python), "-m", "hdlib", *rest, *pairs, "--methods", names, "--out", str(second_pass_path(out))]
    print(f"hdlib: the vLLM methods, in {VLLM_VENV}: {shlex.join(command)}", file=sys.stderr)
    with subprocess.Popen(command) as process:
        try:
            return process.wait()
        except Terminated:  # Ctrl-C reaches the vLLM pass by itself; a `kill` of this process is passed on
            process.terminate()
            process.wait()
            raise


def strip_options(argv: Sequence[str], options: set[str]) -> list[str]:
    """`argv` without the given options and their values (as `--opt value` or `--opt=value`)."""
    kept: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in options:
            skip = "=" not in arg
            continue
        kept.append(arg)
    return kept
