"""DynamoDB attribute values to and from plain values and stored models (the one codec).

Written by hand for the kinds agentwake stores (str, bool, numbers, None, lists and maps) so the
wake path never imports boto3's TypeSerializer at cold start.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any, TypeVar

from agentwake.domain.models import _Stored

M = TypeVar("M", bound=_Stored)


def to_attr(value: Any) -> dict[str, Any]:
    """A plain value as a DynamoDB attribute value (what boto3's TypeSerializer does for the kinds
    agentwake stores: str, bool, int, float, None, lists and maps), without importing boto3."""
    if isinstance(value, str):
        return {"S": value}
    if isinstance(value, bool):
        return {"BOOL": value}
    if isinstance(value, int | float | Decimal):
        return {"N": str(value)}
    if value is None:
        return {"NULL": True}
    if isinstance(value, list | tuple):
        return {"L": [to_attr(v) for v in value]}
    if isinstance(value, dict):
        return {"M": {str(k): to_attr(v) for k, v in value.items()}}
    raise TypeError(f"cannot store a {type(value).__name__} in DynamoDB")


def from_attr(attr: dict[str, Any]) -> Any:
    """The inverse of ``to_attr``; numbers come back as int when whole, else float."""
    ((kind, value),) = attr.items()
    if kind == "S":
        return value
    if kind == "N":
        number = Decimal(value)
        return int(number) if number == number.to_integral_value() else float(number)
    if kind == "BOOL":
        return bool(value)
    if kind == "NULL":
        return None
    if kind == "L":
        return [from_attr(v) for v in value]
    if kind == "M":
        return {k: from_attr(v) for k, v in value.items()}
    if kind == "SS":
        return set(value)
    raise TypeError(f"unexpected DynamoDB attribute type {kind}")


def key(pk: str, sk: str) -> dict[str, Any]:
    """The table's primary key as attribute values."""
    return {"pk": {"S": pk}, "sk": {"S": sk}}


def dump_item(model: _Stored, pk: str, sk: str, **extra: Any) -> dict[str, Any]:
    """A stored model as a DynamoDB item under ``pk``/``sk`` (None fields left out; the model's
    ``JSON_FIELDS`` kept as JSON text)."""
    data = model.model_dump(mode="json")
    plain: dict[str, Any] = {"pk": pk, "sk": sk, **extra}
    for name, value in data.items():
        if value is None:
            continue
        plain[name] = json.dumps(value) if name in model.JSON_FIELDS else value
    return {k: to_attr(v) for k, v in plain.items()}


def load_item(cls: type[M], item: dict[str, Any]) -> M:
    """The inverse of ``dump_item``."""
    plain = {k: from_attr(v) for k, v in item.items()}
    for name in cls.JSON_FIELDS:
        if isinstance(plain.get(name), str):
            plain[name] = json.loads(plain[name])
    return cls.model_validate(plain)
