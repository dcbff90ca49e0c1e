"""The CPU path: prepacked linear layers compute what nn.Linear computes, and decoding is unchanged."""

from __future__ import annotations

import json

import pytest
import torch
from support.tiny import tiny_llama

from hdlib.engine.loop import DecodeSettings, run
from hdlib.errors import HDError
from hdlib.models.cpu import CALIBRATED_ROWS, PrepackedLinear, describe_machine, kernel_choices_path, prepack
from hdlib.models.loading import load_model

pytestmark = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="torch built without oneDNN")


@pytest.mark.parametrize("packed", [True, False])
def test_a_prepacked_layer_computes_the_linear_product_with_either_kernel(packed):
    torch.manual_seed(0)
    linear = torch.nn.Linear(48, 80)
    layer = PrepackedLinear(linear, calibrate=False)
    layer.packed_rows = [packed] * (CALIBRATED_ROWS + 1)
    with torch.inference_mode():
        for shape in [(1, 48), (3, 48), (1, 7, 48), (2, 20, 48)]:  # 20 rows and more: always packed
            x = torch.randn(*shape)
            assert torch.allclose(layer(x), linear(x), atol=1e-5)


def test_calibration_chooses_a_kernel_for_every_calibrated_row_count():
    layer = PrepackedLinear(torch.nn.Linear(64, 64))
    assert len(layer.packed_rows) == CALIBRATED_ROWS + 1
    assert all(isinstance(choice, bool) for choice in layer.packed_rows)


@pytest.mark.parametrize("which", ["head", "all"])
def test_decoding_with_prepacked_layers_equals_decoding_without(which):
    prompt = (5, 6, 7, 8, 9) * 3
    want = run(tiny_llama(), prompt, None, DecodeSettings(max_new_tokens=30)).tokens
    model = tiny_llama()
    assert prepack(model, which) == which
    assert isinstance(model.get_output_embeddings(), PrepackedLinear)
    layers = [m for m in model.modules() if isinstance(m, PrepackedLinear)]
    assert len(layers) == (1 if which == "head" else 1 + 7 * model.config.num_hidden_layers)
    assert run(model, prompt, None, DecodeSettings(max_new_tokens=30)).tokens == want


@pytest.fixture
def timed(monkeypatch, tmp_path):
    """The layer shapes timed (calibrated) from here on, with a cache of kernel choices of our own."""
    monkeypatch.setenv("HDLIB_CACHE", str(tmp_path / "cache"))
    shapes = []
    original = PrepackedLinear.calibrate

    def calibrate(self, repeats=5):
        shapes.append((self.in_features, self.out_features))
        original(self, repeats)

    monkeypatch.setattr(PrepackedLinear, "calibrate", calibrate)
    return shapes


def packed_layers(model):
    return [m for m in model.modules() if isinstance(m, PrepackedLinear)]


def test_each_layer_shape_is_timed_once_and_its_choice_serves_every_layer_of_it(timed):
    model = tiny_llama()
    prepack(model, "all")
    layers = packed_layers(model)
    shapes = {(m.in_features, m.out_features) for m in layers}
    assert sorted(timed) == sorted(shapes) and len(layers) > len(shapes)  # one timing per shape
    for m in layers:
        first = next(f for f in layers if (f.in_features, f.out_features) == (m.in_features, m.out_features))
        assert m.packed_rows == first.packed_rows and (m is first or m.packed_rows is not first.packed_rows)


def test_the_kernel_choices_are_kept_for_the_next_load_on_this_machine(timed, monkeypatch):
    first = tiny_llama()
    prepack(first, "all")
    path = kernel_choices_path(torch.float32)
    assert path.is_file() and timed
    # Choices that timing would rarely make, to see that the next load takes them from the file.
    data = json.loads(path.read_text())
    data["packed_rows"] = {shape: [i % 2 == 0 for i in range(CALIBRATED_ROWS + 1)] for shape in data["packed_rows"]}
    path.write_text(json.dumps(data))
    timed.clear()
    again = tiny_llama()
    prepack(again, "all")
    assert not timed
    assert all(m.packed_rows == [i % 2 == 0 for i in range(CALIBRATED_ROWS + 1)] for m in packed_layers(again))

    path.write_text("{not json")  # a damaged file: timed again, and written anew
    prepack(tiny_llama(), "all")
    assert timed and json.loads(path.read_text())["packed_rows"]

    monkeypatch.setattr(torch, "get_num_threads", lambda: 97)  # another thread count: its own choices
    assert kernel_choices_path(torch.float32) != path


def test_prepacking_is_skipped_where_it_does_not_apply_and_refused_when_unknown(tmp_path):
    half = tiny_llama().to(torch.bfloat16)
    assert prepack(half, "head") == "none"
    assert not isinstance(half.get_output_embeddings(), PrepackedLinear)
    with pytest.raises(HDError, match="prepack must be one of none, head, all"):
        prepack(tiny_llama(), "everything")
    with pytest.raises(HDError, match="prepack must be one of"):  # before anything is loaded
        load_model(str(tmp_path / "no-such-model"), prepack="fast")


def test_the_machine_is_described_for_benchmark_records():
    machine = describe_machine()
    assert machine["threads"] == torch.get_num_threads() and isinstance(machine["vector_flags"], list)
