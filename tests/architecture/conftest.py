from tests.integration.conftest import resources  # noqa: F401  (the integration suite's fixture)
