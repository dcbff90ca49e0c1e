"""Layers point down: a module of hdlib imports only modules of the layers below its own.

The order is written here, once. Every import of an hdlib module counts, at any depth of the file
(a function-level import is an import too); the command line imports inside its commands, to start
fast, and is at the top anyway.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "hdlib"

# The packages from the bottom up: the folder tree is the architecture. A package's modules stand
# together in LAYERS, in this order, so that a package imports only the packages below it.
PACKAGES = ("", "tiers", "serving", "models", "", "engine", "databases", "", "bench", "viz", "cli", "")

LAYERS: list[tuple[str, ...]] = [
    ("errors", "paths"),  # no hdlib imports at all
    ("store",),  # database files: arrays and metadata, written atomically
    ("tiers.rider",),  # the one hook for rows a tier rides in the pass
    ("tiers.window", "tiers.suffix_array", "tiers.ngram"),  # the Lookahead window; the indexes the tiers search
    ("tiers.guesses",),  # what the model said after each node, and the table that keeps it
    ("tiers.base",),  # the tier interface and the tiers' names
    ("tiers.recycled",),
    ("tiers.context", "tiers.model", "tiers.statistics"),
    ("tiers.other_methods",),  # the field's drafters as tiers: Token Recycling, REST
    ("tiers",),
    ("serving.index", "serving.gate", "serving.length"),  # a request's context index; whether a lookup, a draft pays
    ("serving.chain",),  # one chain per row of a served batch, a state per request
    ("serving.proposer",),  # HD as vLLM's speculative proposer: light, as every vLLM worker imports it
    ("serving",),
    ("models.cpu", "models.packaged"),  # the CPU's prepacked layers; the packaged models' files
    ("models.loading",),  # a model by name, folder or Hub id; its prompt formats
    ("models",),
    ("presentation",),  # how records are shown: the CLI, the notebooks, the widgets
    ("engine.tree", "engine.cache"),  # the draft tree's tensors; the KV cache
    ("engine.trace", "engine.sampling", "engine.choices"),  # the records; acceptance; the model's choices
    ("engine.budget", "engine.prior"),  # the budget policies: no torch, no model; the acceptance prior on disk
    ("engine.verifier",),
    ("engine.forward_time", "engine.drafter"),
    ("engine.gate",),  # the hierarchy: whether asking the next tier pays
    ("engine.value",),  # the value-ranked budget: each node's estimated acceptance against the forward time
    ("engine.loop",),  # propose, select, score, accept, keep, learn, yield
    ("engine",),
    ("databases.sharegpt",),
    ("databases.corpus", "databases.answerers"),  # a corpus tokenized; who writes the model database's answers
    ("databases.modeldb", "databases.statsdb"),  # the offline databases' builders
    ("databases.registry",),  # the tiers by name, the databases opened
    ("databases",),
    ("decoding",),  # generate(): a prompt, tiers by name, a budget policy, the loop
    ("bench.specbench", "bench.divergence", "bench.arms"),  # Spec-Bench's questions; where two answers part; A/A arms
    ("bench.intervals",),  # numbers with their spread: bootstrap intervals over questions, paired ratios
    ("bench.baselines", "bench.paper_drafter"),  # transformers' methods; the paper's HD as its authors ran it
    ("bench.serving",),  # vLLM's engines as bench methods, and the second pass in vLLM's environment
    ("bench.provenance",),  # what made a result: the checkout, the packages, the cached measurements, the host
    ("bench.methods", "bench.records"),  # the method names; turns, questions, metrics, results
    ("bench.metrics",),  # a method's metrics from a run's records alone
    ("bench.run", "bench.reports", "bench.ranking"),  # answering; the printed report; against the paper
    ("bench",),
    ("bench.log",),  # the raw results file, for --resume
    ("viz.table", "viz.figure_output"),  # a table with a title; a plotly figure among widgets
    ("viz.generation", "viz.game"),
    ("viz.tree", "viz.mechanics", "viz.lookup", "viz.bench", "viz.cost", "viz.sampling"),
    ("viz.paper_tasks", "viz.contrasts", "viz.cards"),  # the paper beside the kit: per task, its method; the card game
    ("viz.paper_temperature", "viz.step_settings"),  # the paper against temperature; the step-through's logic
    ("viz.step_through", "viz.step_mechanics", "viz.quiz"),  # the GUIs; the exit quiz, answered by the engine
    ("viz",),
    ("cli.parser",),  # the command line's arguments
    ("cli.commands",),
    ("cli",),
    ("__init__", "__main__"),  # the package's face, and `python -m hdlib`
]


def package_of(module: str) -> str:
    """The package a module belongs to ("" for a module at the top of hdlib)."""
    head = module.split(".")[0]
    return head if head in PACKAGES and head else ""


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    return ".".join(parts[:-1]) if parts[-1] == "__init__" and len(parts) > 1 else ".".join(parts)


def hdlib_imports(source: str, modules: set[str]) -> set[str]:
    """The hdlib modules a file imports (`from hdlib import x` names module x when there is one, as
    `from hdlib.p import x` names p.x)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "hdlib":
            inner = node.module.removeprefix("hdlib").removeprefix(".")
            if not inner:
                found |= {a.name for a in node.names if a.name in modules} or {"__init__"}
            else:  # `from hdlib.databases import sharegpt` names module databases.sharegpt
                submodules = {f"{inner}.{a.name}" for a in node.names} & modules
                found |= submodules if len(submodules) == len(node.names) else {inner}
        elif isinstance(node, ast.Import):
            found |= {a.name.removeprefix("hdlib.") for a in node.names if a.name.split(".")[0] == "hdlib"}
    return {"__init__" if name == "hdlib" else name for name in found}


def import_graph() -> dict[str, set[str]]:
    files = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: hdlib_imports(path.read_text(), set(files)) - {name} for name, path in files.items()}


def violations(graph: Mapping[str, set[str]], layers: Sequence[tuple[str, ...]]) -> list[str]:
    """Each import of a module not in a lower layer, and each module no layer names."""
    level = {name: i for i, layer in enumerate(layers) for name in layer}
    found = [f"{name} is in no layer" for name in sorted(graph) if name not in level]
    for name, imports in sorted(graph.items()):
        for imported in sorted(imports):
            if name in level and level.get(imported, len(layers)) >= level[name]:
                found.append(f"{name} (layer {level[name]}) imports {imported} (layer {level.get(imported, '?')})")
    return found


def test_every_module_imports_only_modules_below_it():
    graph = import_graph()
    assert violations(graph, LAYERS) == []
    assert {name for layer in LAYERS for name in layer} == set(graph)  # no layer names a module that is gone


def test_each_package_stands_whole_in_the_order_of_the_packages():
    """The layers walk the packages in PACKAGES' order, each package's modules together: with the
    test above, a package imports only the packages below it."""
    walked = [package_of(name) for layer in LAYERS for name in layer]
    runs = [p for i, p in enumerate(walked) if i == 0 or p != walked[i - 1]]
    assert runs == list(PACKAGES)
    assert {p for p in PACKAGES if p} == {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}


def layer_of(name: str) -> int:
    return next(i for i, layer in enumerate(LAYERS) if name in layer)


@pytest.mark.parametrize(
    "graph, said",
    [
        (
            {"engine.tree": {"decoding"}, "decoding": {"engine.tree"}},
            "engine.tree (layer {engine.tree}) imports decoding (layer {decoding})",
        ),
        (
            {"engine.budget": {"engine.value"}, "engine.value": set()},
            "engine.budget (layer {engine.budget}) imports engine.value (layer {engine.value})",
        ),
        (
            {"engine.trace": {"engine.sampling"}, "engine.sampling": set()},
            "engine.trace (layer {engine.trace}) imports engine.sampling (layer {engine.sampling})",
        ),
        ({"newcomer": set()}, "newcomer is in no layer"),
    ],
)
def test_the_check_catches_an_upward_import_a_sideways_one_and_an_unplaced_module(graph, said):
    levels = {name: layer_of(name) for name in graph if name != "newcomer"}
    assert said.replace("{", "{0[").replace("}", "]}").format(levels) in violations(graph, LAYERS)


def test_imports_are_read_at_every_depth():
    source = "from hdlib import decoding\nimport hdlib.engine.verifier\n"
    source += "def f():\n    from hdlib.engine.loop import run\n"
    modules = {"decoding", "engine.verifier", "engine.loop"}
    assert hdlib_imports(source, modules) == modules
    assert hdlib_imports("from hdlib import Tier\n", {"tree"}) == {"__init__"}
    assert hdlib_imports("from hdlib.databases import sharegpt\n", {"databases.sharegpt"}) == {"databases.sharegpt"}
    assert hdlib_imports("from hdlib.databases import make_tier\n", {"databases.sharegpt"}) == {"databases"}
