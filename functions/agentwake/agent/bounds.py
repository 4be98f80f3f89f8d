"""CPU work on model output is bounded like I/O: how many tool calls one reply may make, how large
and how deep a call's arguments may be, and the run's deadline in every loop over tool calls.

- A reply with more than ``MAX_TOOL_CALLS`` tool calls is malformed output: the runner ends the run
  in ERROR ``MalformedOutput`` and journals that verdict (never the reply itself, which could be
  megabytes), so a retry or redrive stops again without calling the model.
- Arguments longer than ``MAX_ARGUMENT_CHARS`` or nested deeper than ``MAX_ARGUMENT_DEPTH`` are an
  ``error:`` result the model sees, like any malformed call. The depth is found by a linear scan of
  the text before ``json.loads`` runs, so no parser recursion is ever exhausted.
- ``check_deadline`` ends a loop over tool calls at the run's deadline (``agentwake.deadline``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sized
from typing import Any

from agentwake import deadline
from agentwake.errors import DeadlineExceeded

#: the most tool calls one reply may make (models make a handful; more is a runaway or an attack)
MAX_TOOL_CALLS = 64
#: the longest arguments text of one call, in characters (send_message_to_user's 8,000 characters
#: fit many times over, even with every character escaped as ``\\uXXXX``)
MAX_ARGUMENT_CHARS = 65_536
#: the deepest arguments of one call, counted in nested objects/arrays (the result message's limit)
MAX_ARGUMENT_DEPTH = 32

#: a loop over a reply's tool calls (before the cap applies) checks the deadline this often
DEADLINE_CHECK_EVERY = 1024
#: the arguments of a call whose provider-parsed object cannot be encoded back to JSON text (too
#: deep for the encoder): not JSON, so the tool registry answers it with an ``error:`` result
UNENCODABLE_ARGUMENTS = "(arguments that could not be encoded as JSON)"

#: a JSON string literal (escapes included), written so the regex engine never backtracks
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_BRACKETS = re.compile(r"[\[\]{}]")


class ArgumentsRefused(ValueError):
    """A call's arguments cannot be parsed within the bounds; the message says why (for the model)."""


def json_depth(text: str, limit: int = MAX_ARGUMENT_DEPTH) -> int:
    """How deeply the objects/arrays of JSON ``text`` nest, found without parsing it (strings are
    skipped, brackets counted). Stops at ``limit + 1``: the answer is only "within" or "beyond"."""
    if "[" not in text and "{" not in text:
        return 0
    depth = deepest = 0
    for match in _BRACKETS.finditer(_STRING.sub('""', text)):
        if match.group() in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > limit:
                    return deepest
        else:
            depth -= 1
    return deepest


def parse_arguments(text: str, *, max_chars: int = MAX_ARGUMENT_CHARS, max_depth: int = MAX_ARGUMENT_DEPTH) -> Any:
    """A tool call's JSON arguments, parsed within the bounds (empty text is ``{}``).

    Raises ArgumentsRefused saying what is wrong: too long, too deep, not JSON."""
    if not isinstance(text, str):
        raise ArgumentsRefused(f"are not JSON text but {type(text).__name__}")
    if len(text) > max_chars:
        deep = json_depth(text[:max_chars], max_depth) > max_depth  # a scan of what may be scanned
        raise ArgumentsRefused(
            f"are {len(text):,} characters long; at most {max_chars:,} are accepted"
            + (f" (and they nest deeper than {max_depth} levels)" if deep else "")
        )
    if not text.strip():
        return {}
    if json_depth(text, max_depth) > max_depth:
        raise ArgumentsRefused(f"nest deeper than {max_depth} levels; send flatter arguments")
    try:
        return json.loads(text)
    except RecursionError as exc:  # the scan above keeps this from happening; never escape with it
        raise ArgumentsRefused(f"nest deeper than {max_depth} levels; send flatter arguments") from exc
    except ValueError as exc:  # JSONDecodeError, or an integer longer than int_max_str_digits
        raise ArgumentsRefused(f"are not valid JSON ({str(exc)[:200]})") from exc


def too_many_calls(calls: Sized, *, max_calls: int = MAX_TOOL_CALLS) -> str | None:
    """Why a reply with ``calls`` is malformed output, or None when it is within the cap."""
    if len(calls) <= max_calls:
        return None
    return f"the model's reply made {len(calls):,} tool calls; at most {max_calls} are accepted in one reply"


def check_deadline(what: str) -> None:
    """Raise DeadlineExceeded when the run's deadline has passed (``what``: where the loop was)."""
    if deadline.passed():
        raise DeadlineExceeded(f"the run's deadline passed while {what}; a retry continues from the journal")
