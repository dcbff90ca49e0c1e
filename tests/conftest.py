import sys
from pathlib import Path

import pytest

# Test helpers (tiny models, prompts) import as plain modules: `from tiny import tiny_llama`.
sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture
def registered():
    """The test tier `Echo` (tests/echo.py) registered under its name and letter for one test."""
    from echo import ECHO, Echo

    from hdlib.databases.registry import register_tier, unregister_tier

    register_tier(Echo)
    yield ECHO
    unregister_tier(ECHO)


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
    and the exit quiz on the class prompt): (game, quiz, folder). test_handouts.py checks them against
    the engine, test_browser.py renders them."""
    from hdlib.models.loading import load_model
    from hdlib.viz.quiz import write_handouts

    out = tmp_path_factory.mktemp("handouts")
    game, quiz, _ = write_handouts(load_model("smollm2-135m"), out)
    return game, quiz, out
