"""The model database built three ways on one machine: transformers, vLLM's offline engine, `vllm serve`.

    python -m benchmarks.model_db_engines [--limit 64] [--max-new-tokens 192]
        [--out benchmarks/results/<machine>/model_db_engines.json]

Each build answers the same first `--limit` ShareGPT train prompts with the packaged model, as the
shipped database was built (192 new tokens, prompts cut to 512 tokens; transformers in batches of 8),
one after another in this run, each in a fresh work folder: `hdlib build-db model` in .venv for
transformers, the same command with `--engine vllm` in .venv-vllm (`make setup-vllm`), and with
`--server` against `vllm serve` started here and stopped after. Per build: the seconds of answering
(the file's `generation_seconds`), answers and answer tokens per second, the peak memory of the
whole process tree (the build, vLLM's engine processes, the server: resident sets summed, sampled
every 0.2 s), and how many of its n-grams and answers the transformers build shares.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request
from collections.abc import Mapping
from itertools import pairwise
from pathlib import Path
from typing import Any

from benchmarks.common import results_path, write_results
from benchmarks.markdown import code, count, f1, f2, f3, table
from hdlib.models.cpu import describe_machine
from hdlib.models.loading import DEFAULT_MODEL, load_text
from hdlib.store import read_db

ROOT = Path(__file__).resolve().parents[1]
VLLM_BIN = ROOT / ".venv-vllm" / "bin"
ENV = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "2", "TOKENIZERS_PARALLELISM": "false"}
ENGINE = {"dtype": "float32", "max_model_len": 1024, "enforce_eager": True}


def tree_rss_mb(pid: int) -> float:
    """Resident memory of `pid` and all its descendants, in MB (Linux /proc)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(entry.name))
            rss[int(entry.name)] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, IndexError, ValueError):
            continue
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        total += rss.get(p, 0)
        todo += children.get(p, [])
    return total / 1e6


class PeakMemory:
    """Samples the memory of a process tree in a thread until stopped; `peak_mb` the largest sum."""

    def __init__(self, *pids: int) -> None:
        self.pids, self.peak_mb, self._stop = list(pids), 0.0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self.peak_mb = max(self.peak_mb, sum(tree_rss_mb(p) for p in self.pids))

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return round(self.peak_mb)


def build(python: Path, args: list[str], work: Path, also: list[int] = ()) -> dict:
    out = work / "db.npz"
    command = [str(python), "-m", "hdlib", "build-db", "model", *args, "--out", str(out), "--work-dir", str(work / "w")]
    started = time.perf_counter()
    process = subprocess.Popen(command, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    memory = PeakMemory(process.pid, *also)
    _, stderr = process.communicate()
    peak = memory.stop()
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{stderr[-3000:]}")
    meta = read_db(out)[0]
    seconds = meta["build"]["generation_seconds"]
    counts = meta["counts"]
    return {
        "command": " ".join(["hdlib", *command[4:]]),
        "wall_seconds": round(time.perf_counter() - started, 1),
        "generation_seconds": seconds,
        "answers_per_s": round(counts["answers"] / seconds, 3),
        "answer_tokens_per_s": round(counts["answer_tokens"] / seconds, 1),
        "peak_memory_mb": peak,
        "counts": counts,
        "engine": meta["build"]["engine"],
        "path": str(out),
    }


def agreement(a: dict, b: dict) -> dict:
    """How much of build `a` the reference build `b` shares: n-grams (Jaccard) and whole answers."""
    sets = [{tuple(r) for r in read_db(Path(x["path"]))[1]["ngrams"].tolist()} for x in (a, b)]
    answers = []
    for x in (a, b):
        got = []
        for shard in sorted((Path(x["path"]).parent / "w").glob("shard-*.npz")):
            arrays = read_db(shard)[1]
            offsets, tokens = arrays["offsets"].tolist(), arrays["tokens"].tolist()
            got += [tokens[i:j] for i, j in pairwise(offsets)]
        answers.append(got)
    same = sum(x == y for x, y in zip(*answers))
    return {"ngram_jaccard": round(len(sets[0] & sets[1]) / len(sets[0] | sets[1]), 3), "answers_identical": same}


def serve(folder: str, port: int, log: Path) -> subprocess.Popen:
    server = subprocess.Popen(
        [str(VLLM_BIN / "python"), "-m", "vllm.entrypoints.openai.api_server", "--model", folder,
         "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32",
         "--max-model-len", "1024", "--enforce-eager"],
        env=ENV, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 600
    while True:
        if server.poll() is not None:
            raise SystemExit(f"vllm serve exited:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=5):
                return server
        except OSError:
            if time.monotonic() > deadline:
                raise SystemExit("vllm serve did not answer within 600 s") from None
            time.sleep(2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--limit", type=int, default=64)
    parser.add_argument("--max-new-tokens", type=int, default=192)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--out", type=Path, default=results_path("model_db_engines.json"))
    args = parser.parse_args()
    common = ["--limit", str(args.limit), "--max-new-tokens", str(args.max_new_tokens), "--max-prompt-tokens", "512",
              "--shard-size", "32"]  # fmt: skip
    engine_args = [f"--engine-arg={k}={json.dumps(v)}" for k, v in ENGINE.items()]
    results: dict = {"machine": describe_machine(), "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "builds": {}}
    with tempfile.TemporaryDirectory() as tmp:
        here = Path(tmp)
        runs = results["builds"]
        runs["transformers"] = build(ROOT / ".venv/bin/python", [*common, "--batch-size", "8"], here / "t")
        print("transformers:", runs["transformers"]["answers_per_s"], "answers/s", flush=True)
        runs["vllm offline"] = build(VLLM_BIN / "python", [*common, "--engine", "vllm", *engine_args], here / "v")
        print("vllm offline:", runs["vllm offline"]["answers_per_s"], "answers/s", flush=True)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        server = serve(load_text(DEFAULT_MODEL).source, port, here / "serve.log")
        try:
            url = f"http://127.0.0.1:{port}"
            runs["vllm serve"] = build(
                ROOT / ".venv/bin/python", [*common, "--server", url, "--concurrency", str(args.concurrency)],
                here / "s", also=[server.pid],
            )  # fmt: skip
            print("vllm serve:", runs["vllm serve"]["answers_per_s"], "answers/s", flush=True)
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=60)
        for name in ("vllm offline", "vllm serve"):
            runs[name]["against_transformers"] = agreement(runs[name], runs["transformers"])
        for run in runs.values():
            run.pop("path")
    base = results["builds"]["transformers"]["answers_per_s"]
    results["answers_per_s_vs_transformers"] = {
        k: round(v["answers_per_s"] / base, 2) for k, v in results["builds"].items()
    }
    write_results(args.out, "model_db_engines", serving=True, **results)  # vLLM's builds ran in .venv-vllm
    print(json.dumps(results["answers_per_s_vs_transformers"]), "->", args.out)


def tables(data: Mapping[str, Any]) -> list[str]:
    rows = []
    for name, b in data["builds"].items():
        same = b.get("against_transformers")
        rows.append(
            [
                name,
                f3(b["answers_per_s"]),
                f1(b["answer_tokens_per_s"]),
                f2(data["answers_per_s_vs_transformers"][name]),
                count(b["peak_memory_mb"]),
                f1(b["generation_seconds"]),
                f1(b["wall_seconds"]),
                f"{same['answers_identical']} of {b['counts']['answers']} (n-gram overlap {f3(same['ngram_jaccard'])})"
                if same
                else "",
            ]
        )
    header = ["build", "answers/s", "answer tokens/s", "vs transformers", "peak memory MB", "answering s", "wall s"]
    builds = "; ".join(f"{name}: {code(b['command'])}" for name, b in data["builds"].items())
    return [table([*header, "answers identical to transformers'"], rows), f"The builds' own commands: {builds}."]


if __name__ == "__main__":
    main()
