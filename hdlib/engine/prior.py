"""The acceptance prior: the rates per node kind a value-ranked tree's estimates start from.

Which prior a generation starts from is the caller's choice (`hdlib.decoding.resolve_prior`): the
one shipped with the packaged model (read-only), the one this machine's cache keeps per model and
device (it learns from every generation: `generate` folds each one's rates in), none, or a file.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from pathlib import Path

from hdlib.errors import HDError
from hdlib.paths import cache_dir
from hdlib.store import write_text_atomic


def parse_rates(text: str) -> dict[str, list[float]]:
    """The rates of a prior file's text (kind -> [rate, weight]); ValueError saying why it is none.

    A rate above 1 would let a child's path probability pass its parent's: the tree of the best nodes
    would no longer be a tree. So would NaN, which every comparison refuses.
    """
    try:
        raw = json.loads(text)
        data = {str(k): [float(v[0]), float(v[1])] for k, v in raw.items()}
    except (ValueError, TypeError, KeyError, IndexError, AttributeError) as error:
        raise ValueError("not a JSON object of kind -> [rate, weight]") from error
    bad = next((k for k, (r, w) in data.items() if not (0.0 <= r <= 1.0 and 0.0 <= w < math.inf)), None)
    if bad is not None:
        rate, weight = data[bad]
        raise ValueError(f"kind {bad!r} has rate {rate} and weight {weight}: need 0 <= rate <= 1, finite weight >= 0")
    return data


class AcceptancePrior:
    """Acceptance rates per node kind: where a generation's estimates start.

    One that `learns` folds each generation's rates in (`merge`) and writes them to its file: the
    prior this machine's cache keeps per model and device (`for_model`), or, without a file, one held
    in memory (`AcceptancePrior()`, as scripts/build_prior.py builds the packaged prior). A read-only
    one (`fresh`, `from_file`, `snapshot`) never changes, so every generation given it starts alike,
    whatever ran before: what a notebook or a benchmark needs. `source` says where the rates came
    from ("learned", "fresh", "packaged" or a file's path) and `digest` which rates they are.
    """

    def __init__(
        self, path: Path | None = None, memory: float = 200.0, learns: bool = True, source: str = "learned"
    ) -> None:
        self.path = path  # where a learning prior writes its rates (None: nowhere); read at once if present
        self.memory = memory  # observations the prior remembers: older ones fade as new ones come
        self.learns = learns
        self.source = source
        self._data: dict[str, list[float]] = {}  # kind -> [rate, weight]
        if path is None or not path.exists():
            return
        try:
            self._data = parse_rates(path.read_text())
        except (OSError, ValueError):
            # The cache's own file: start afresh, and say so once (a user's file is refused instead,
            # `from_file`).
            print(
                f"hdlib: {path} is not a valid acceptance prior (damaged?): removed, starting afresh", file=sys.stderr
            )
            path.unlink(missing_ok=True)

    @classmethod
    def for_model(cls, key: str, folder: Path | None = None) -> AcceptancePrior:
        """The prior kept for the model and device `key` names (a forward profile's key), in `folder`
        (default: hdlib's cache); it learns from every generation that uses it."""
        name = hashlib.sha256(key.encode()).hexdigest()[:16]
        return cls((folder or cache_dir() / "acceptance") / f"{name}.json")

    @classmethod
    def fresh(cls) -> AcceptancePrior:
        """No rates at all, read-only: every estimate starts from the node's own opinion or confidence."""
        return cls(None, learns=False, source="fresh")

    @classmethod
    def from_file(cls, path: str | Path, source: str | None = None) -> AcceptancePrior:
        """The rates in the file at `path` (written by `save`), read-only; `source` defaults to the
        path. A missing or invalid file is an HDError: unlike the cache's own, a user's file is never
        removed."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise HDError(f"acceptance prior {path}: no such file") from None
        except (OSError, UnicodeDecodeError) as error:
            raise HDError(f"cannot read acceptance prior {path}: {error}") from None
        try:
            data = parse_rates(text)
        except ValueError as error:
            raise HDError(f"{path} is not an acceptance prior ({error}); AcceptancePrior.save writes one") from None
        return cls._read_only(data, str(path) if source is None else source)

    @classmethod
    def _read_only(cls, data: dict[str, list[float]], source: str) -> AcceptancePrior:
        prior = cls(None, learns=False, source=source)
        prior._data = {k: list(v) for k, v in data.items()}
        return prior

    def snapshot(self) -> AcceptancePrior:
        """A read-only copy of the rates as they are now, with the same source: what a benchmark hands
        every method, so that none starts from what another learned."""
        return self._read_only(self._data, self.source)

    def rates(self) -> dict[str, tuple[float, float]]:
        """(rate, observations) per kind."""
        return {k: (v[0], v[1]) for k, v in self._data.items()}

    def digest(self) -> str:
        """16 hex digits of the SHA-256 of the rates' canonical JSON: equal digests, equal priors.
        (`save` writes that very JSON, so it is the digest of the file's bytes too.)"""
        return hashlib.sha256(_canonical(self._data).encode()).hexdigest()[:16]

    def save(self, path: str | Path) -> Path:
        """Write the rates to `path` as JSON, atomically (`from_file` reads them back)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        return write_text_atomic(path, _canonical(self._data))

    def merge(self, observed: dict[str, tuple[float, float]]) -> None:
        """Fold a generation's (rate, observations) per kind in, and write the file if there is one;
        a read-only prior ignores them."""
        if not self.learns:
            return
        for kind, (rate, weight) in observed.items():
            old_rate, old_weight = self._data.get(kind, [rate, 0.0])
            total = old_weight + weight
            self._data[kind] = [(old_rate * old_weight + rate * weight) / total, min(total, self.memory)]
        if self.path is not None:
            self.save(self.path)


def _canonical(data: dict[str, list[float]]) -> str:
    return json.dumps(data, sort_keys=True)
