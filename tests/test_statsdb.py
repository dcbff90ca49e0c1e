"""The statistics database (hdlib.databases.statsdb): written, read back, refused when built for
another tokenizer or damaged, built once on first use."""

from __future__ import annotations

import functools
import json
from types import SimpleNamespace

import pytest
from support.documents import split_documents
from support.tiny import tiny_tokenizer

from hdlib.databases.statsdb import build_statistics_db, default_statistics_path, ensure_statistics_db
from hdlib.errors import HDError
from hdlib.models.loading import tokenizer_fingerprint
from hdlib.store import read_db, read_meta
from hdlib.tiers.statistics import StatisticsSettings, StatisticsTier
from hdlib.tiers.suffix_array import SEPARATOR, join_documents

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
