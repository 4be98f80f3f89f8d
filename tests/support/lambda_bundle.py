"""The Lambda bundle as ``sam build`` makes it: functions/Makefile's steps, run into a folder of ours.

Used by the bundle test (tests/architecture/test_lambda_bundle.py) and the cold-init bench
(bench/cold_init.py), so both look at what the build step really produces, not at the source tree.

The ``deps`` step (pip installing the requirements) is the slow one, network-bound: its output is
kept under ``.venv/bundle-deps/``, keyed by the requirements, the interpreter and the platform, and
copied into each bundle; ``code`` and ``bytecode`` run every time.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAKEFILE = ROOT / "functions" / "Makefile"
DEPS_CACHE = ROOT / ".venv" / "bundle-deps"

#: what the Lambda Python runtime provides beside the bundle (boto3 and what it imports); the bench and
#: the import probe take them from this environment, as a folder of their own after the bundle
RUNTIME_PROVIDED = ("boto3", "botocore", "s3transfer", "jmespath", "dateutil", "urllib3", "six")


def make_var(name: str, **overrides: str) -> str:
    """A variable of functions/Makefile as it resolves here (e.g. BUILD_PYTHON, PLATFORM)."""
    args = [f"{k}={v}" for k, v in overrides.items()]
    out = subprocess.run(
        ["make", "-s", "-f", str(MAKEFILE), f"print-{name}", *args], capture_output=True, text=True, check=True
    )
    return out.stdout.strip()


def build_python(version: str) -> str | None:
    """The interpreter the Makefile compiles with for Python ``version``, or None if it has none."""
    check = subprocess.run(
        ["make", "-s", "-f", str(MAKEFILE), "check-python", f"PYTHON_VERSION={version}"],
        capture_output=True,
        text=True,
    )
    return make_var("BUILD_PYTHON", PYTHON_VERSION=version) if check.returncode == 0 else None


def _make(targets: list[str], dest: Path, variables: dict[str, str]) -> None:
    out = subprocess.run(
        [
            "make",
            "-s",
            "-f",
            str(MAKEFILE),
            *targets,
            f"ARTIFACTS_DIR={dest}",
            *(f"{k}={v}" for k, v in variables.items()),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PIP_ROOT_USER_ACTION": "ignore"},
    )
    if out.returncode:
        raise RuntimeError(
            f"make {' '.join(targets)} failed ({out.returncode}):\n{out.stdout[-2000:]}{out.stderr[-3000:]}"
        )


def build(
    dest: Path,
    *,
    python: str,
    version: str,
    platform: str = "",
    bytecode: bool = True,
    requirements: Path | None = None,
    packages: str | None = None,
) -> Path:
    """Run the Makefile's steps into ``dest``: deps (cached), code, and bytecode unless ``bytecode=False``.

    ``platform=""`` installs wheels for this machine (so the bundle can be imported here); the deployed
    build's default is the Makefile's own (manylinux2014_aarch64).
    """
    variables = {"BUILD_PYTHON": python, "PYTHON_VERSION": version, "PLATFORM": platform}
    if requirements is not None:
        variables["REQUIREMENTS"] = str(requirements)
    if packages is not None:
        variables["PACKAGES"] = packages
    req = (requirements or ROOT / "functions" / "requirements.txt").read_bytes()
    key = hashlib.sha256(b"\0".join([req, python.encode(), version.encode(), platform.encode()])).hexdigest()[:16]
    cached = DEPS_CACHE / key
    if not cached.is_dir():
        DEPS_CACHE.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=DEPS_CACHE) as tmp:
            _make(["deps"], Path(tmp) / "deps", variables)
            try:
                (Path(tmp) / "deps").rename(cached)
            except OSError:  # another process cached the same deps first
                pass
    shutil.copytree(cached, dest, symlinks=True, dirs_exist_ok=True)
    _make(["code", "bytecode"] if bytecode else ["code"], dest, variables)
    return dest


def compile_bytecode(dest: Path, *, python: str, version: str) -> Path:
    """The Makefile's ``bytecode`` step alone, on a tree already built (e.g. with a file added)."""
    _make(["bytecode"], dest, {"BUILD_PYTHON": python, "PYTHON_VERSION": version})
    return dest


def runtime_provided(dest: Path, *, python: str | None = None, version: str | None = None) -> Path:
    """A folder with what the Lambda runtime provides (boto3 and its imports), taken from this environment.

    Linked, with this environment's bytecode; or, for another interpreter (``python``, ``version``),
    copied and compiled by it (botocore's data folder linked), so neither side of a measurement
    compiles boto3 from source."""
    dest.mkdir(parents=True, exist_ok=True)
    copy = python is not None and Path(python).resolve() != Path(sys.executable).resolve()
    for name in RUNTIME_PROVIDED:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            raise RuntimeError(f"{name} is not installed here; the bench needs it as the Lambda runtime provides it")
        if spec.submodule_search_locations:  # a package: its folder
            src = Path(next(iter(spec.submodule_search_locations)))
            if copy:
                shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__", "data"))
                if (src / "data").is_dir():
                    (dest / name / "data").symlink_to(src / "data", target_is_directory=True)
            else:
                (dest / name).symlink_to(src, target_is_directory=True)
        else:  # a single module
            src = Path(spec.origin)
            if copy:
                shutil.copy2(src, dest / src.name)
                continue
            (dest / src.name).symlink_to(src)
            cache = Path(importlib.util.cache_from_source(str(src)))
            if cache.exists():
                (dest / "__pycache__").mkdir(exist_ok=True)
                (dest / "__pycache__" / cache.name).symlink_to(cache)
    if copy:
        assert python is not None and version is not None
        compile_bytecode(dest, python=python, version=version)
    return dest


def current_version() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"
