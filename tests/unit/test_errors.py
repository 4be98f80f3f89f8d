"""Each error type says whether a retry can help; the background handler acts on that alone."""

from __future__ import annotations

import pytest

from agentwake import errors


@pytest.mark.parametrize(
    "error",
    [errors.InvalidMessage, errors.UnknownTask, errors.SessionMismatch, errors.ForgedCompletion, errors.BudgetExceeded],
)
def test_what_no_retry_can_fix_is_not_retryable(error: type[errors.AgentwakeError]) -> None:
    # GIVEN an error the same message would hit again  THEN it is dead-lettered at once, not retried
    assert error.retryable is False


@pytest.mark.parametrize(
    "error",
    [
        errors.RunFailed,
        errors.SessionBusy,
        errors.ConfigError,
        errors.RunDeferred,
        errors.CommitConflict,
        errors.StepInterrupted,
    ],
)
def test_what_a_later_attempt_may_fix_is_retryable(error: type[errors.AgentwakeError]) -> None:
    # GIVEN a failed run, a busy session, a config an operator can fix  THEN the trigger retries it
    assert error.retryable is True


def test_an_error_type_that_says_nothing_is_retried() -> None:
    # GIVEN a new error type that forgets to say  THEN it is retried (a retry costs less than a
    # message dead-lettered before its receives were used)
    class Unclassified(errors.AgentwakeError):
        pass

    assert Unclassified.retryable is True
