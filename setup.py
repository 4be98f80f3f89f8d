"""Package layout (metadata lives in pyproject.toml): four import names from four folders.

- ``agentwake``        functions/agentwake  the Lambda runtime (the SAM CodeUri is functions/)
- ``agentwake_client`` agentwake_client/    the product API's client for products and producers
                                            (outside the CodeUri: it never ships in a function's bundle)
- ``agentwake_ops``    agentwake_ops/       the operator CLI (``ops`` extra)
- ``agentwake_local``  infra/agentwake_local/the embedded local AWS (``local`` extra)
"""

from setuptools import find_packages, setup

FOLDERS = {
    "agentwake": "functions/agentwake",
    "agentwake_client": "agentwake_client",
    "agentwake_ops": "agentwake_ops",
    "agentwake_local": "infra/agentwake_local",
}


def packages() -> list[str]:
    found: list[str] = []
    for name, folder in FOLDERS.items():
        found.append(name)
        found += [f"{name}.{sub}" for sub in find_packages(folder)]
    return found


setup(packages=packages(), package_dir=FOLDERS)
