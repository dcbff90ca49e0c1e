"""The tiers by name, and the offline databases behind two of them.

`registry` makes a ready tier from a name or letter (and opens, or builds once, the database it
needs); `modeldb` builds the model tier's phrase database from the answers of an `answerers`
engine; `statsdb` builds the statistics tier's suffix array over a `corpus` (`sharegpt`'s
conversations).
"""

from hdlib.databases.registry import (
    describe,
    find_tier,
    known_tiers,
    load_tier,
    make_tier,
    open_database,
    parse_tiers,
    register_tier,
    unregister_tier,
)

__all__ = [
    "describe",
    "find_tier",
    "known_tiers",
    "load_tier",
    "make_tier",
    "open_database",
    "parse_tiers",
    "register_tier",
    "unregister_tier",
]
