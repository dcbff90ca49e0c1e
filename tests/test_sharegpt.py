"""The streaming ShareGPT reader on small files cut at every byte: it keeps every complete
conversation, says the file was cut, and where the last complete conversation ends."""

from __future__ import annotations

import json

import pytest

from hdlib.databases.sharegpt import ShareGPTReader, prompts, split_of
from hdlib.errors import HDError


def conversations(n: int, text: str) -> list[dict]:
    return [
        {
            "id": f"conv{i}",
            "conversations": [{"from": "human", "value": f'{text} {i} "quoted" ]'}, {"from": "gpt", "value": "}, {"}],
        }
        for i in range(n)
    ]


def encode(rows: list) -> bytes:
    return json.dumps(rows, ensure_ascii=False, indent=1 if len(rows) < 3 else None).encode("utf-8")


def ends(rows: list, data: bytes) -> list[int]:
    """Byte offset just after each entry of the JSON array `data`."""
    decoder, text, pos, out = json.JSONDecoder(), data.decode("utf-8"), 1, []
    for _ in rows:
        while text[pos] in " \n,":
            pos += 1
        _, pos = decoder.raw_decode(text, pos)
        out.append(len(text[:pos].encode("utf-8")))
    return out


def read(path, chunk_bytes):
    reader = ShareGPTReader(path, chunk_bytes=chunk_bytes)
    return [c.id for c in reader], reader.report


def check_every_cut(tmp_path, rows: list, chunk_bytes: int) -> None:
    data = encode(rows)
    after = ends(rows, data)
    path = tmp_path / "cut.json"
    for cut in range(data.index(b"{") + 1, len(data) + 1):  # every cut inside or after the first entry
        path.write_bytes(data[:cut])
        ids, report = read(path, chunk_bytes)
        complete = [r["id"] for r, end in zip(rows, after) if end <= cut]
        assert ids == complete, cut
        assert report.conversations == len(complete) and report.bytes_read == cut
        assert report.truncated == (cut < len(data))
        assert report.end_offset == (len(data) if cut == len(data) else (after[len(complete) - 1] if complete else 0))
        if report.truncated:
            assert f"byte {cut:,}" in report.notes[0]


@pytest.mark.parametrize("chunk_bytes", [7, 1 << 20])
def test_every_cut_keeps_every_complete_conversation(tmp_path, chunk_bytes):
    check_every_cut(tmp_path, conversations(3, "hello"), chunk_bytes)


@pytest.mark.parametrize("chunk_bytes", [7, 64])
def test_cuts_inside_a_multibyte_character(tmp_path, chunk_bytes):
    check_every_cut(tmp_path, conversations(2, "héllo ✓ wörld 🌍"), chunk_bytes)


def test_the_report_counts_turns_and_skips_entries_that_are_not_conversations(tmp_path):
    rows = [*conversations(2, "hi"), {"id": "x", "note": "no conversations"}, 42]
    path = tmp_path / "whole.json"
    path.write_bytes(encode(rows))
    ids, report = read(path, 16)
    assert ids == ["conv0", "conv1"] and report.skipped == 2 and report.turns == 4 and not report.truncated


def test_the_split_is_fixed_by_the_id_and_holds_out_one_in_twenty():
    ids = [f"id{i}" for i in range(4000)]
    held = [i for i in ids if split_of(i) == "heldout"]
    assert [split_of(i) for i in ids] == [split_of(i) for i in ids]
    assert 0.035 < len(held) / len(ids) < 0.065


def test_prompts_come_from_the_requested_split_only(tmp_path):
    rows = conversations(60, "question")
    path = tmp_path / "many.json"
    path.write_bytes(encode(rows))
    held = prompts("heldout", path=path)
    train = prompts("train", path=path)
    assert len(held) + len(train) == 60 and held and not set(held) & set(train)
    assert all(split_of(r["id"]) == "heldout" for r in rows if r["conversations"][0]["value"] in held)
    with pytest.raises(HDError, match="unknown ShareGPT split"):
        prompts("test", path=path)
