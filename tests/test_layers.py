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

LAYERS: list[tuple[str, ...]] = [
    ("errors", "paths"),  # no hdlib imports at all
    ("store", "suffix", "ngram", "window", "sharegpt", "specbench"),  # files, indexes, Lookahead window, data
    ("corpus", "cpu", "packaged"),  # a corpus tokenized; the CPU's prepacked layers; the packaged models' files
    ("tiers.guesses",),  # what the model said after each node, and the table that keeps it
    ("tiers.base",),  # the tier interface and the tiers' names
    ("tiers.recycling",),
    ("tiers.context", "tiers.model", "tiers.statistics"),
    ("tiers.peers",),  # the field's drafters as tiers: Token Recycling, REST
    ("tiers",),
    ("tree", "presentation", "cache"),  # the draft tree's tensors; the KV cache
    ("trace", "sampling", "choices"),  # the records; the acceptance rule; the model's choices from the logits
    ("budget",),  # the budget policies: no torch, no model
    ("verifier",),
    ("forward_time", "drafter", "models", "divergence"),  # divergence: where two answers part, and why
    ("gate",),  # the hierarchy: whether asking the next tier pays
    ("value",),  # the value-ranked budget: weighs each node's estimated acceptance against the forward time
    ("answerers",),  # who writes the model database's answers: transformers, vLLM, a server
    ("modeldb", "statsdb"),  # the offline databases' builders
    ("databases",),  # the tier registry, the databases opened
    ("paper",),  # the paper's HD as its authors ran it, as a drafter
    ("decoding",),
    ("baselines",),
    ("bench.serving",),  # vLLM's engines as bench methods, and the second pass in vLLM's environment
    ("bench.methods", "bench.records"),  # the method names; turns, questions, metrics, results
    ("bench.run", "bench.reports", "bench.ranking"),  # answering; the printed report; against the paper
    ("bench",),
    ("benchlog",),
    ("viz.generation",),
    ("viz.tree", "viz.mechanics", "viz.lookup", "viz.bench", "viz.cost", "viz.sampling"),
    ("viz.paper",),
    ("viz.widgets",),
    ("viz",),
    ("cli.parser",),  # the command line's arguments
    ("cli.commands",),
    ("cli",),
    ("__init__", "__main__"),  # the package's face, and `python -m hdlib`
]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    return ".".join(parts[:-1]) if parts[-1] == "__init__" and len(parts) > 1 else ".".join(parts)


def hdlib_imports(source: str, modules: set[str]) -> set[str]:
    """The hdlib modules a file imports (`from hdlib import x` names module x when there is one)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "hdlib":
            inner = node.module.removeprefix("hdlib").removeprefix(".")
            if not inner:
                found |= {a.name for a in node.names if a.name in modules} or {"__init__"}
            else:
                found.add(inner)
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


def layer_of(name: str) -> int:
    return next(i for i, layer in enumerate(LAYERS) if name in layer)


@pytest.mark.parametrize(
    "graph, said",
    [
        ({"tree": {"decoding"}, "decoding": {"tree"}}, "tree (layer {tree}) imports decoding (layer {decoding})"),
        ({"budget": {"value"}, "value": set()}, "budget (layer {budget}) imports value (layer {value})"),
        ({"trace": {"sampling"}, "sampling": set()}, "trace (layer {trace}) imports sampling (layer {sampling})"),
        ({"newcomer": set()}, "newcomer is in no layer"),
    ],
)
def test_the_check_catches_an_upward_import_a_sideways_one_and_an_unplaced_module(graph, said):
    assert said.format(**{name: layer_of(name) for name in graph if name != "newcomer"}) in violations(graph, LAYERS)


def test_imports_are_read_at_every_depth():
    source = "from hdlib import tree\nimport hdlib.verifier\ndef f():\n    from hdlib.decoding import run\n"
    assert hdlib_imports(source, {"tree", "verifier", "decoding"}) == {"tree", "verifier", "decoding"}
    assert hdlib_imports("from hdlib import Tier\n", {"tree"}) == {"__init__"}
