import sys
from pathlib import Path

import pytest

# The tests' shared helpers are the package `support` (tests/support): `from support.tiny import tiny_llama`.
sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture
def registered():
    """The test tier `Echo` (tests/support/echo.py) registered under its name and letter for one test."""
    from support.echo import ECHO, Echo

    from hdlib.databases.registry import register_tier, unregister_tier

    register_tier(Echo)
    yield ECHO
    unregister_tier(ECHO)


# The bench tests' model folder and results (tests/test_bench_*.py; their `lm` is the one below), made once
# per test file


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    from support.tiny import save_tiny

    return save_tiny(tmp_path_factory.mktemp("tiny") / "m")


@pytest.fixture(scope="module")
def results(lm, tmp_path_factory):
    from support.bench_inputs import METHODS, write_questions

    from hdlib.bench import run_benchmark
    from hdlib.bench.specbench import load_questions, per_task

    questions = load_questions(write_questions(tmp_path_factory.mktemp("q") / "q.jsonl"))
    return run_benchmark(lm, per_task(questions, None), METHODS, max_new_tokens=12)


@pytest.fixture
def no_model_load(monkeypatch):
    import hdlib.models.loading

    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded before the input was checked")

    monkeypatch.setattr(hdlib.models.loading, "load_model", refuse)


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    """The tiny random model (tests/support/tiny.py), loaded once per test module that asks for it; a test file's own
    `lm` takes its place."""
    from support.tiny import save_tiny

    import hdlib

    return hdlib.load_model(str(save_tiny(tmp_path_factory.mktemp("tiny"))), device="cpu")


@pytest.fixture(scope="module")
def truths(lm):
    """Prompt text -> prompt ids + the plain greedy answer: what the oracle tiers draft from."""
    from support.tiny_prompts import MAX_NEW, PROMPTS

    import hdlib

    out = {}
    for text in [*PROMPTS.values(), "how are you"]:
        ids = lm.encode_prompt(text)
        out[text] = ids + hdlib.generate(lm, ids, tiers=(), max_new_tokens=MAX_NEW).tokens
    return out


@pytest.hookimpl(trylast=True)  # after -k and -m have deselected: the items that will run
def pytest_collection_modifyitems(config, items):
    """Every notebook is run once per session: where the browser test runs in this session (it is
    selected and Chromium, node and playwright-core are here) it runs all cells of every notebook and
    fails on an error in any cell, so the kernel-only run of the same notebooks is skipped; where it
    does not, test_notebooks.py runs them."""
    from test_browser import missing_prerequisite

    if not any(Path(item.path).name == "test_browser.py" for item in items) or missing_prerequisite():
        return
    reason = "run all in the browser test of this session (tests/test_browser.py), which fails on any cell's error"
    for item in items:
        if getattr(item, "originalname", "") == "test_notebook_runs":
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def handouts(tmp_path_factory):
    """The handouts of the packaged model, written once as `hdlib handouts` writes them (the card game
    on the card prompt, the exit quiz on the class prompt): (game, quiz, folder). test_handouts.py checks them against
    the engine, test_browser.py renders them."""
    from hdlib.models.loading import load_model
    from hdlib.viz.quiz import write_handouts

    out = tmp_path_factory.mktemp("handouts")
    game, quiz, _ = write_handouts(load_model("smollm2-135m"), out)
    return game, quiz, out
