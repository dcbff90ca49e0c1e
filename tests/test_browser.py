"""The notebooks in a real browser: JupyterLab in headless Chromium, as a person uses them.

A kernel-only run (test_notebooks.py) sees no drawing: a figure 0 px high, a widget view that fails in
plotly's JavaScript, a stale legend, a cut title. Here a JupyterLab of our own serves a copy of
notebooks/, and tests/browser/notebooks.mjs (playwright-core on Debian's /usr/bin/chromium) opens
every notebook and runs all its cells; in 03 and 05 it clicks and moves the widgets' controls (in 03
the budget too, and the predict game: five rounds guessed, revealed, scored) and shows a widget a second time,
and reloads 03's page; it writes what the page showed into a report
that the tests below read.
Before the notebooks it runs the class set-up (`make class`'s warm-up in bfloat16) and afterwards
checks that they built nothing. tests/browser/pages.mjs opens the printed handouts (`hdlib handouts`:
the card game, the exit quiz) and prints each to PDF (one A4 page each).
Screenshots stay in pytest's temporary folder and in tests/browser/artifacts/.

Run alone: .venv/bin/python -m pytest -m browser   (scripts/setup.sh installs Chromium and the
node packages where it can; without them these tests skip and say why.)
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from hdlib.tiers import BONUS, DEFAULT_TIERS

pytestmark = [pytest.mark.slow, pytest.mark.browser]

ROOT = Path(__file__).resolve().parents[1]
DRIVER = ROOT / "tests" / "browser"
ARTIFACTS = DRIVER / "artifacts"
CHROMIUM = Path("/usr/bin/chromium")
LAB_SETTINGS = ROOT / "scripts" / "lab-settings"  # overrides.json: no news pop-up (make lab uses it too)
NOTEBOOKS = sorted(path.name for path in (ROOT / "notebooks").glob("*.ipynb"))
WITHOUT_FIGURES = {"00_quickstart.ipynb"}  # an answer in HTML: no plotly figure to draw
TIER_COLOURS = {t.name: t.color for t in (*DEFAULT_TIERS, BONUS)}
# The limits leave room for a machine busy with other work (README: what the test takes).
STEP_TIMEOUT_S = 600  # one run of all cells, or one interaction
DRIVER_TIMEOUT_S = 1500


def missing_prerequisite() -> str | None:
    if not CHROMIUM.exists():
        return f"{CHROMIUM} is missing (Debian's chromium: scripts/setup.sh installs it when run as root)"
    if shutil.which("node") is None:
        return "node is missing (Node.js 18 or newer runs tests/browser/notebooks.mjs)"
    if not (DRIVER / "node_modules" / "playwright-core").is_dir():
        return "tests/browser/node_modules lacks playwright-core: run `npm ci --prefix tests/browser`"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab of our own on a copy of notebooks/: (url, token). Stopped afterwards, it and only it."""
    reason = missing_prerequisite()
    if reason:
        pytest.skip(reason)
    home = tmp_path_factory.mktemp("lab")
    root = home / "notebooks"
    shutil.copytree(ROOT / "notebooks", root)  # the outputs land in the copy, never in the repository
    for beside in ("data", "benchmarks"):  # as in the repository, for paths like ../data/... in the notebooks
        (home / beside).symlink_to(ROOT / beside)
    port, token = free_port(), secrets.token_hex(16)
    env = {
        **os.environ,
        "JUPYTERLAB_SETTINGS_DIR": str(home / "settings"),  # nobody's own settings or workspaces
        "JUPYTERLAB_WORKSPACES_DIR": str(home / "workspaces"),
        "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
    }
    command = [
        sys.executable, "-m", "jupyterlab", "--no-browser", f"--ServerApp.root_dir={root}",
        "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}", f"--LabApp.app_settings_dir={LAB_SETTINGS}",
        *(["--allow-root"] if os.getuid() == 0 else []),
    ]  # fmt: skip
    log = (home / "lab.log").open("w")
    server = subprocess.Popen(command, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            if server.poll() is not None:
                pytest.fail(f"JupyterLab exited with {server.returncode}:\n{(home / 'lab.log').read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=5) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"JupyterLab did not answer on {url} within 90 s")
            time.sleep(0.5)
        yield url, token
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


@pytest.fixture(scope="module")
def report(lab, tmp_path_factory, request) -> dict:
    """What the browser saw: the driver's report.json (see tests/browser/notebooks.mjs)."""
    url, token = lab
    out = tmp_path_factory.mktemp("browser")
    config = out / "config.json"
    config.write_text(json.dumps({"url": url, "token": token, "out": str(out), "notebooks": NOTEBOOKS,
                                  "timeout_s": STEP_TIMEOUT_S}))  # fmt: skip
    # The set-up before class (`make class`: setup's warm-up in the default dtype, then bfloat16, which
    # notebook 05 loads); from here on the notebooks should build nothing.
    from hdlib.cli import main as hdlib_main

    assert hdlib_main(["warmup", "--dtype", "bfloat16"]) == 0
    cached = cache_files()
    driver = subprocess.Popen(["node", str(DRIVER / "notebooks.mjs"), str(config)], cwd=DRIVER,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              start_new_session=True)  # fmt: skip
    try:
        output, _ = driver.communicate(timeout=DRIVER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(driver.pid, signal.SIGKILL)  # node and the Chromium it started
        output, _ = driver.communicate()
        pytest.fail(f"the browser driver ran past {DRIVER_TIMEOUT_S} s; {timelines(out)}\n{output[-3000:]}")
    finally:
        keep_artifacts(out, request)
    path = out / "report.json"
    assert path.exists(), f"the driver wrote no report (exit {driver.returncode}):\n{output[-3000:]}"
    found = json.loads(path.read_text())
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"browser test: {timelines(out)}")
    assert found["error"] is None, found["error"]
    now = cache_files()
    found["built"] = sorted(path for path in now if cached.get(path) != now[path])
    return found


def cache_files() -> dict[str, tuple[int, int]]:
    """Every file in hdlib's cache: its size and modification time."""
    from hdlib.paths import cache_dir

    root = cache_dir()
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()}


def timelines(out: Path) -> str:
    """When each notebook began what (seconds after it was opened), from the report as far as written."""
    try:
        entries = json.loads((out / "report.json").read_text())["notebooks"]
    except (OSError, ValueError, KeyError):
        return "no report yet"
    return "; ".join(
        f"{file} {e['seconds']} s: " + ", ".join(f"{phase} {t:.0f}" for phase, t in e["timeline"])
        for file, e in entries.items()
    )


def keep_artifacts(out: Path, request) -> None:
    """Screenshots and the report, also in tests/browser/artifacts/ (git-ignored) for a person to look at."""
    shutil.rmtree(ARTIFACTS, ignore_errors=True)
    ARTIFACTS.mkdir(parents=True)
    for path in [*out.glob("*.png"), *out.glob("report.json")]:
        shutil.copy2(path, ARTIFACTS / path.name)
    line = f"browser test artefacts: {out} and {ARTIFACTS}"
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(line)
    else:
        print(line)


# Reading the report ----------------------------------------------------------------------------------


def notebook(report, file) -> dict:
    entry = report["notebooks"][file]
    assert entry["error"] is None, f"{file}: {entry['error']}"
    return entry


def plots(snapshot: dict, title: str = "") -> list[dict]:
    """The plotly figures of a snapshot whose title matches `title` (a regular expression)."""
    return [p for cell in snapshot["cells"] for p in cell["plots"] if re.match(title, p["title"] or "")]


def widget_plots(snapshot: dict, cell: int = -1) -> list[dict]:
    """The figures of the `cell`-th cell showing a widget."""
    shown = [c for c in snapshot["cells"] if any(p["inWidget"] for p in c["plots"]) or c["widgetViews"]]
    return [p for p in shown[cell]["plots"] if p["inWidget"]]


def rgb(hex_colour: str) -> str:
    r, g, b = (int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgb({r}, {g}, {b})"


def every_snapshot(report):
    for file in NOTEBOOKS:
        for name, snapshot in notebook(report, file)["snapshots"].items():
            yield f"{file} {name}", snapshot


def overlap(a: dict, b: dict) -> float:
    w = min(a["right"], b["right"]) - max(a["left"], b["left"])
    h = min(a["bottom"], b["bottom"]) - max(a["top"], b["top"])
    return w * h if w > 1 and h > 1 else 0.0


# The tests ----------------------------------------------------------------------------------------------


def test_after_the_class_set_up_the_notebooks_build_nothing(report):
    """docs/notebooks.md: after `make class` every notebook runs on what is built; none builds a
    database, converts a model or measures a forward time during class."""
    assert report["built"] == []


def test_no_console_or_page_errors(report):
    for file in NOTEBOOKS:
        messages = report["notebooks"][file]["messages"]
        said = "\n".join(f"[{m['phase']}] {m['kind']}: {m['text'][:600]}" for m in messages)
        assert not messages, f"{file}:\n{said}"
    assert "reload" in notebook(report, "03_step_through.ipynb")["snapshots"]  # the reload did happen


def test_every_figure_and_widget_view_is_drawn(report):
    for file in NOTEBOOKS:
        if file not in WITHOUT_FIGURES:
            assert plots(notebook(report, file)["snapshots"]["run"]), f"{file}: no plotly figure at all"
    for where, snapshot in every_snapshot(report):
        for p in plots(snapshot):
            assert p["box"]["width"] > 0 and p["box"]["height"] > 0, f"{where}: a figure {p['title']!r} of 0 px"
            assert p["svg"] is not None, f"{where}: a figure {p['title']!r} without its drawing"
            # empty on purpose: the predict game before its first step is revealed (nothing of it drawn)
            waiting = re.search(r"before its first step|no step shown yet", p["title"] or "")
            assert waiting or any(trace["points"] for trace in p["data"]), f"{where}: an empty figure {p['title']!r}"
        for cell in snapshot["cells"]:
            drawn = [p for p in cell["plots"] if p["svg"] is not None and p["box"]["height"] > 0]
            assert len(drawn) >= cell["plotlyOutputs"], f"{where}: cell {cell['index']}: a figure not drawn"
            for view in cell["widgetViews"]:
                assert view["width"] > 0 and view["height"] > 0, f"{where}: cell {cell['index']}: widget view of 0 px"
        assert snapshot["widgetErrors"] == 0, f"{where}: 'Error displaying widget'"
        assert not snapshot["news"], f"{where}: the Jupyter news pop-up showed"


def test_cells_ran_without_errors_or_progress_bars(report):
    for where, snapshot in every_snapshot(report):
        for cell in snapshot["cells"]:
            assert re.fullmatch(r"\[\d+\]:", cell["prompt"]), f"{where}: cell {cell['index']} did not run"
            for text in cell["stderr"]:
                assert "Traceback" not in text and "Error" not in text, f"{where}: cell {cell['index']}:\n{text}"
                assert not re.search(r"Loading weights|\d+%\|", text), f"{where}: a progress bar:\n{text}"


def test_titles_labels_and_descriptions_fit(report):
    for where, snapshot in every_snapshot(report):
        for p in plots(snapshot):
            title, svg = p["titleBox"], p["svg"]
            if title and svg:
                inside = svg["left"] - 1 <= title["left"] and title["right"] <= svg["right"] + 1
                assert inside, f"{where}: title {p['title']!r} runs past its figure's edge"
        for p in plots(snapshot, r"step \d+:|draft tree"):
            labels = p["labels"]
            for i, a in enumerate(labels):
                for b in labels[i + 1 :]:
                    covered = overlap(a["box"], b["box"])
                    assert not covered, f"{where}: {p['title']!r}: label {a['text']!r} over {b['text']!r}"
        assert not snapshot["cutLabels"], f"{where}: descriptions cut: {snapshot['cutLabels']}"


def test_legend_swatches_are_the_tier_colours(report):
    seen = set()
    for where, snapshot in every_snapshot(report):
        for p in plots(snapshot):
            for entry in p["legend"]:
                if entry["name"] in TIER_COLOURS:
                    seen.add(entry["name"])
                    assert entry["colour"] == rgb(TIER_COLOURS[entry["name"]]), f"{where}: {p['title']!r}: {entry}"
    assert seen == set(TIER_COLOURS)


def test_the_step_through_follows_clicks_and_sliders(report):
    shots = notebook(report, "03_step_through.ipynb")["snapshots"]

    def by_title(snapshot):  # "answer after step 3: ..." -> "answer after step"
        return {p["title"].split(":")[0].rstrip("0123456789 "): p for p in widget_plots(snapshot, 0)}

    figures = {name: by_title(shots[name]) for name in ("run", "tier", "step", "temperature", "budget")}
    assert set(figures["run"]) == {"answer after step", "step", "tokens per step"}, list(figures["run"])
    changed = {
        "tier": ["answer after step", "tokens per step"],  # model unticked: a new generation
        "step": ["answer after step", "step"],  # the last step: more tokens, another tree
        "temperature": ["answer after step", "tokens per step"],  # sampled: a new generation
        "budget": ["tokens per step"],  # 4 draft tokens per step: fewer drafted (the sample is the same)
    }
    before = "run"
    for action, names in changed.items():
        for name in names:
            assert figures[action][name]["hash"] != figures[before][name]["hash"], f"{action} left {name!r} unchanged"
        before = action
    assert "model" not in [d["name"] for d in figures["tier"]["answer after step"]["data"]]
    first = figures["run"]["answer after step"]  # step 0: a token or a few, on one line
    text_bottom = max((label["box"]["bottom"] for label in first["labels"]), default=first["svg"]["top"])
    assert first["svg"]["bottom"] - text_bottom < 40, "a blank band under the answer at step 0"


def verdict_points(tree: dict) -> dict[str, int]:
    """Points drawn of a tree figure's accepted path, crosses and bonus token."""
    return {d["name"]: d["points"] for d in tree["data"] if d["name"] in ("accepted path", "rejected", "bonus")}


ROUND = re.compile(
    r"step (\d+): the model accepted (?:(\d+) drafts?, most of them the (\w+) tier's|no draft); "
    r"you guessed (\d+)(?: and (\w+))?: (\d) of (\d) points?\s+score: (\d+) of (\d+) points after (\d+) steps?"
)
LOCKED = {"prompt", "step", "play", "temperature", "seed", "order", "4", "16", "64", "auto", "context", "recycled",
          "model", "statistics", "next", "predict"}  # what a game disables while a step is not revealed


def game_cell(snapshot: dict) -> dict:
    """03's second widget, the game."""
    shown = [c for c in snapshot["cells"] if any(p["inWidget"] for p in c["plots"]) or c["widgetViews"]]
    return shown[1]


def enabled(snapshot: dict) -> set[str]:
    return {c["label"] for c in game_cell(snapshot)["controls"] if not c["disabled"]}


def test_the_predict_game_shows_nothing_of_a_step_until_revealed_and_scores_as_the_engine_does(report):
    """03's game, played in the browser as a student would. At its first drawing: no tokens per step
    of the whole answer, the first step's tree without its verdict, and every control that could show
    the step disabled (the slider, play, the settings, next, predict); a key on the slider and clicks
    on play, a budget and next change nothing. Each round's step is the one `pick_steps` draws by the
    notebook's seed, hidden until revealed; after five guesses the game is over, the tokens per step
    are drawn, and the score on the page is the one `hdlib.viz.game` computes from the same generation,
    made again here."""
    import hdlib
    from hdlib import viz

    entry = notebook(report, "03_step_through.ipynb")
    shots = entry["snapshots"]
    first = widget_plots(shots["game"], 1)
    assert not [p for p in first if (p["title"] or "").startswith("tokens per step")]
    assert enabled(shots["game"]) == {"accepted", "tier", "reveal"}, enabled(shots["game"])
    assert {c["label"] for c in game_cell(shots["game"])["controls"]} >= LOCKED | {"accepted", "tier", "reveal"}
    tried = widget_plots(shots["game tried"], 1)
    assert [p["hash"] for p in tried] == [p["hash"] for p in first], "a disabled control changed the game"
    hidden = []
    for name in ("game", *(f"next {i}" for i in range(4))):
        plots = widget_plots(shots[name], 1)
        (tree,) = [p for p in plots if re.match(r"step \d+:", p["title"] or "")]
        k = int(re.match(r"step (\d+):", tree["title"])[1])
        hidden.append(k)
        assert draws_a_tree(tree) and sum(verdict_points(tree).values()) == 0, (name, verdict_points(tree))
        (answer,) = [p for p in plots if (p["title"] or "").startswith("answer")]
        assert answer["title"].startswith(f"answer after step {k - 1}:" if k else "answer before its first step")
        assert not [p for p in plots if (p["title"] or "").startswith("tokens per step")], name
        assert "step" not in enabled(shots[name]) and "reveal" in enabled(shots[name]), name
    for i in range(4):
        assert {"next", "predict"} <= enabled(shots[f"reveal {i}"]) and "step" not in enabled(shots[f"reveal {i}"])
    over = widget_plots(shots["reveal 4"], 1)
    assert [p for p in over if (p["title"] or "").startswith("tokens per step")], "the game is over: all drawn"
    assert "step" in enabled(shots["reveal 4"])
    rounds = [ROUND.search(" ".join(text.split())) for text in entry["rounds"]]
    assert all(rounds), entry["rounds"]
    assert [int(r[10]) for r in rounds] == [1, 2, 3, 4, 5]
    assert [int(r[1]) for r in rounds] == hidden
    shown = int(rounds[-1][8])
    assert shown == sum(int(r[6]) for r in rounds) and int(rounds[-1][9]) == sum(int(r[7]) for r in rounds)
    # The same generation, made here: the game's prompt, the notebook's budget, greedy; its steps drawn
    # by the notebook's seed.
    lm = hdlib.load_model()
    prompts = viz.prompt_choices()
    prompt = next(p for label, p in prompts.items() if label.startswith("12 "))
    gen = hdlib.generate(lm, prompt, max_new_tokens=64, budget=16)
    assert hidden == viz.game.pick_steps(gen, 5, seed=7)
    guesses = [(int(r[1]), int(r[4]), r[5] or "") for r in rounds]
    assert viz.game.score(gen, guesses) == shown
    for r in rounds:
        truth = viz.Outcome.of(gen.steps[int(r[1])])
        assert (truth.accepted, truth.tier) == (int(r[2] or 0), r[3] or "none")


def draws_a_tree(p: dict) -> bool:
    return p["box"]["height"] > 0 and p["markers"] > 0


def test_step_mechanics_draws_its_tree(report):
    shots = notebook(report, "05_tree_attention.ipynb")["snapshots"]
    for name in ("run", "step"):
        (tree,) = [p for p in widget_plots(shots[name]) if (p["title"] or "").startswith("step ")] or [None]
        assert tree and draws_a_tree(tree), f"05 {name}: StepMechanics shows no draft tree"
    moved = [p["hash"] for p in widget_plots(shots["step"])], [p["hash"] for p in widget_plots(shots["run"])]
    assert moved[0] != moved[1], "the step slider changed nothing"


@pytest.mark.parametrize("file", ["03_step_through.ipynb", "05_tree_attention.ipynb"])
def test_a_widget_shown_again_draws_again(report, file):
    again = notebook(report, file)["snapshots"]["again"]
    first, second = widget_plots(again, 0), widget_plots(again, -1)
    assert len(second) == len(first) >= 3
    for p in second:
        assert p["box"]["height"] > 0, f"{file}: the second view draws no {p['title']!r}"
    (tree,) = [p for p in second if re.match(r"step \d+:", p["title"] or "")]
    assert draws_a_tree(tree)
    assert [p["hash"] for p in second] == [p["hash"] for p in first]  # the same figures


def test_token_text_is_drawn_as_written(report):
    labels = notebook(report, "05_tree_attention.ipynb")["snapshots"]["labels"]
    (tree,) = plots(labels, "draft tree")
    texts = {label["text"] for label in tree["labels"]}
    assert {"say", '"', "<b>bold"} <= texts, texts  # a quote as a quote, a tag as text, not markup
    for where, snapshot in every_snapshot(report):
        for p in plots(snapshot):
            entities = [label["text"] for label in p["labels"] if re.search(r"&(\w+|#x?[0-9a-f]+);", label["text"])]
            assert not entities, f"{where}: drawn as written: {entities}"


def test_a_reloaded_page_draws_the_widgets_as_they_were(report):
    """The kernel keeps running; the page asks it for every widget's state and draws it again."""
    shots = notebook(report, "03_step_through.ipynb")["snapshots"]
    assert len(shots["reload"]["cells"]) == len(shots["again"]["cells"]), "after a reload some cells are missing"
    for cell in (0, -1):
        before, after = widget_plots(shots["again"], cell), widget_plots(shots["reload"], cell)
        assert [p["hash"] for p in after] == [p["hash"] for p in before], "after a reload the figures differ"


# The printed handouts: the card game and the exit quiz ------------------------------------------------


@pytest.fixture(scope="module")
def pages(handouts, tmp_path_factory, request) -> dict:
    """The handouts `hdlib handouts` wrote, opened in Chromium: tests/browser/pages.mjs's report."""
    reason = missing_prerequisite()
    if reason:
        pytest.skip(reason)
    _, _, folder = handouts
    out = tmp_path_factory.mktemp("pages")
    config = out / "config.json"
    config.write_text(json.dumps({"out": str(out), "pages": [str(folder / "cards.html"), str(folder / "quiz.html")]}))
    done = subprocess.run(["node", str(DRIVER / "pages.mjs"), str(config)], cwd=DRIVER, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    path = out / "report.json"
    assert path.exists(), f"pages.mjs wrote no report (exit {done.returncode}):\n{(done.stdout + done.stderr)[-3000:]}"
    found = json.loads(path.read_text())
    assert found["error"] is None, found["error"]
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for png in out.glob("*.png"):  # (docs/images/cards.png and quiz.png are copies of a run's)
        shutil.copy2(png, ARTIFACTS / png.name)
    return found["pages"]


def test_the_card_game_prints_on_one_page_with_its_decks_rounds_and_key(pages):
    page = pages["cards.html"]
    assert page["messages"] == []
    assert page["pdf_pages"] == 1, "the card game is a one-page handout"
    text = page["text"]
    for deck in ("C: context", "M: model", "S: statistics"):
        assert deck in text
    assert len(re.findall(r"round \d+, the answer so far", text)) == 4
    assert re.search(r"tokens written in 4 rounds\s+\d+\s+\d+", text), "the teacher's key and its totals"


def test_the_exit_quiz_prints_on_one_page_with_five_questions_and_the_engines_answers(pages):
    page = pages["quiz.html"]
    assert page["messages"] == []
    assert page["pdf_pages"] == 1
    assert page["text"].count("\u2610") >= 15  # five questions of three options
    assert "as the engine ran them" in page["text"]


def test_the_handouts_screenshots_beside_the_docs_are_committed():
    doc = (ROOT / "docs" / "notebooks.md").read_text(encoding="utf-8")
    for name in ("cards.png", "quiz.png"):
        assert f"images/{name}" in doc and (ROOT / "docs" / "images" / name).stat().st_size > 10_000
