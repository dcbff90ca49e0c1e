"""The acceptance prior (`hdlib.engine.prior`): read-only or learning, a snapshot, a file of the user's."""

from __future__ import annotations

import pytest

from hdlib.engine.prior import AcceptancePrior
from hdlib.errors import HDError

KIND = "context//-1/-1"


def test_a_read_only_prior_ignores_merges_and_a_learning_one_folds_them_in_and_writes_its_file(tmp_path):
    path = tmp_path / "prior.json"
    AcceptancePrior(path).merge({KIND: (0.8, 10.0)})
    before = path.read_text()
    for read_only in (AcceptancePrior.from_file(path), AcceptancePrior.fresh(), AcceptancePrior(path, learns=False)):
        rates, digest = read_only.rates(), read_only.digest()
        read_only.merge({KIND: (0.0, 100.0), "recycled//-1/-1": (0.5, 3.0)})
        assert not read_only.learns and read_only.rates() == rates and read_only.digest() == digest
        assert path.read_text() == before and sorted(p.name for p in tmp_path.iterdir()) == ["prior.json"]
    learned = AcceptancePrior(path)
    learned.merge({KIND: (0.0, 10.0)})
    assert learned.learns and learned.rates() == {KIND: pytest.approx((0.4, 20.0))}
    assert path.read_text() != before and AcceptancePrior.from_file(path).digest() == learned.digest()
    in_memory = AcceptancePrior()  # learns, and has no file to write
    in_memory.merge({KIND: (0.5, 2.0)})
    assert in_memory.rates() == {KIND: (0.5, 2.0)} and in_memory.path is None


def test_a_snapshot_keeps_the_rates_of_its_moment_and_their_digest(tmp_path):
    original = AcceptancePrior(tmp_path / "prior.json")
    original.merge({KIND: (0.8, 10.0)})
    snap = original.snapshot()
    at_snapshot = original.digest()
    original.merge({KIND: (0.0, 50.0), "model//-1/-1": (0.3, 4.0)})
    assert snap.digest() == at_snapshot != original.digest()
    assert snap.rates() == {KIND: (0.8, 10.0)} and not snap.learns and snap.source == "learned"
    snap.merge({KIND: (0.0, 50.0)})  # read-only: no file of the original's is written either
    assert snap.rates() == {KIND: (0.8, 10.0)} and original.rates()[KIND][1] == 60.0


def test_a_prior_saved_to_a_file_reads_back_with_its_digest_and_the_file_as_its_source(tmp_path):
    prior = AcceptancePrior()
    prior.merge({KIND: (0.25, 8.0), "model/x/3/-1": (1.0, 1.0)})
    path = prior.save(tmp_path / "sub" / "mine.json")
    read = AcceptancePrior.from_file(path)
    assert read.rates() == prior.rates() and read.digest() == prior.digest() and read.source == str(path)
    assert len(prior.digest()) == 16 and int(prior.digest(), 16) >= 0
    assert AcceptancePrior.fresh().digest() == AcceptancePrior().digest() != prior.digest()  # empty rates
    assert AcceptancePrior.fresh().source == "fresh" and AcceptancePrior.fresh().rates() == {}


def test_a_users_prior_file_missing_or_invalid_is_an_error_naming_it_and_is_kept(tmp_path):
    missing = tmp_path / "nowhere.json"
    with pytest.raises(HDError, match=f"acceptance prior {missing}: no such file"):
        AcceptancePrior.from_file(missing)
    for bad in ("{not json", '{"x": [1.5, 1]}', '{"x": [0.5, -1]}', "[1, 2]"):
        path = tmp_path / "bad.json"
        path.write_text(bad)
        with pytest.raises(HDError, match=f"{path} is not an acceptance prior"):
            AcceptancePrior.from_file(path)
        assert path.read_text() == bad  # a user's file is never removed, unlike the cache's own
