"""The model's choices (`hdlib.engine.choices`): the argmax first on exact ties, the blocked top tokens
equal to `topk`, and a softmax buffer that gives the same choices and is kept."""

from __future__ import annotations

import pytest
import torch

from hdlib.engine.choices import TOP_BLOCK, SoftmaxBuffer, model_choices, settle_ties, top_tokens


def test_choices_put_the_argmax_first_on_exact_ties():
    """Greedy acceptance, the records and the recycled guesses take one token: the first of equal
    maxima, whatever order topk gives the ties (on this CPU topk(8) puts 7 before 3 in row 0)."""
    logits = torch.zeros(4, 50)
    logits[0, [7, 3, 30]] = 2.0  # a three-way tie
    logits[1, :] = 1.0  # every token tied
    logits[2, [40, 2]] = 5.0
    logits[3, 9] = 1.0  # no tie
    for k in (1, 2, 4, 8):
        indices, probs, tied = model_choices(logits, k)
        assert tied.tolist() == [True, True, True, False]
        settled = settle_ties(logits, indices)
        assert settled[:, 0].tolist() == logits.argmax(dim=-1).tolist() == [3, 0, 2, 9]
        assert all(len(set(row)) == len(row) for row in settled.tolist())  # nothing repeated
        assert torch.all(probs[:, :-1] >= probs[:, 1:])  # still best first
        assert torch.allclose(probs, torch.softmax(logits, dim=-1).gather(1, settled))


@pytest.mark.parametrize("k", [1, 2, 8])
def test_the_blocked_top_tokens_are_topk(k):
    """`top_tokens` looks only inside the k blocks with the largest maxima: the same values and
    tokens as `topk` over the whole row, wherever the best tokens lie (spread over many blocks, all
    in one block, or in the last), on a vocabulary large enough for the blocked search."""
    gen = torch.Generator().manual_seed(k)
    v = TOP_BLOCK * 100
    logits = torch.randn(6, v, generator=gen)
    logits[1, :k] += 10.0  # all in the first block
    logits[2, v - k :] += 10.0  # all in the last
    logits[3, torch.randperm(v, generator=gen)[:k]] += 10.0  # spread out
    logits[4, ::TOP_BLOCK] += 10.0  # every block holds one of the many good ones
    logits[5] = logits[5].round()  # many exact ties among the best
    values, indices = top_tokens(logits, k)
    want_values, want_indices = logits.topk(k, dim=-1)
    assert torch.equal(values, want_values)
    assert torch.equal(logits.gather(1, indices), values)  # the tokens hold those values
    assert torch.equal(indices[:5], want_indices[:5])  # no ties there: the same tokens
    assert all(len(set(row)) == k for row in indices.tolist())


def test_the_softmax_buffer_gives_the_same_choices_and_is_kept():
    logits = torch.randn(5, TOP_BLOCK * 40, generator=torch.Generator().manual_seed(0))
    buffer = SoftmaxBuffer()
    first = buffer.like(logits)
    got = model_choices(logits, 4, first)
    want = model_choices(logits, 4)
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
    assert buffer.like(logits[:3]).data_ptr() == first.data_ptr()  # a smaller tree reuses it
    assert buffer.like(torch.zeros(9, logits.shape[1])).shape == (9, logits.shape[1])  # a larger one grows it
