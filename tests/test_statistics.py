"""The suffix index and the statistics tier against brute force on small corpora, its database file,
and losslessness with the tier in the engine."""

from __future__ import annotations

import functools
import json
import statistics
import time
from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tiny import VOCAB, tiny_llama, tiny_tokenizer

from hdlib.databases.statsdb import build_statistics_db, default_statistics_path, ensure_statistics_db
from hdlib.engine.budget import FixedBudget
from hdlib.engine.drafter import Drafter
from hdlib.engine.loop import DecodeSettings, run
from hdlib.errors import HDError
from hdlib.models.loading import tokenizer_fingerprint
from hdlib.store import read_db, read_meta
from hdlib.tiers.statistics import StatisticsSettings, StatisticsTier
from hdlib.tiers.suffix import SEPARATOR, SuffixIndex, build_suffix_array, count_prefixes, join_documents

documents = st.lists(st.lists(st.integers(0, 3), max_size=12), min_size=1, max_size=5)


def occurrences(docs: list[list[int]], key: tuple[int, ...]) -> list[tuple[int, int]]:
    """(document, position after the key) of every occurrence of `key`, by scanning."""
    m = len(key)
    return [(d, p + m) for d, doc in enumerate(docs) for p in range(len(doc) - m + 1) if tuple(doc[p : p + m]) == key]


def sort_key(tokens: np.ndarray, i: int, depth: int | None) -> list[int]:
    tail = [t if t >= 0 else 1 << 40 for t in tokens[i:].tolist()]  # a separator sorts after tokens
    return tail if depth is None else tail[:depth]


def split_documents(tokens: np.ndarray) -> list[list[int]]:
    docs, doc = [], []
    for t in tokens.tolist():
        if t == SEPARATOR:
            docs.append(doc)
            doc = []
        else:
            doc.append(t)
    return docs


# Suffix array ----------------------------------------------------------------------------------


@given(docs=documents, depth=st.sampled_from([None, 1, 2, 3, 5]))
def test_suffix_array_sorts_like_sorted(docs, depth):
    tokens = join_documents(docs)
    sa = build_suffix_array(tokens, depth)
    starts = [i for i in range(len(tokens)) if tokens[i] >= 0]
    want = sorted(starts, key=lambda i: sort_key(tokens, i, depth))
    assert sorted(sa.tolist()) == starts  # every token starts exactly one suffix; separators none
    assert [sort_key(tokens, i, depth) for i in sa] == [sort_key(tokens, i, depth) for i in want]
    if depth is None:
        assert sa.tolist() == want


@given(docs=documents, key=st.lists(st.integers(0, 4), min_size=1, max_size=4))
def test_range_search_finds_every_occurrence(docs, key):
    tokens = join_documents(docs)
    index = SuffixIndex(tokens, build_suffix_array(tokens, 8), 8)
    lo, hi = index.find(key)
    found = sorted(index.suffixes[lo:hi].tolist())
    scan = [i for i in range(len(tokens) - len(key) + 1) if tokens[i : i + len(key)].tolist() == key]
    assert found == scan


def test_keys_longer_than_the_sort_depth_are_refused():
    tokens = join_documents([[1, 2, 3, 4]])
    index = SuffixIndex(tokens, build_suffix_array(tokens, 2), 2)
    with pytest.raises(HDError, match="sorted by at least 3"):
        index.find([1, 2, 3])


@given(rows=st.lists(st.lists(st.sampled_from([0, 1, 2, SEPARATOR]), min_size=3, max_size=3), min_size=1, max_size=12))
def test_count_prefixes_counts_every_prefix_without_a_separator(rows):
    rows = sorted(rows, key=lambda r: [t if t >= 0 else 9 for t in r])
    got = count_prefixes(np.array(rows, np.int32))
    nodes = Counter(tuple(got.rows[f, :d].tolist()) for f, d in zip(got.first, got.depth))
    assert all(c == 1 for c in nodes.values())  # each node once
    want = Counter(tuple(r[:d]) for r in rows for d in range(1, 4) if SEPARATOR not in r[:d])
    assert {tuple(got.rows[f, :d].tolist()): int(c) for f, d, c in zip(got.first, got.depth, got.count)} == want


# Lookup against brute force ---------------------------------------------------------------------


def brute_force(docs, context, budget, s: StatisticsSettings):
    """The tier's contract by scanning: from the longest suffix with at least min_count occurrences
    down, each key's continuation prefixes by count (ties: shorter, then smaller tokens) join the
    trie until it holds `budget` nodes; without fill only the first key that adds one. Drafts: the
    trie's leaves in the order they joined."""
    chosen, matches = {}, []
    for m in range(min(s.max_key, len(context)), s.min_key - 1, -1):
        if len(chosen) >= budget:
            break
        key = tuple(context[len(context) - m :])
        found = occurrences(docs, key)
        if len(found) < s.min_count:
            continue
        counts = Counter()
        for d, p in found:
            cont = docs[d][p : p + s.draft_len]  # a document's end cuts it: no separator crossed
            for k in range(1, len(cont) + 1):
                counts[tuple(cont[:k])] += 1
        ranked = sorted((n for n, c in counts.items() if c >= s.min_count), key=lambda n: (-counts[n], len(n), n))
        before = len(chosen)
        for n in ranked:
            if len(chosen) >= budget:
                break
            chosen.setdefault(n, (counts[n], m))
        if len(chosen) > before:
            matches.append((key, len(found)))
            if not s.fill:
                break
    inner = {n[:-1] for n in chosen}
    return matches, [(n, c, m) for n, (c, m) in chosen.items() if n not in inner]


@settings(max_examples=150, deadline=None)
@given(
    docs=documents,
    context=st.lists(st.integers(0, 3), min_size=1, max_size=10),
    budget=st.integers(0, 12),
    max_key=st.integers(1, 5),
    draft_len=st.integers(1, 5),
    min_count=st.integers(1, 3),
    fill=st.booleans(),
)
def test_lookup_matches_brute_force_counting(docs, context, budget, max_key, draft_len, min_count, fill):
    s = StatisticsSettings(max_key=max_key, draft_len=draft_len, min_count=min_count, sample=10_000, fill=fill)
    tier = StatisticsTier.from_documents(docs, s)
    got = tier.search(context, budget)
    matches, drafts = brute_force(docs, context, budget, s)
    assert [(m.key, m.occurrences) for m in got.matches] == matches
    assert got.drafts == drafts and all(m.exact for m in got.matches)
    # Each token's share: of the occurrences of what precedes it, how many go on with it.
    per_key = {len(m.key): m.occurrences for m in got.matches}
    for d, shares in zip(got.drafts, got.shares, strict=True):
        assert len(shares) == len(d.tokens) and all(0 < c <= 1 for c in shares)
        if d.key_length == len(got.key):  # every prefix counted under the same key: the shares multiply out
            assert np.prod(shares) * per_key[d.key_length] == pytest.approx(d.count)
    assert tier.lookup(context, budget) == [d for d, _, _ in drafts]
    # The budget counts trie nodes: every distinct prefix of the drafts.
    assert len({d[:k] for d, _, _ in got.drafts for k in range(1, len(d) + 1)}) <= budget
    # No draft crosses a separator: key + draft occurs inside one document, as often as counted.
    for draft, count, m in got.drafts:
        assert len(occurrences(docs, tuple(context[len(context) - m :]) + draft)) == count >= min_count


def test_the_longest_suffix_comes_first_and_shorter_ones_fill_the_budget():
    docs = [[1, 2, 3, 7]] + [[2, 3, 5]] * 5
    only = StatisticsTier.from_documents(docs, StatisticsSettings(fill=False))
    got = only.search([9, 1, 2, 3], budget=4)
    assert got.key == (1, 2, 3) and got.drafts == [((7,), 1, 3)]
    filled = StatisticsTier.from_documents(docs).search([9, 1, 2, 3], budget=4)
    assert filled.drafts == [((7,), 1, 3), ((5,), 5, 2)] and [m.key for m in filled.matches] == [(1, 2, 3), (2, 3)]
    assert filled.key_length == 3 and "after 2" in filled.format()
    # With min_count 2 the single occurrence of (1, 2, 3) is no statistic: (2, 3) comes first.
    strict = StatisticsTier.from_documents(docs, StatisticsSettings(min_count=2))
    assert strict.search([9, 1, 2, 3], budget=4).drafts == [((5,), 5, 2)]


def test_drafts_form_a_trie_of_the_most_frequent_continuations():
    docs = [[0, 1, 2, 3]] * 6 + [[0, 1, 2, 4]] * 3 + [[0, 5, 6]] * 2
    tier = StatisticsTier.from_documents(docs)
    got = tier.search([0], budget=5)
    # Nodes by count: (1) 9, (1,2) 9, (1,2,3) 6, (1,2,4) 3, (5) 2: the leaves, most frequent first.
    assert got.drafts == [((1, 2, 3), 6, 1), ((1, 2, 4), 3, 1), ((5,), 2, 1)]
    assert tier.lookup([0], budget=3) == [(1, 2, 3)]
    assert tier.lookup([0], budget=0) == [] and tier.lookup([8], budget=5) == []
    assert tier.search([8], 5).format() == "no suffix of the context is continued in the corpus"


def test_sampled_counts_are_scaled_estimates():
    docs = [[0, 1]] * 300 + [[0, 2]] * 100
    tier = StatisticsTier.from_documents(docs, StatisticsSettings(sample=40))
    got = tier.search([0], budget=2)
    assert not got.matches[0].exact and got.matches[0].read == 40 and got.matches[0].occurrences == 400
    assert got.drafts == [((1,), 300, 1), ((2,), 100, 1)]
    assert "estimated from 40" in got.format()


def test_settings_are_validated():
    with pytest.raises(HDError):
        StatisticsSettings(min_key=3, max_key=2)
    with pytest.raises(HDError):
        StatisticsSettings(draft_len=0)
    tokens = join_documents([[1, 2, 3]])
    with pytest.raises(HDError, match="sorted by 4"):
        StatisticsTier(
            SuffixIndex(tokens, build_suffix_array(tokens, 4), 4), StatisticsSettings(max_key=2, draft_len=3)
        )


# The database file ------------------------------------------------------------------------------


@functools.cache
def tiny_lm() -> SimpleNamespace:
    tokenizer = tiny_tokenizer()
    return SimpleNamespace(tokenizer=tokenizer, name="tiny", fingerprint=tokenizer_fingerprint(tokenizer))


@pytest.fixture
def corpus_file(tmp_path):
    rows = [
        {"conversations": [{"from": "human", "value": "hello world"}, {"from": "gpt", "value": "how are you"}]},
        {"text": "hello how are you world"},
        {"conversations": [{"from": "human", "value": "how are you"}, {"from": "gpt", "value": "hello world"}]},
    ]
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_database_written_then_read_back_drafts_the_same(tmp_path, corpus_file):
    lm = tiny_lm()
    path = build_statistics_db(lm, tmp_path / "s.npz", source=corpus_file, progress=False)
    meta = read_meta(path)
    assert meta["tier"] == "statistics" and meta["tokenizer"] == lm.fingerprint and meta["model"] == "tiny"
    assert meta["n"] == 16 and meta["source"]["kind"] == "jsonl" and meta["source"]["chat_template"]
    assert meta["counts"]["conversations"] == 2 and meta["counts"]["documents"] == 3
    assert meta["build"]["seconds"] >= 0 and meta["build"]["peak_rss_mb"] > 0 and meta["format"] == "hdlib-db"
    tok = lm.tokenizer
    templated = tok.apply_chat_template(
        [{"role": "user", "content": "hello world"}, {"role": "assistant", "content": "how are you"}], tokenize=False
    )
    docs = [tok(t, add_special_tokens=False)["input_ids"] for t in (templated, "hello how are you world")]
    _, arrays = read_db(path)
    assert arrays["tokens"].tolist()[: sum(len(d) + 1 for d in docs)] == join_documents(docs).tolist()
    loaded = StatisticsTier.from_file(path, lm.fingerprint)
    fresh = StatisticsTier.from_documents(split_documents(arrays["tokens"]))
    for context in ([7], [9, 10], [5, 7, 8], tok("hello how", add_special_tokens=False)["input_ids"]):
        assert loaded.search(context, 8) == fresh.search(context, 8)
    # "how are" -> "you <|im_end|>" twice (the template ends turns), "you world" once: no statistic.
    strict = StatisticsTier.from_file(path, lm.fingerprint, StatisticsSettings(min_count=2))
    assert strict.lookup(tok("how are", add_special_tokens=False)["input_ids"], 2) == [(11, 4)]


def test_a_text_file_is_one_document_a_line(tmp_path):
    src = tmp_path / "corpus.txt"
    src.write_text("hello world\n\nhow are you\n")
    path = build_statistics_db(tiny_lm(), tmp_path / "s.npz", source=src, progress=False)
    _, arrays = read_db(path)
    assert arrays["tokens"].tolist() == [7, 8, SEPARATOR, 9, 10, 11, SEPARATOR]


def test_another_tokenizer_is_refused(tmp_path, corpus_file):
    path = build_statistics_db(tiny_lm(), tmp_path / "s.npz", source=corpus_file, progress=False)
    with pytest.raises(HDError, match="another tokenizer"):
        StatisticsTier.from_file(path, fingerprint="0123456789abcdef")


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_a_damaged_file_is_refused(tmp_path, corpus_file, damage):
    path = build_statistics_db(tiny_lm(), tmp_path / "s.npz", source=corpus_file, progress=False)
    data = bytearray(path.read_bytes())
    if damage == "truncate":
        data = data[: len(data) * 2 // 3]
    else:  # one bit inside the suffix array's data: only the CRC can tell
        _, arrays = read_db(path)
        at = bytes(data).find(arrays["suffixes"].tobytes())
        data[at + 2] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(HDError, match="truncated or corrupt"):
        StatisticsTier.from_file(path, tiny_lm().fingerprint)


def test_the_default_path_is_per_tokenizer(monkeypatch, tmp_path):
    monkeypatch.setenv("HDLIB_CACHE", str(tmp_path))
    assert default_statistics_path(tiny_lm()) == tmp_path / "db" / f"statistics-{tiny_lm().fingerprint}.npz"


def test_ensure_builds_on_first_use_then_reuses_and_replaces_a_broken_file(monkeypatch, tmp_path, corpus_file):
    import hdlib.databases.statsdb as module

    monkeypatch.setenv("HDLIB_CACHE", str(tmp_path))
    lm, path, built = tiny_lm(), default_statistics_path(tiny_lm()), []

    def build(lm, out, progress=True):  # the tiny corpus instead of ShareGPT
        built.append(out)
        return build_statistics_db(lm, out, source=corpus_file, progress=False)

    monkeypatch.setattr(module, "build_statistics_db", build)
    assert ensure_statistics_db(lm) == path and built == [path]
    assert ensure_statistics_db(lm) == path and len(built) == 1
    path.write_bytes(b"not a database")
    assert ensure_statistics_db(lm, progress=False) == path and len(built) == 2
    assert StatisticsTier.from_file(path, lm.fingerprint).meta["model"] == "tiny"


def test_empty_corpus_is_refused(tmp_path):
    src = tmp_path / "empty.txt"
    src.write_text("\n\n")
    with pytest.raises(HDError, match="holds no text"):
        build_statistics_db(tiny_lm(), tmp_path / "s.npz", source=src, progress=False)
    with pytest.raises(HDError, match="no corpus at"):
        build_statistics_db(tiny_lm(), tmp_path / "s.npz", source=tmp_path / "missing.txt", progress=False)


# Lossless in the engine -------------------------------------------------------------------------


@functools.cache
def llama():
    return tiny_llama()


@functools.cache
def plain(prompt: tuple[int, ...], max_new: int) -> list[int]:
    return run(llama(), prompt, None, DecodeSettings(max_new_tokens=max_new)).tokens


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    prompt=st.lists(st.integers(3, VOCAB - 1), min_size=1, max_size=8).map(tuple),
    budget=st.integers(1, 16),
    seed=st.integers(0, 100),
)
def test_hd_with_the_statistics_tier_equals_plain_greedy(prompt, budget, seed):
    rng = np.random.default_rng(seed)
    want = plain(prompt, 24)
    # The corpus holds this answer with corrupted copies (rejected branches) and random text.
    truth = list(prompt) + want
    docs = [
        truth,
        *(np.where(rng.random(len(truth)) < 0.2, rng.integers(3, VOCAB, len(truth)), truth) for _ in range(3)),
    ]
    docs += [rng.integers(3, VOCAB, 30).tolist() for _ in range(5)]
    tier = StatisticsTier.from_documents(docs)
    got = run(llama(), prompt, Drafter([tier]), DecodeSettings(max_new_tokens=24), (), FixedBudget(budget))
    assert got.tokens == want
    assert got.mat > 1.0  # drafts from the corpus were accepted: the test exercised acceptance


# The real database ------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_default_database_drafts_fast_and_sensibly():
    """On the full ShareGPT database when it is built (`hdlib build-db statistics`, about 2 minutes)."""
    from hdlib.models.loading import load_model
    from hdlib.models.packaged import is_installed

    if not is_installed("smollm2-135m"):
        pytest.skip("the packaged model is not installed")
    lm = load_model()
    path = default_statistics_path(lm)
    if not path.is_file():
        pytest.skip(f"no statistics database at {path}: build it with `hdlib build-db statistics`")
    tier = StatisticsTier.from_file(path, lm.fingerprint)
    assert tier.meta["counts"]["tokens"] > 10_000_000 and tier.meta["source"]["sharegpt"]["truncated"]
    ids = lm.tokenizer("Here is a Python function that returns the sum of a list of numbers", add_special_tokens=False)[
        "input_ids"
    ]
    got = tier.search(ids[:-3], budget=16)
    assert got.key_length >= 3 and got.drafts and got.drafts[0].count >= 2
    times = []
    for end in range(2, len(ids)):
        start = time.perf_counter()
        tier.lookup(ids[:end], 16)
        times.append(time.perf_counter() - start)
    assert statistics.median(times) < 0.005  # the benchmark measures 1 ms goals on a quiet machine
