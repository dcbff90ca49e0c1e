"""Precision and loading: dtype "auto" (bfloat16 on CUDA, float16 without it, float32 elsewhere), weights
loaded straight onto the device, and a forward profile keyed by everything its times depend on.

No GPU is needed: CUDA's answers (bfloat16 support, the device's name) are monkeypatched.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from tiny import save_tiny, tiny_llama
from transformers import AutoModelForCausalLM

import hdlib.forward_time
from hdlib.cli import build_parser
from hdlib.errors import HDError
from hdlib.forward_time import profile_key
from hdlib.models import DTYPE_CHOICES, load_model, resolve_dtype

CPU, CUDA = torch.device("cpu"), torch.device("cuda")


@pytest.mark.parametrize("auto", ["auto", None])
def test_auto_is_float32_off_cuda(auto):
    assert resolve_dtype(auto, CPU) == torch.float32
    assert resolve_dtype(auto, torch.device("mps")) == torch.float32


def test_auto_on_cuda_is_bfloat16_or_float16_where_bfloat16_is_missing(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: True)
    assert resolve_dtype("auto", CUDA) == torch.bfloat16
    assert resolve_dtype("auto", torch.device("cuda", 1)) == torch.bfloat16
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: False)
    assert resolve_dtype("auto", CUDA) == torch.float16
    assert resolve_dtype("float32", CUDA) == torch.float32  # asked for: kept


def test_named_dtypes_and_torch_dtypes_are_kept_and_others_refused():
    for name, dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16), ("float16", torch.float16)):
        assert resolve_dtype(name, CPU) == resolve_dtype(dtype, CPU) == dtype
    for bad in ("int8", "fp32", "Auto", torch.int64, torch.float64, 32):
        with pytest.raises(HDError, match="unsupported dtype.*auto, float32, bfloat16, float16"):
            resolve_dtype(bad, CPU)
    assert DTYPE_CHOICES == ("auto", "float32", "bfloat16", "float16")


def test_load_model_defaults_to_auto_and_loads_straight_onto_the_device(tmp_path, monkeypatch):
    folder = save_tiny(tmp_path / "m")
    asked = []
    from_pretrained = AutoModelForCausalLM.from_pretrained

    def spy(*args, **kwargs):
        asked.append(kwargs)
        return from_pretrained(*args, **kwargs)

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", spy)
    lm = load_model(str(folder), device="cpu", prepack="none")
    assert lm.model.dtype == torch.float32 and lm.model.device == CPU
    assert asked[-1]["device_map"] == CPU and asked[-1]["dtype"] == torch.float32
    assert load_model(str(folder), dtype="bfloat16", prepack="none").model.dtype == torch.bfloat16


def test_the_profile_key_names_dtype_device_torch_and_cuda(monkeypatch):
    model = tiny_llama()
    key = profile_key(model, 256, 64)
    assert profile_key(model, 256, 64) == key
    assert profile_key(tiny_llama().to(torch.bfloat16), 256, 64) != key

    monkeypatch.setattr(hdlib.forward_time, "_cpu_name", lambda: "Another CPU")
    assert profile_key(model, 256, 64) != key
    monkeypatch.undo()
    assert profile_key(model, 256, 64) == key

    monkeypatch.setattr(torch, "__version__", "0.0.1")
    assert profile_key(model, 256, 64) != key
    monkeypatch.undo()
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    assert profile_key(model, 256, 64) != key


def test_on_cuda_the_profile_key_names_the_gpu(monkeypatch):
    """An A100's profile must not serve an H100 from a shared home folder."""
    model = tiny_llama()
    on_gpu = SimpleNamespace(
        config=model.config, dtype=torch.bfloat16, device=torch.device("cuda", 0), modules=model.modules
    )
    keys = {}
    for name in ("NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"):
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None, name=name: name)
        keys[name] = profile_key(on_gpu, 256, 64)
    assert len(set(keys.values())) == 2


@pytest.mark.parametrize("command", ["warmup", "generate", "bench"])
def test_every_command_that_loads_for_decoding_takes_dtype_auto_by_default(capsys, command):
    with pytest.raises(SystemExit):
        build_parser().parse_args([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--dtype {auto,float32,bfloat16,float16}" in text and "auto (default) is bfloat16 on CUDA" in text
    required = {"generate": ["--prompt", "x"]}.get(command, [])
    assert build_parser().parse_args([command, *required]).dtype == "auto"
