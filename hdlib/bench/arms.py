"""A method run more than once in one run, as arms of an A/A comparison: `hd,hd` are the arms `hd` and
`hd#2`, each answering every question with tables, engines and servers of its own, so that the
harness's own spread (what it reports between two identical methods) is measured in the same run as
everything else; it is the yardstick the verdict words are held to (`hdlib.bench.intervals.margin`).

The arm's number follows `#` at the end of the name; the name before it is the method, parsed as
any other."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from hdlib.errors import HDError

ARM = "#"


def split_arm(name: str) -> tuple[str, int]:
    """`hd:CM@16#2` -> ("hd:CM@16", 2); a name without an arm -> (name, 1)."""
    base, mark, arm = name.rpartition(ARM)
    if not mark:
        return name, 1
    if not (arm.isascii() and arm.isdigit()) or arm[0] == "0" or int(arm) < 2 or not base:
        raise HDError(f"method {name!r}: an arm is written by naming the method again (hd,hd: arms hd and hd#2)")
    return base, int(arm)


def method_of(name: str) -> str:
    """The method an arm runs: `vllm-hd#2` -> `vllm-hd`."""
    return split_arm(name)[0]


def with_arms(names: Iterable[str]) -> list[str]:
    """Names in order, a method named again becoming its next arm: [hd, suffix, hd] -> [hd, suffix, hd#2]."""
    seen: Counter[str] = Counter()
    out = []
    for name in names:
        base = method_of(name)
        seen[base] += 1
        out.append(base if seen[base] == 1 else f"{base}{ARM}{seen[base]}")
    return out


def twins(names: Iterable[str]) -> list[tuple[str, str]]:
    """The A/A pairs among `names`: each arm against its method's first, (hd#2, hd)."""
    names = list(names)
    return [(n, method_of(n)) for n in names if split_arm(n)[1] > 1 and method_of(n) in names]
