"""The forward-time profiles the claims at the auto budget on the packaged model are checked with.

The auto budget weighs drafts against the forward-time profile, which is measured per machine and
moves with its load; a claim checked on this machine's own profile passes on one machine and fails
on another. So the tests inject a profile: the one committed in tests/data (measured on a 2-core AMD
EPYC, its provenance in the file; `python scripts/forward_profile.py` measures it again), the same on
every CPU, and that profile with its long end 15 % slower and 15 % faster, as far as two measurements
of the same machine, busy and quiet, were seen to differ. The perturbation is a ramp: k = 1 as
measured, k = 64 scaled by 1.15 (0.85), the k between by the line between, so the shape stays smooth
(a step at some k would make a kink the auto budget does not meet on a real machine).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from hdlib.engine.forward_time import ForwardProfile, read_profile

COMMITTED = Path(__file__).resolve().parents[1] / "data" / "forward_profile_smollm2-135m.json"
LONG_END = 0.15  # how much slower or faster the perturbed profiles are at k = 64
PROFILES = {"committed": 0.0, "long end +15%": LONG_END, "long end -15%": -LONG_END}  # name -> change at k = 64


def ramped(profile: ForwardProfile, change: float) -> ForwardProfile:
    """`profile` with forward(k) scaled by 1 + change * (k - 1) / (n - 1): k = 1 as it is, the last k by
    1 + change."""
    n = len(profile.seconds)
    scale = 1.0 + change * np.arange(n) / max(n - 1, 1)
    seconds = tuple((np.asarray(profile.seconds) * scale).tolist())
    return ForwardProfile(seconds, profile.context_len, f"{profile.key}{change:+.2f}")


def profile(name: str) -> ForwardProfile:
    """The profile named in PROFILES: the committed one, or it ramped."""
    return ramped(read_profile(COMMITTED), PROFILES[name])
