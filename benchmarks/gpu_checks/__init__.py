"""The device check's parts (`benchmarks/gpu_check.py` runs them, in this order): `report` (what a
run measures, the JSON it writes, the meta section), `instruments` (hdlib's moving pieces, one place
each; host reads and CUDA synchronisations counted), `lossless`, `model` (the 7B-shaped model: its
forward passes and memory), `engine` (hdlib's step and throughput on it)."""
