# The recovery tests' real HTTP ledger and its policies, for the Procfile test.
from tests.recovery.conftest import ledger, policies  # noqa: F401
