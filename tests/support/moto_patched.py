"""moto as the local stack runs it, for the test folders that use moto or the emulator.

``agentwake_local.moto_patches`` (pinned to moto's source, checked on apply): unpatched, an SQS
receive walks the whole queue and a transaction copies the whole table, so a DLQ scan costs n²
(the 10,000-body ``make fuzz``, ``make dlq-scale``) and a 100,000-entry table costs gigabytes.
The conftests of ``tests/integration``, ``tests/e2e``, ``tests/security`` and ``tests/architecture``
apply it in ``pytest_configure``, before any test runs, whatever order the folders run in.
``tests/unit`` never does: runtime unit tests need neither moto nor the ``local`` extra."""

from __future__ import annotations


def apply_moto_patches() -> None:
    from agentwake_local import moto_patches

    moto_patches.apply()
