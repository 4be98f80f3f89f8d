"""The store's one codec and its one pagination helper, without a table."""

from __future__ import annotations

from typing import Any

from agentwake.domain.models import Task
from agentwake.store.codec import dump_item, from_attr, load_item, to_attr
from agentwake.store.keys import task_key
from agentwake.store.table import pages


def test_plain_values_round_trip_through_attribute_values() -> None:
    # GIVEN every kind of value agentwake stores
    value = {"s": "x", "n": 3, "f": 1.5, "b": True, "none": None, "l": [1, "a"], "m": {"k": [False]}}
    # WHEN encoded and decoded THEN it comes back equal, whole numbers as int
    assert from_attr(to_attr(value)) == value
    assert isinstance(from_attr({"N": "7"}), int) and from_attr({"N": "7.25"}) == 7.25


def test_a_stored_model_loads_back_as_it_was_dumped_json_fields_included() -> None:
    # GIVEN a task with a JSON field (its tool arguments)
    task = Task(task_id="t1", session_id="s1", tool_name="web", tool_args={"q": ["a", 1]})
    # WHEN dumped under its key and loaded again
    item = dump_item(task, *task_key("t1"))
    # THEN the item carries the key and the JSON field as text, and loads back equal
    assert item["pk"] == {"S": "TASK#t1"} and item["sk"] == {"S": "TASK"}
    assert item["tool_args"]["S"].startswith("{")
    assert load_item(Task, item) == task


class _Pages:
    """A Query that answers in pages of two items."""

    def __init__(self, items: list[int]) -> None:
        self.items = items
        self.requests: list[dict[str, Any]] = []

    def __call__(self, **request: Any) -> dict[str, Any]:
        self.requests.append(request)
        start = request.get("ExclusiveStartKey", {"i": 0})["i"]
        resp: dict[str, Any] = {"Items": self.items[start : start + 2]}
        if start + 2 < len(self.items):
            resp["LastEvaluatedKey"] = {"i": start + 2}
        return resp


def test_pages_follows_last_evaluated_key_to_the_end_without_changing_the_request() -> None:
    # GIVEN a Query whose answer takes three pages
    query, request = _Pages([1, 2, 3, 4, 5]), {"TableName": "t"}
    # WHEN every item is asked for
    items = list(pages(query, request))
    # THEN all come back in order, each page asked from where the last one ended
    assert items == [1, 2, 3, 4, 5]
    assert [r.get("ExclusiveStartKey") for r in query.requests] == [None, {"i": 2}, {"i": 4}]
    assert request == {"TableName": "t"}


def test_pages_with_a_limit_is_one_page() -> None:
    # GIVEN a Query with Limit (a history window: the newest N, never more)
    query = _Pages([1, 2, 3, 4, 5])
    # WHEN its items are read THEN only the first page is asked for
    assert list(pages(query, {"TableName": "t", "Limit": 2})) == [1, 2]
    assert len(query.requests) == 1
