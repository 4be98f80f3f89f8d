"""The Lambda bundle carries runtime code only, and the bytecode the runtime loads.

Two views: the CodeUri (what sam build starts from: our package, its requirements and the build's
Makefile) and the bundle the build step makes from it (functions/Makefile, run here into a temp dir
as ``sam build`` runs it). /var/task is read-only, so a module without valid bytecode in the bundle
is compiled again at every cold start; the bundle must hold, for every ``.py``, a ``.pyc`` that the
runtime's Python accepts without looking at the source's mtime (which the zip does not keep: sam
package writes every entry with the date 1980-01-01).
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from agentwake_local.template import load_template
from tests.support import lambda_bundle

ROOT = Path(__file__).resolve().parents[2]
#: top-level names that belong to the operator CLI or the local emulator, never to a function
NOT_RUNTIME = {"agentwake_ops", "agentwake_local", "infra", "ops", "typer", "rich", "click", "moto", "yaml"}
#: the product API's client: products and producers import it, no function does (agentwake_client/)
PRODUCER_CLIENT = "agentwake_client"
#: importlib.util.MAGIC_NUMBER of CPython 3.13 (3571 in Lib/importlib/_bootstrap_external.py's magic
#: table, "Python 3.13a... 3571"; fixed for every 3.13.x release), the runtime of template.yaml
MAGIC_PYTHON_313 = (3571).to_bytes(2, "little") + b"\r\n"
RUNTIME_VERSION = "3.13"
HANDLER_MODULES = ("agentwake.handlers.background_result", "agentwake.handlers.cron_wake")

#: run by the interpreter that compiled the bundle: every .py's .pyc, as that interpreter looks for it
CHECK_BYTECODE = r"""
import importlib.util, json, sys
from pathlib import Path
problems, count = [], 0
for py in sorted(Path(sys.argv[1]).rglob("*.py")):
    count += 1
    pyc = Path(importlib.util.cache_from_source(str(py)))
    if not pyc.exists():
        problems.append(f"{py}: no {pyc.name}")
        continue
    head = pyc.read_bytes()[:16]
    flags = int.from_bytes(head[4:8], "little")
    if head[:4] != importlib.util.MAGIC_NUMBER:
        problems.append(f"{pyc}: magic {head[:4]!r}")
    elif flags != 0b01:  # PEP 552: bit 0 hash-based, bit 1 check_source; unchecked-hash is 0b01
        problems.append(f"{pyc}: flags {flags:#04b}, not unchecked-hash")
    elif head[8:16] != importlib.util.source_hash(py.read_bytes()):
        problems.append(f"{pyc}: hash of another source")
print(json.dumps({"magic": importlib.util.MAGIC_NUMBER.hex(), "tag": sys.implementation.cache_tag,
                  "py": count, "pyc": len(list(Path(sys.argv[1]).rglob("*.pyc"))), "problems": problems}))
"""

#: run with -S -B on the bundle then the runtime's own libraries only: which modules were compiled
#: from source (none may be, from the bundle) and which were loaded from it
IMPORT_PROBE = r"""
import importlib, json, sys
from importlib.machinery import SourceFileLoader
bundle, runtime, *modules = sys.argv[1:]
sys.path[0:1] = [bundle, runtime]
compiled = []
to_code = SourceFileLoader.source_to_code
def spy(self, data, path, *args, **kwargs):
    compiled.append(str(path))
    return to_code(self, data, path, *args, **kwargs)
SourceFileLoader.source_to_code = spy
for name in modules:
    importlib.import_module(name)
loaded = sorted(m.__file__ for m in list(sys.modules.values()) if (getattr(m, "__file__", None) or "").startswith(bundle))
print(json.dumps({"compiled": [c for c in compiled if c.startswith(bundle)], "loaded": loaded}))
"""


def code_uris() -> set[Path]:
    template = load_template(ROOT / "template.yaml")
    uris = set()
    for spec in template.resources.values():
        if spec.get("Type") == "AWS::Serverless::Function":
            uri = (spec.get("Properties") or {}).get("CodeUri") or template.body["Globals"]["Function"].get("CodeUri")
            uris.add((ROOT / uri).resolve())
    return uris


def bundle(code_uri: Path) -> dict[str, bytes]:
    """What sam build starts from in the CodeUri (our code; dependencies come from requirements.txt)."""
    return {
        str(p.relative_to(code_uri)): p.read_bytes()
        for p in sorted(code_uri.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def imported_tops(source: bytes) -> set[str]:
    tree = ast.parse(source.decode())
    return {
        (n.module or "").split(".")[0] if isinstance(n, ast.ImportFrom) else a.name.split(".")[0]
        for n in ast.walk(tree)
        if isinstance(n, ast.Import | ast.ImportFrom)
        for a in n.names
    }


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    """(bundle, interpreter, version): built by functions/Makefile with python3.13 where there is one.

    Wheels for this machine's platform (the deployed build asks pip for arm64 ones: same files but
    the native extension), so the bundle can be imported here."""
    python = lambda_bundle.build_python(RUNTIME_VERSION)
    version = RUNTIME_VERSION
    if python is None:  # no python3.13 here: the structure is still checked, with this interpreter's bytecode
        python, version = sys.executable, lambda_bundle.current_version()
    dest = lambda_bundle.build(tmp_path_factory.mktemp("bundle") / "task", python=python, version=version)
    return dest, python, version


def test_code_uri_holds_only_the_runtime_package_and_its_build() -> None:
    # GIVEN each function's CodeUri
    for uri in code_uris():
        files = bundle(uri)
        # THEN it holds the runtime package, its requirements and the build's Makefile, and no CLI or emulator code
        tops = {name.split("/")[0] for name in files}
        assert tops <= {"agentwake", "requirements.txt", "Makefile"}, tops
        for name, data in files.items():
            if name.endswith(".py"):
                imported = imported_tops(data)
                assert not imported & (NOT_RUNTIME | {PRODUCER_CLIENT}), f"{name} imports {imported}"


def test_requirements_carry_no_cli_or_local_packages() -> None:
    for uri in code_uris():
        lines = (uri / "requirements.txt").read_text().splitlines()
        names = {
            re.split(r"[<>=\[ ;]", line.strip())[0].lower()
            for line in lines
            if line.strip() and not line.startswith("#")
        }
        assert names and not names & {"typer", "rich", "moto", "pyyaml", "click"}, names


#: the first pydantic whose ``model_rebuild`` holds a lock (pydantic#13438): a ``defer_build`` model
#: (``WorkMessage``, the approvals' models) is built by the first record that validates one, and a
#: batch's records run on threads (``agentwake.wake.lanes``); an older pydantic lets a second thread
#: validate with the parent class's validator while the first rebuilds
PYDANTIC_WITH_REBUILD_LOCK = (2, 14)


def test_every_pydantic_the_requirements_allow_builds_deferred_models_under_a_lock() -> None:
    specs = [(uri / "requirements.txt").read_text() for uri in code_uris()]
    specs.append((ROOT / "pyproject.toml").read_text())
    for text in specs:
        found = re.findall(r"pydantic>=(\d+)\.(\d+)", text)
        assert found, "pydantic has no floor"
        for major, minor in found:
            assert (int(major), int(minor)) >= PYDANTIC_WITH_REBUILD_LOCK, f"pydantic>={major}.{minor}"


def test_built_bundle_holds_the_runtime_and_its_dependencies_only(built: tuple[Path, str, str]) -> None:
    # GIVEN the bundle as the build step makes it
    dest, _, _ = built
    tops = {p.name for p in dest.iterdir()}
    # THEN it holds our package and what requirements.txt installs, not the build's Makefile or any CLI package
    assert {"agentwake", "aws_lambda_powertools", "pydantic", "pydantic_core"} <= tops, tops
    assert "Makefile" not in tops and "requirements.txt" not in tops
    assert not {t.split("-")[0].removesuffix(".py").lower() for t in tops} & NOT_RUNTIME, tops
    assert not (dest / "boto3").exists(), "boto3 comes with the Lambda runtime, not in the bundle"
    # AND our package is copied whole: every module of the CodeUri is in it
    ours = {p.relative_to(ROOT / "functions") for p in (ROOT / "functions" / "agentwake").rglob("*.py")}
    shipped = {p.relative_to(dest) for p in (dest / "agentwake").rglob("*.py")}
    assert ours == shipped, ours ^ shipped


def defines_the_producer_client(folder: Path) -> list[str]:
    """The modules under ``folder`` that define the product API's client (its class or its package)."""
    return sorted(
        str(p.relative_to(folder))
        for p in folder.rglob("*.py")
        if PRODUCER_CLIENT in p.parts or re.search(r"^class ProductApiClient\b", p.read_text(encoding="utf-8"), re.M)
    )


def test_the_producer_client_ships_in_no_bundle_and_products_still_import_it(built: tuple[Path, str, str]) -> None:
    # GIVEN each function's CodeUri and the bundle the build step makes from it
    dest, _, _ = built
    # THEN neither holds the product API's client (no function imports it)
    for uri in code_uris():
        assert defines_the_producer_client(uri) == [], uri
    assert defines_the_producer_client(dest) == []
    # AND a product imports it from its own package, beside the runtime
    from agentwake_client import ApiError, ProductApiClient

    assert ProductApiClient.__module__ == PRODUCER_CLIENT and issubclass(ApiError, Exception)
    # AND the check sees the client where it was before it moved out (the runtime package)
    assert defines_the_producer_client(ROOT) == ["agentwake_client/__init__.py"]


def test_every_module_of_the_bundle_has_bytecode_the_runtime_loads_unchecked(built: tuple[Path, str, str]) -> None:
    # GIVEN the bundle as built, and the interpreter that compiled it
    dest, python, version = built
    # WHEN that interpreter looks for each module's bytecode as an import would
    out = subprocess.run([python, "-c", CHECK_BYTECODE, str(dest)], capture_output=True, text=True, check=True)
    report = json.loads(out.stdout)
    # THEN every .py (ours and the dependencies') has its __pycache__/*.<tag>.pyc with the interpreter's
    # magic number, in unchecked-hash mode, hashed from the source beside it; and no other .pyc is shipped
    assert report["py"] > 100, report
    assert report["problems"] == [], report["problems"][:20]
    assert report["pyc"] == report["py"], report
    if version != RUNTIME_VERSION:
        pytest.skip(
            f"no python{RUNTIME_VERSION} here: built and checked with Python {version} ({python}); "
            f"the {RUNTIME_VERSION} magic number and cpython-313 names were not checked"
        )
    # AND it is the runtime's Python: CPython 3.13's magic number and cache tag
    assert bytes.fromhex(report["magic"]) == MAGIC_PYTHON_313, report["magic"]
    assert report["tag"] == "cpython-313"
    assert (dest / "agentwake" / "__pycache__" / "__init__.cpython-313.pyc").is_file()


def test_handlers_import_from_the_bundle_without_compiling_anything(
    built: tuple[Path, str, str], tmp_path: Path
) -> None:
    # GIVEN the bundle as built, with every source's mtime set to the zip's 1980-01-01 (as sam package
    # writes it), and no writable bytecode cache (-B), beside only what the Lambda runtime provides
    dest, python, _ = built
    for py in dest.rglob("*.py"):
        os.utime(py, (315532800, 315532800))
    runtime = lambda_bundle.runtime_provided(tmp_path / "runtime")
    # WHEN the runtime's interpreter imports both handlers as Lambda does at init
    out = subprocess.run(
        [python, "-S", "-B", "-c", IMPORT_PROBE, str(dest), str(runtime), *HANDLER_MODULES],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "AWS_DEFAULT_REGION": "us-east-1"},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout)
    # THEN the handlers and their dependencies come from the bundle, and not one module was compiled from source
    loaded = {Path(f).relative_to(dest).parts[0] for f in report["loaded"]}
    assert {"agentwake", "aws_lambda_powertools", "pydantic"} <= loaded, loaded
    assert report["compiled"] == [], report["compiled"][:20]


def test_the_deployed_build_refuses_bytecode_of_another_python() -> None:
    # GIVEN the build step asked to compile for the runtime (3.13) with an interpreter that is not 3.13
    if lambda_bundle.current_version() == RUNTIME_VERSION:
        pytest.skip("this interpreter is the runtime's version")
    out = subprocess.run(
        [
            "make",
            "-s",
            "-f",
            str(lambda_bundle.MAKEFILE),
            "bundle",
            "ARTIFACTS_DIR=/nonexistent",
            f"BUILD_PYTHON={sys.executable}",
        ],
        capture_output=True,
        text=True,
    )
    # THEN it stops before installing anything, saying why (never ships another version's bytecode)
    assert out.returncode != 0
    assert "must be compiled by Python 3.13" in out.stderr, out.stderr
    assert not Path("/nonexistent").exists()


def test_the_makefile_builds_for_the_template_runtime_and_architecture() -> None:
    # GIVEN the functions' Globals in template.yaml and the Makefile's defaults
    fn = load_template(ROOT / "template.yaml").body["Globals"]["Function"]
    # THEN the build's target Python is the Runtime's, and its wheels are for the Architectures
    assert fn["Runtime"] == f"python{lambda_bundle.make_var('PYTHON_VERSION')}"
    platform = {"arm64": "manylinux2014_aarch64", "x86_64": "manylinux2014_x86_64"}[fn["Architectures"][0]]
    assert lambda_bundle.make_var("PLATFORM") == platform
