"""Patches that make the embedded moto server's cost per request independent of what it holds.

Things in moto that grow with everything ever written, and the local stack writes a lot:

1. **model instance tracking** (``BaseModel.__new__``): every model object ever created (each
   DynamoDB item, each copy of one, each SQS message) is appended to a class-level list that only
   ``/moto-api/reset`` empties; it exists for the ``/moto-api/data.json`` dashboard. The embedded
   server does not track them (the health check does not use data.json).
2. **TransactWriteItems' rollback** (``DynamoDBBackend.transact_write_items``): moto deep-copies
   every table a transaction names before it starts, so one wake's commit copies the whole table.
   The replacement below copies only the items the transaction touches and puts exactly those back
   on a cancellation. Otherwise it is moto's own code, line for line.
3. **Query on the primary key** (``Table.query`` → ``Table.all_items``): moto lists *and sorts*
   every item of the table, then keeps those of the queried partition. The patch hands the query
   the queried partition only; index queries and scans keep moto's behaviour.
4. **SQS with many messages** (``Queue.messages``, ``Message.visible``/``delayed``,
   ``SQSBackend.is_message_valid_based_on_retention_period``): every received message recomputed
   *all* the queue's attributes (three scans of the queue, each building two datetimes per message)
   just to read its retention period, so one ReceiveMessage on a queue of 2,500 messages took
   seconds. The patch reads the retention period directly and compares visibility and delay times
   with one clock reading per message (per list for ``Queue.messages``, which every receive and
   count walks). Scans of the queue remain (moto keeps a list), but cheap.
5. **SQS's clock, receipt handles and SendMessage** (``moto.sqs.models.unix_time``/``unix_time_millis``,
   ``Message.mark_received``, ``SQSBackend.change_message_visibility``, ``SQSBackend.send_message``,
   ``Queue.attributes``): moto's SQS computes "now" through datetime objects
   (``utcnow() - utcfromtimestamp(0)``, ~20 µs) for every message on every receive, count and
   send; ``time.time()`` is the same value at a hundredth of the cost (only "now" is replaced).
   ``ChangeMessageVisibility`` found its message by walking the queue and rebuilding each
   message's past handles, so renewing or releasing the holds of a scan of n messages cost n²;
   handles are now indexed as moto issues them, with the queue they were received from (and its
   last purge), and a handle the index does not place in the queue (unknown, deleted, moved to a
   DLQ, purged) goes to moto's own code, which raises what AWS raises. SendMessage read ``ContentBasedDeduplication``
   through the queue's attributes, which count every message; it now reads that one attribute.
   ``GetQueueAttributes`` (``SQSBackend.get_queue_attributes``) computed all of a queue's
   attributes (three walks of its messages) twice for each name asked for and once more: a scan's
   count of three names walked a queue of 10,000 messages 27 times; the attributes are now computed
   once per call.
6. **SQS receive and the server's dispatch at 10,000 messages** (``SQSBackend.receive_message``,
   ``moto.sqs.models.generate_receipt_handle``, ``moto.backends.list_of_moto_modules``): a receive
   listed every visible message of the queue before taking ten, copied the message groups of every
   in-flight message (used by FIFO queues only), deep-copied each message it returned (to filter
   its message attributes, which the filter replaces, never mutates) and drew a receipt handle
   one random letter at a time (185 calls); and the server found the service of every request by
   listing moto's package directory, twice. The receive below walks the queue lazily from a cursor
   past the messages in flight (``_Cursor``) and stops at ``count``, reads the groups for FIFO queues only, copies each returned message shallowly, draws a
   handle of the same 185 letters from one draw of moto's random (one byte a letter); the directory
   is listed once. Otherwise it is moto's own code, line for line. A message's attribute digest
   (``Message.attribute_md5``: each attribute validated, packed and hashed) is computed once and
   reused by the copies a receive returns while their attributes are the values it was computed from.
7. **SQS, one request at a time** (every public method of ``SQSBackend``, ``Queue.wait_for_messages``):
   moto's SQS backend is not thread-safe — a receive copies the queue's set of pending messages
   while another adds to it ("Set changed size during iteration"), a delete rebuilds the message
   list while a send appends to it (the send is lost), two receives can take the same message.
   A DLQ scan receives on several threads, against the threaded server or in-process ``mock_aws``
   alike, so every call into the backend holds one re-entrant lock; a long-polling receive lets go
   of it while it waits for messages (and is woken by a send or a visibility change), as moto's
   own wait does.
8. **moto's responses** (``moto.core.responses.method_names_from_class``, ``SQSResponse.serialized``):
   every request listed its response class's members (``inspect.getmembers``) to find the action's
   method and drew its request id one character at a time (52 draws; now one), and a ReceiveMessage of ten ran moto's generic serializer, which tries each member's
   aliases on each message (most of the server's time in a DLQ scan). The members are listed once
   per class; ReceiveMessage's JSON answer is written directly when its messages hold only text
   (``receive_message_json``: the serializer's members, order and ``json.dumps``), and so is a
   visibility or delete batch whose entries all succeeded (``batch_result_json``); moto's
   serializer writes anything else (binary or list attributes, a failed entry, the query
   protocol, pretty printing).
9. **KMS keys' private keys** (``moto.kms.models.generate_private_key``): moto makes an RSA-2048
   private key for every KMS key it creates, a symmetric one included, and creates one (the
   account's ``alias/aws/dynamodb`` key) with every table that has SSE on, as template.yaml's
   has: ~45 ms of CPU per table, a quarter of provisioning the stack on in-process moto. The key is
   now made when first used (Sign, Verify, GetPublicKey: never, for a symmetric key), the same
   key moto would make; nothing else of the KMS key changes.

Pinned: every patched function is checked against the sha256 of its source in the moto version
the patch was written for. A moto upgrade that changes one of them stops the local stack at start
(``MotoPatchError``, saying which function and what to do) instead of silently running a patch
written for other code.
"""

from __future__ import annotations

import contextvars
import copy
import hashlib
import inspect
import logging
import textwrap
import threading
import weakref
from collections.abc import Callable, Mapping
from typing import Any

logger = logging.getLogger(__name__)

#: the moto release the patches were written against (pyproject's `local` extra pins it)
MOTO_VERSION = "5.2.5"

#: dotted name -> sha256 of the function's source (textwrap.dedent(inspect.getsource(f)))
PINNED: dict[str, str] = {
    "moto.core.common_models.BaseModel.__new__": ("122d2cd5b02113e59b0f471e3f73a6f9b11ac81aa7be77db488e30dcd269b993"),
    "moto.dynamodb.models.DynamoDBBackend.transact_write_items": (
        "0b5c3b73cdccf3268b7266a17c96e2f7e675bd20fe3f28326a1e95ffa38cf8fe"
    ),
    "moto.dynamodb.models.table.Table.query": ("c08e16587862d4cab6982bb4749693a7727345c3f10084d73f139d8bc8093a15"),
    "moto.sqs.models.Message.visible": ("1abcc7861b9a4c5b0c3be942fe350954284299399d4b2f6db6161b685cfc74d9"),
    "moto.sqs.models.Message.delayed": ("815515980283b0b02234403fceaaa7381e8ddbb3cfa7f2b29a7c8ac3c53ff2eb"),
    "moto.sqs.models.Queue.messages": ("67cdc0178b71ab4cd5a2187379cdac934c0439d55d90c59882c36aebd40b14aa"),
    "moto.sqs.models.SQSBackend.is_message_valid_based_on_retention_period": (
        "9c430561cf6d7cb41f2a0c147bd697a94b4ca23265bc0dea6253a16ea103c493"
    ),
    "moto.dynamodb.models.table.Table.all_items": ("2091a7dc1699504cd07211a2971cbfaa082b82c419b4a36ca59dab20fac685f0"),
    "moto.sqs.models.unix_time": "f0576ec9e5f586e54a3646c4bee8f05589aed07b2aecf0e1943ffcd2585c3960",
    "moto.sqs.models.unix_time_millis": "7a37e1337d02962edf1a7396cbc8f3872997b0d7cbb22d50e53876019c11dbad",
    "moto.sqs.models.Message.mark_received": "b9ce92d7af8b52555c34cb258c89c3d0c3810b2fdf7e51068ac35fb2d889c186",
    "moto.sqs.models.SQSBackend.change_message_visibility": (
        "9c89525e42fd0d37a036c00c21b1a5441d11da541e4902f48ad1ceb5d7b0e915"
    ),
    "moto.sqs.models.SQSBackend.send_message": "fd7abfe52e85d6434a4c8ab0398c27889a0627e7c423a10c31fac9bca68e3f5b",
    "moto.sqs.models.Queue.attributes": "ddf03540564891aa86180cfebb4a8b4eca6fbb0ba4a8f09c5ffdada0038ff8a0",
    "moto.sqs.models.SQSBackend.get_queue_attributes": (
        "727161e889b12278a21745a1ede407a15d6f302bbd2bbb1a916503353c438e24"
    ),
    # the guard lets go of the lock only where receive_message waits: in wait_for_messages
    "moto.sqs.models.Queue.wait_for_messages": "c055a098ee139d2ff71353b6c4c0947df7dc6990fe00e7d9b41cb9e43e87f287",
    "moto.sqs.models.SQSBackend.receive_message": "79cac41881a077fd1837ee15783296df9545361d05925dc9b5f71c2134d26730",
    "moto.sqs.models.generate_receipt_handle": "10853f98152c8dab0bee2f888f4153d41f62e377a4af7d8559904af4a8ac90ad",
    "moto.sqs.models.Message.attribute_md5": "1308123bfeb5dd1edb113afc0781a04a23363a9ab6aa238bad7918bea5228c6b",
    "moto.backends.list_of_moto_modules": "4f741a10b06500e840c3aaa1b4f02706e6f2bfbababc0e8a2a7b9c9d0e8957dc",
    "moto.core.utils.method_names_from_class": "9dbac89d082b655fee902c450e69de9dbadf9699ad06411298494984b55138c3",
    "moto.core.responses.BaseResponse.serialized": "c3e692950911d9041f64bc9e6c490ffea7d3b9982e0354fede58f6fd4f2a712f",
    "moto.core.serialize.BaseJSONSerializer._serialize_body": "51d7377e676822fc34d170d761ebed64e62feb45fe6a1b412c736abc25cb5ddf",
    "moto.sqs.responses.SQSResponse.receive_message": "600506ac3ac885c250bdb9bef770a5d1c016373e8af866890f1562148e603a61",
    "moto.sqs.responses.SQSResponse.change_message_visibility_batch": "104fb18ea070a8017914afa39ceba427d2c8f5c1fcd94f9b30466628df9b261e",
    "moto.utilities.aws_headers.gen_amzn_requestid_long": "e651941c2107cdc2b174be191284ea6604b1a738cd5e4ddbf7e6244060b8f01c",
    "moto.sqs.responses.SQSResponse.delete_message_batch": "e76347c7a51435b5d364159c8d8e3ce486a438713723ea46a24c5b6d2ab4496e",
    "moto.kms.utils.generate_private_key": "cdf2b67aac1401be485253470c133ba6b0be6479a3930db103ba9b991dd64bae",
}


class MotoPatchError(RuntimeError):
    """The installed moto is not the one the local stack's patches were written for."""


_lock = threading.Lock()
_applied = False
#: (table, hash key) of the primary-key Query running in this thread, if any
_QUERY_PARTITION: contextvars.ContextVar[tuple[Any, Any] | None] = contextvars.ContextVar(
    "agentwake_query_partition", default=None
)
#: every SQS receipt handle moto issued -> its message (a handle stays valid while its message lives)
_HANDLES: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()
#: inside SendMessage (which reads one attribute of the queue)
_SENDING: contextvars.ContextVar[bool] = contextvars.ContextVar("agentwake_sqs_sending", default=False)
#: inside GetQueueAttributes: each queue's attributes (by id), computed once for the call
_QUEUE_ATTRIBUTES: contextvars.ContextVar[dict[int, dict[str, Any]] | None] = contextvars.ContextVar(
    "agentwake_sqs_queue_attributes", default=None
)
#: held by every call into moto's SQS backend (re-entrant: backend methods call one another); a
#: long-polling receive waits on it, released, and sends and visibility changes wake it
SQS_GUARD = threading.Condition(threading.RLock())


def _resolve(dotted: str) -> Any:
    """``package.module.Class.function`` -> the function, as defined (not bound, not inherited)."""
    import importlib

    parts = dotted.split(".")
    for split in range(len(parts) - 1, 0, -1):
        module_name = ".".join(parts[:split])
        try:
            obj: Any = importlib.import_module(module_name)
        except ImportError:
            continue
        for attribute in parts[split:]:
            obj = obj.__dict__[attribute] if isinstance(obj, type) else getattr(obj, attribute)
        return obj
    raise ImportError(dotted)


def source_digest(function: Callable[..., Any]) -> str:
    """sha256 of a function's source, the way ``PINNED`` records it."""
    if isinstance(function, property):
        function = function.fget  # type: ignore[assignment]
    function = inspect.unwrap(getattr(function, "__agentwake_original__", function))
    return hashlib.sha256(textwrap.dedent(inspect.getsource(function)).encode()).hexdigest()


def installed_moto_version() -> str:
    from importlib.metadata import version

    return version("moto")


def check(pins: Mapping[str, str] | None = None) -> None:
    """Raise ``MotoPatchError`` unless every pinned function has the pinned source."""
    pins = PINNED if pins is None else pins
    installed = installed_moto_version()
    changed: list[str] = []
    for dotted, digest in pins.items():
        try:
            function = _resolve(dotted)
            found = source_digest(function)
        except (ImportError, AttributeError, KeyError, OSError, TypeError) as exc:
            changed.append(f"{dotted} (not found: {exc})")
            continue
        if found != digest:
            changed.append(dotted)
    if changed:
        raise MotoPatchError(
            f"moto {installed} is not the moto the local stack's patches were written for ({MOTO_VERSION}): "
            f"{', '.join(changed)} changed. Install the pinned version (pip install -e '.[local]', which "
            f"pins moto=={MOTO_VERSION}), or re-check infra/agentwake_local/moto_patches.py against the new moto "
            "and update PINNED."
        )


def apply() -> None:
    """Check the pins, then patch moto in this process (idempotent). Raises ``MotoPatchError``."""
    global _applied
    with _lock:
        if _applied:
            return
        check()
        _untrack_model_instances()
        _transactions_copy_only_what_they_touch()
        _primary_key_queries_read_one_partition()
        _sqs_cost_independent_of_queue_length()
        _sqs_cheap_clock_handles_and_sends()
        _sqs_receive_stops_at_count()
        _responses_without_per_request_reflection()
        _kms_private_keys_on_first_use()
        _sqs_one_request_at_a_time()  # last: it wraps the patched methods too
        _applied = True
        logger.debug(
            "moto %s patched: no instance tracking, item-level rollback, partition queries, cheap and guarded SQS",
            MOTO_VERSION,
        )


def applied() -> bool:
    return _applied


# --------------------------------------------------------------------------------------------
# 1. no model instance tracking


def _untrack_model_instances() -> None:
    from moto.core import common_models
    from moto.core.model_instances import reset_model_data

    original = common_models.BaseModel.__new__

    def __new__(cls: type, *args: Any, **kwargs: Any) -> Any:
        return object.__new__(cls)

    __new__.__agentwake_original__ = original  # type: ignore[attr-defined]
    common_models.BaseModel.__new__ = __new__  # type: ignore[assignment,method-assign]
    reset_model_data()  # forget what was tracked before


# --------------------------------------------------------------------------------------------
# 2. TransactWriteItems rolls back the items it touched, not whole tables


class _TouchedItems:
    """The items a transaction is about to change, as they were before (None: absent)."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.before: dict[tuple[str, Any, Any], Any] = {}
        self.streams: dict[str, int] = {}

    def remember(self, table_name: str, key: dict[str, Any]) -> None:
        table = self.backend.get_table(table_name)
        hash_key, range_key = self.backend.get_keys_value(table, key)
        slot = (table.name, hash_key, range_key)
        if slot in self.before:
            return
        self.before[slot] = copy.deepcopy(table.get_item(hash_key, range_key))
        if table.stream_shard is not None and table.name not in self.streams:
            self.streams[table.name] = len(table.stream_shard.items)

    def restore(self) -> None:
        for (table_name, hash_key, range_key), item in self.before.items():
            table = self.backend.tables.get(table_name)
            if table is None:
                continue
            if range_key is not None:
                partition = table.items.get(hash_key)
                if item is None:
                    if partition is not None:
                        partition.pop(range_key, None)
                        if not partition:
                            table.items.pop(hash_key, None)
                else:
                    table.items[hash_key][range_key] = item
            elif item is None:
                table.items.pop(hash_key, None)
            else:
                table.items[hash_key] = item
        for table_name, length in self.streams.items():
            table = self.backend.tables.get(table_name)
            if table is not None and table.stream_shard is not None:
                del table.stream_shard.items[length:]


def _transactions_copy_only_what_they_touch() -> None:
    from moto.dynamodb import models
    from moto.dynamodb.exceptions import (
        ConditionalCheckFailed,
        MockValidationException,
        MultipleTransactionsException,
        TooManyTransactionsException,
        TransactionCanceledException,
        TransactWriteSingleOpException,
    )

    get_filter = models.get_filter_expression
    original = models.DynamoDBBackend.transact_write_items

    def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
        if len(transact_items) > 100:
            raise TooManyTransactionsException()
        # moto copies every named table here; only the items the transaction touches are kept
        touched = _TouchedItems(self)

        target_items: set[tuple[str, str]] = set()

        def check_unicity(table_name: str, key: dict[str, Any]) -> None:
            item = (str(table_name), str(dict(sorted(key.items()))))
            if item in target_items:
                raise MultipleTransactionsException()
            target_items.add(item)

        errors: list[Any] = []
        for item in transact_items:
            original_item: dict[str, Any] | None = None
            if len(list(item.keys())) > 1:
                raise TransactWriteSingleOpException

            try:
                op_type, op = next(iter(item.items()))
                if op_type not in {"ConditionCheck", "Put", "Delete", "Update"}:
                    raise ValueError("Unsupported transaction operation")

                table_name = op["TableName"]
                condition_expression = op.get("ConditionExpression")
                expression_attribute_names = op.get("ExpressionAttributeNames")
                expression_attribute_values = op.get("ExpressionAttributeValues")
                return_values_on_condition_check_failure = op.get("ReturnValuesOnConditionCheckFailure")

                if op_type == "Put":
                    attrs = op["Item"]
                    table = self.get_table(table_name)
                    key = {table.hash_key_attr: attrs[table.hash_key_attr]}
                    if table.range_key_attr is not None:
                        key[table.range_key_attr] = attrs[table.range_key_attr]
                else:
                    key = op["Key"]

                check_unicity(table_name, key)
                if op_type != "ConditionCheck":
                    touched.remember(table_name, key)

                current = self.get_item(table_name, key)
                if condition_expression is not None:
                    condition_op = get_filter(
                        condition_expression,
                        expression_attribute_names,
                        expression_attribute_values,
                    )
                    if not condition_op.expr(current):
                        if return_values_on_condition_check_failure == "ALL_OLD" and current:
                            original_item = current.to_json()["Attributes"]
                        raise ConditionalCheckFailed(item=original_item)

                if op_type == "Put":
                    attrs = op["Item"]
                    self.put_item(
                        table_name,
                        attrs,
                        condition_expression=condition_expression,
                        expression_attribute_names=expression_attribute_names,
                        expression_attribute_values=expression_attribute_values,
                    )
                elif op_type == "Delete":
                    self.delete_item(
                        table_name,
                        key,
                        condition_expression=condition_expression,
                        expression_attribute_names=expression_attribute_names,
                        expression_attribute_values=expression_attribute_values,
                    )
                elif op_type == "Update":
                    update_expression = op["UpdateExpression"]
                    self.update_item(
                        table_name,
                        key,
                        update_expression=update_expression,
                        condition_expression=condition_expression,
                        expression_attribute_names=expression_attribute_names,
                        expression_attribute_values=expression_attribute_values,
                    )
                errors.append((None, None, None))
            except (MultipleTransactionsException, MockValidationException):
                touched.restore()
                raise
            except ConditionalCheckFailed as e:
                errors.append(("ConditionalCheckFailed", str(e.message), original_item))
            except Exception as e:  # as moto: any other failure cancels the transaction with its reason
                errors.append((type(e).__name__, str(e), original_item))

        if any(code is not None for code, _, _ in errors):
            touched.restore()
            raise TransactionCanceledException(errors)

    transact_write_items.__agentwake_original__ = original  # type: ignore[attr-defined]
    models.DynamoDBBackend.transact_write_items = transact_write_items  # type: ignore[method-assign]


# --------------------------------------------------------------------------------------------
# 3. a primary-key Query reads its partition, not the whole table


def _primary_key_queries_read_one_partition() -> None:
    from moto.dynamodb.models.table import Table

    original_query = Table.query
    original_all_items = Table.all_items
    signature = inspect.signature(original_query)

    def query(self: Any, *args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(self, *args, **kwargs)
        hash_key = bound.arguments.get("hash_key")
        if bound.arguments.get("index_name") or hash_key is None:
            return original_query(self, *args, **kwargs)
        token = _QUERY_PARTITION.set((self, hash_key))
        try:
            return original_query(self, *args, **kwargs)
        finally:
            _QUERY_PARTITION.reset(token)

    def all_items(self: Any) -> list[Any]:
        partition = _QUERY_PARTITION.get()
        if partition is None or partition[0] is not self:
            return original_all_items(self)
        bucket = self.items.get(partition[1])  # .get: never create an empty partition
        if bucket is None:
            return []
        if not self.range_key_attr:
            return [bucket]
        # the caller keeps the items of this hash key and sorts them by range key itself
        return list(bucket.values())

    query.__agentwake_original__ = original_query  # type: ignore[attr-defined]
    all_items.__agentwake_original__ = original_all_items  # type: ignore[attr-defined]
    Table.query = query  # type: ignore[method-assign]
    Table.all_items = all_items  # type: ignore[method-assign]


# --------------------------------------------------------------------------------------------
# 4. SQS: no full attribute recomputation per message, one cheap clock reading per check


def _sqs_cost_independent_of_queue_length() -> None:
    import time

    from moto.sqs.models import Message, Queue, SQSBackend

    original_messages = Queue.messages
    original_visible = Message.visible
    original_delayed = Message.delayed
    original_retention = SQSBackend.is_message_valid_based_on_retention_period

    def visible(self: Any) -> bool:
        return bool(time.time() * 1000.0 > self.visible_at)

    def delayed(self: Any) -> bool:
        return bool(time.time() * 1000.0 < self.delayed_until)

    def is_message_valid_based_on_retention_period(self: Any, queue_name: str, message: Any) -> bool:
        retention_period = int(self.get_queue(queue_name).message_retention_period)
        return bool(retention_period + message.sent_timestamp / 1000 > time.time())

    def messages(self: Any) -> list[Any]:
        # every receive and every count lists the visible messages: one clock reading for the list,
        # the two comparisons inline (a receive on a queue of 10,000 spent 9 ms on the two properties)
        now = time.time() * 1000.0
        return [m for m in self._messages if now > m.visible_at and not now < m.delayed_until]

    messages.__agentwake_original__ = original_messages.fget  # type: ignore[attr-defined]
    Queue.messages = property(messages)  # type: ignore[method-assign,assignment]
    visible.__agentwake_original__ = original_visible.fget  # type: ignore[attr-defined]
    delayed.__agentwake_original__ = original_delayed.fget  # type: ignore[attr-defined]
    is_message_valid_based_on_retention_period.__agentwake_original__ = original_retention  # type: ignore[attr-defined]
    Message.visible = property(visible)  # type: ignore[method-assign,assignment]
    Message.delayed = property(delayed)  # type: ignore[method-assign,assignment]
    SQSBackend.is_message_valid_based_on_retention_period = is_message_valid_based_on_retention_period  # type: ignore[method-assign]


# --------------------------------------------------------------------------------------------
# 5. SQS: a cheap "now", receipt handles found by index, SendMessage reads one queue attribute


def _sqs_cheap_clock_handles_and_sends() -> None:
    import time

    from moto.sqs import models
    from moto.sqs.exceptions import InvalidParameterValue

    original_unix_time = models.unix_time
    original_unix_time_millis = models.unix_time_millis

    def unix_time(dt: Any = None) -> float:
        return time.time() if dt is None else float(original_unix_time(dt))

    def unix_time_millis(dt: Any = None) -> float:
        return time.time() * 1000.0 if dt is None else float(original_unix_time_millis(dt))

    original_mark_received = models.Message.mark_received

    def mark_received(self: Any, visibility_timeout: int | None = None) -> None:
        original_mark_received(self, visibility_timeout)
        _HANDLES[self.receipt_handle] = self

    original_change = models.SQSBackend.change_message_visibility

    def change_message_visibility(self: Any, queue_name: str, receipt_handle: str, visibility_timeout: int) -> None:
        queue = self.get_queue(queue_name)
        message = _HANDLES.get(receipt_handle)
        home = getattr(message, "_agentwake_home", None)  # (queue, its last purge) when received (patch 6)
        if (
            home is None
            or home[0] is not queue
            or home[1] != queue.last_purged_at
            or receipt_handle in queue.deleted_messages
        ):
            # not received from this queue since its last purge, moved to its DLQ, or deleted
            _Cursor.reset(queue)
            return original_change(self, queue_name, receipt_handle, visibility_timeout)  # type: ignore[no-any-return]
        # moto's own checks and effects, without the walk over the queue
        given = unix_time_millis() + int(visibility_timeout) * 1000
        if given - message.sent_timestamp > 43200 * 1000:
            raise InvalidParameterValue(
                f"Value {visibility_timeout} for parameter VisibilityTimeout is invalid. Reason: Total "
                "VisibilityTimeout for the message is beyond the limit [43200 seconds]"
            )
        message.change_visibility(visibility_timeout)
        _Cursor.changed(queue, message)
        if message.visible and message in queue.pending_messages:
            queue.pending_messages.remove(message)
        return None

    original_send = models.SQSBackend.send_message
    original_attributes: Any = models.Queue.__dict__["attributes"]  # the property object

    def attributes(self: Any) -> dict[str, Any]:
        if _SENDING.get():
            # SendMessage only reads ContentBasedDeduplication here: no need to count the queue
            if not self.fifo_queue:  # moto lists the attribute for FIFO queues only
                return {}
            return {"ContentBasedDeduplication": str(bool(self.content_based_deduplication)).lower()}
        once = _QUEUE_ATTRIBUTES.get()
        if once is None:
            return original_attributes.fget(self)  # type: ignore[no-any-return]
        found = once.get(id(self))
        if found is None:
            found = once[id(self)] = original_attributes.fget(self)
        return found

    original_get_attributes = models.SQSBackend.get_queue_attributes

    def get_queue_attributes(self: Any, queue_name: str, attribute_names: list[str]) -> dict[str, Any]:
        # moto reads queue.attributes (every count: three walks of the messages) twice per name, plus once
        token = _QUEUE_ATTRIBUTES.set({})
        try:
            return original_get_attributes(self, queue_name, attribute_names)  # type: ignore[no-any-return]
        finally:
            _QUEUE_ATTRIBUTES.reset(token)

    def send_message(self: Any, *args: Any, **kwargs: Any) -> Any:
        token = _SENDING.set(True)
        try:
            return original_send(self, *args, **kwargs)
        finally:
            _SENDING.reset(token)

    unix_time.__agentwake_original__ = original_unix_time  # type: ignore[attr-defined]
    unix_time_millis.__agentwake_original__ = original_unix_time_millis  # type: ignore[attr-defined]
    mark_received.__agentwake_original__ = original_mark_received  # type: ignore[attr-defined]
    change_message_visibility.__agentwake_original__ = original_change  # type: ignore[attr-defined]
    send_message.__agentwake_original__ = original_send  # type: ignore[attr-defined]
    get_queue_attributes.__agentwake_original__ = original_get_attributes  # type: ignore[attr-defined]
    attributes.__agentwake_original__ = original_attributes.fget  # type: ignore[attr-defined]
    models.unix_time = unix_time  # type: ignore[assignment]
    models.unix_time_millis = unix_time_millis  # type: ignore[assignment]
    models.SQSBackend.send_message = send_message  # type: ignore[method-assign]
    models.SQSBackend.get_queue_attributes = get_queue_attributes  # type: ignore[method-assign]
    models.Queue.attributes = property(attributes)  # type: ignore[assignment,method-assign]
    models.Message.mark_received = mark_received  # type: ignore[method-assign]
    models.SQSBackend.change_message_visibility = change_message_visibility  # type: ignore[method-assign]


# --------------------------------------------------------------------------------------------
# 6. SQS: a receive walks the queue until it has ``count``; the server lists moto's modules once


class _Cursor:
    """Where a queue's receives start: every message before ``index`` in the queue's list was in
    flight or delayed when a receive passed it, and none of them can be received before ``earliest``
    (ms). A receive after that time, a list moto replaced (a delete, a purge), a message moved to a
    DLQ, or a visibility change the handle index could not place starts again from the front; a
    visibility change it placed lowers ``earliest``. So a scan of n messages walks each about once,
    not n/10 times."""

    __slots__ = ("earliest", "index", "messages")

    def __init__(self, messages: list[Any]) -> None:
        self.messages = messages
        self.index = 0
        self.earliest = float("inf")

    @classmethod
    def of(cls, queue: Any, now: float) -> _Cursor:
        cursor: _Cursor | None = queue.__dict__.get("_agentwake_cursor")
        if cursor is None or cursor.messages is not queue._messages or now >= cursor.earliest:
            cursor = queue._agentwake_cursor = cls(queue._messages)
        return cursor

    @staticmethod
    def reset(queue: Any) -> None:
        queue.__dict__.pop("_agentwake_cursor", None)

    @staticmethod
    def changed(queue: Any, message: Any) -> None:
        cursor: _Cursor | None = queue.__dict__.get("_agentwake_cursor")
        if cursor is not None:
            cursor.earliest = min(cursor.earliest, max(message.visible_at, message.delayed_until))

    def passed(self, index: int, message: Any) -> None:
        self.index = index + 1
        self.earliest = min(self.earliest, max(message.visible_at, message.delayed_until))


def _sqs_receive_stops_at_count() -> None:
    import string
    import time

    from moto import backends
    from moto.moto_api._internal import mock_random
    from moto.sqs import models

    original_modules = backends.list_of_moto_modules
    modules = tuple(original_modules())

    def list_of_moto_modules() -> tuple[str, ...]:
        return modules

    original_handle = models.generate_receipt_handle

    # each of 256 byte values -> a letter (a-v one draw in 9.8, w-z one in 10.7: a handle is opaque)
    letters = bytes.maketrans(bytes(range(256)), bytes(ord(string.ascii_lowercase[b % 26]) for b in range(256)))

    def generate_receipt_handle() -> str:
        # 185 letters from one draw of moto's (seedable) random: 185 draws cost 40 µs a handle
        return mock_random.randbytes(185).translate(letters).decode("ascii")

    original_receive = models.SQSBackend.receive_message
    filter_attributes = models._filter_message_attributes

    def visible_now(queue: Any) -> Any:
        """What queue.messages lists (patch 4), lazily, from the queue's cursor on (``_Cursor``)."""
        now = time.time() * 1000.0
        cursor = _Cursor.of(queue, now)
        messages = queue._messages
        advancing = True
        for i in range(cursor.index, len(messages)):
            message = messages[i]
            if now > message.visible_at and not now < message.delayed_until:
                advancing = False  # it may be skipped (a FIFO group, the DLQ): the cursor stays here
                yield message
            elif advancing:
                cursor.passed(i, message)

    def receive_message(
        self: Any,
        queue_name: str,
        count: int,
        wait_seconds_timeout: int,
        visibility_timeout: int,
        message_attribute_names: list[str] | None = None,
    ) -> list[Any]:
        if message_attribute_names is None:
            message_attribute_names = []
        queue = self.get_queue(queue_name)
        result: list[Any] = []
        previous_result_count = len(result)

        polling_end = models.unix_time() + wait_seconds_timeout
        # moto copies the groups of every pending message; only a FIFO queue reads them
        currently_pending_groups = copy.deepcopy(queue.pending_message_groups) if queue.fifo_queue else set()

        while True:
            if result or (wait_seconds_timeout and models.unix_time() > polling_end):
                break

            messages_to_dlq: list[Any] = []

            for message in visible_now(queue):
                if message in queue.pending_messages:
                    queue.pending_messages.remove(message)
                    if queue.fifo_queue:
                        currently_pending_groups = copy.deepcopy(queue.pending_message_groups)

                if message.group_id and queue.fifo_queue and message.group_id in currently_pending_groups:
                    continue

                if (
                    queue.dead_letter_queue is not None
                    and queue.redrive_policy
                    and message.approximate_receive_count >= queue.redrive_policy["maxReceiveCount"]
                ):
                    messages_to_dlq.append(message)
                    continue

                queue.pending_messages.add(message)
                message.mark_received(visibility_timeout=visibility_timeout)
                # where its handles are valid: ChangeMessageVisibility checks this, not the whole queue
                message._agentwake_home = (queue, queue.last_purged_at)
                # a shallow copy: the filter replaces the copy's message_attributes, never mutates them
                # (the copy shares the message's attribute digest: attribute_md5 below)
                message.__dict__.setdefault("_agentwake_md5", [None])
                message_copy = copy.copy(message)
                filter_attributes(message_copy, message_attribute_names)
                if not self.is_message_valid_based_on_retention_period(queue_name, message):
                    break
                result.append(message_copy)
                if len(result) >= count:
                    break

            for message in messages_to_dlq:
                message._agentwake_home = None
                queue._messages.remove(message)
                _Cursor.reset(queue)  # the positions moved
                queue.dead_letter_queue.add_message(message)

            if previous_result_count == len(result):
                if wait_seconds_timeout == 0:
                    break

                queue.wait_for_messages(1)
                continue

            previous_result_count = len(result)

        return result

    list_of_moto_modules.__agentwake_original__ = original_modules  # type: ignore[attr-defined]
    original_attribute_md5: Any = models.Message.__dict__["attribute_md5"]  # the property object

    def attribute_md5(self: Any) -> str:
        # moto validates, packs and hashes every attribute of every message it returns, on every
        # receive. A message's attributes never change once sent, and a received copy holds the same
        # attribute values (the filter picks, never copies them) and shares its message's holder: the
        # digest is reused while the attributes are the very values it was computed from
        attributes = self.message_attributes
        holder = self.__dict__.get("_agentwake_md5")
        if holder is not None and holder[0] is not None:
            computed_from, digest = holder[0]
            if len(computed_from) == len(attributes) and all(attributes.get(k) is v for k, v in computed_from):
                return digest  # type: ignore[no-any-return]
        digest = original_attribute_md5.fget(self)
        if holder is None:
            holder = self.__dict__["_agentwake_md5"] = [None]
        holder[0] = (tuple(attributes.items()), digest)
        return digest  # type: ignore[no-any-return]

    attribute_md5.__agentwake_original__ = original_attribute_md5.fget  # type: ignore[attr-defined]
    models.Message.attribute_md5 = property(attribute_md5)  # type: ignore[assignment,method-assign]
    generate_receipt_handle.__agentwake_original__ = original_handle  # type: ignore[attr-defined]
    receive_message.__agentwake_original__ = original_receive  # type: ignore[attr-defined]
    backends.list_of_moto_modules = list_of_moto_modules  # type: ignore[assignment]
    models.generate_receipt_handle = generate_receipt_handle
    models.SQSBackend.receive_message = receive_message  # type: ignore[method-assign]


# --------------------------------------------------------------------------------------------
# 7. SQS: one request at a time inside the backend; a long poll waits with the guard let go

#: backend calls after which a waiting receive may find a visible message
_SQS_WAKING = frozenset(
    {"send_message", "send_message_batch", "change_message_visibility", "change_message_visibility_batch"}
)


def _guarded(function: Callable[..., Any], *, wakes: bool) -> Callable[..., Any]:
    import functools

    @functools.wraps(function)  # keeps __agentwake_original__ of an already patched method
    def call(*args: Any, **kwargs: Any) -> Any:
        with SQS_GUARD:
            answer = function(*args, **kwargs)
            if wakes:
                SQS_GUARD.notify_all()
            return answer

    return call


def _sqs_one_request_at_a_time() -> None:
    from moto.sqs.models import Queue, SQSBackend

    original_wait = Queue.wait_for_messages

    def wait_for_messages(self: Any, timeout: int) -> None:
        # called by receive_message, which holds the guard: wait() lets go of it (every level of
        # the re-entrant lock) until a send or visibility change notifies, or the timeout. Not
        # wait_for(messages): messages that are there but cannot be received (a FIFO group in
        # flight, past retention) would make it return at once, holding the guard, and the receive
        # loop would spin with every other SQS call (and, on the server, every request) waiting
        with SQS_GUARD:
            SQS_GUARD.wait(timeout=timeout)

    for name, function in list(vars(SQSBackend).items()):
        if not name.startswith("_") and inspect.isfunction(function):
            setattr(SQSBackend, name, _guarded(function, wakes=name in _SQS_WAKING))
    wait_for_messages.__agentwake_original__ = original_wait  # type: ignore[attr-defined]
    Queue.wait_for_messages = wait_for_messages  # type: ignore[method-assign]


# --------------------------------------------------------------------------------------------
# 8. responses: the action's method found without listing the class; ReceiveMessage's JSON written directly

#: the members of a received message, in the order of botocore's Message shape (moto's serializer's order)
_MESSAGE_MEMBERS = (
    "MessageId",
    "ReceiptHandle",
    "MD5OfBody",
    "Body",
    "Attributes",
    "MD5OfMessageAttributes",
    "MessageAttributes",
)
_MESSAGE_MEMBERS_SET = frozenset(_MESSAGE_MEMBERS)
_MAPS = frozenset({"Attributes", "MessageAttributes"})


def receive_message_json(result: Any) -> str | None:
    """The JSON body moto's serializer writes for ReceiveMessage's ``result`` (what
    ``SQSResponse.receive_message`` builds), or None when ``result`` holds anything but text:
    binary or list message attributes, a member moto did not set before — those go to moto's
    serializer. Same members, same order, same ``json.dumps``; tested against the serializer."""
    import json

    if type(result) is not dict:
        return None
    if not result:
        return "{}"
    messages = result.get("Messages")
    if len(result) != 1 or type(messages) is not list:
        return None
    out = []
    for message in messages:
        if type(message) is not dict or not message.keys() <= _MESSAGE_MEMBERS_SET:
            return None
        shaped: dict[str, Any] = {}
        for name in _MESSAGE_MEMBERS:
            value = message.get(name)
            if value is None:
                continue
            if name in _MAPS:
                if type(value) is not dict:
                    return None
                if name == "Attributes":
                    if not all(type(v) is str for v in value.values()):
                        return None
                    value = dict(value)
                else:
                    shaped_attributes = {}
                    for key, attribute in value.items():
                        if (
                            type(attribute) is not dict
                            or attribute.keys() != {"DataType", "StringValue"}
                            or type(attribute["StringValue"]) is not str
                            or type(attribute["DataType"]) is not str
                        ):
                            return None
                        shaped_attributes[key] = {
                            "StringValue": attribute["StringValue"],
                            "DataType": attribute["DataType"],
                        }
                    value = shaped_attributes
            elif type(value) is not str:
                return None
            shaped[name] = value
        out.append(shaped)
    return json.dumps({"Messages": out})


def batch_result_json(result: Any) -> str | None:
    """The JSON body moto's serializer writes for a ChangeMessageVisibilityBatch or DeleteMessageBatch
    ``result`` where every entry succeeded, or None (a failure goes to moto's serializer)."""
    import json

    if type(result) is not dict or result.keys() != {"Successful", "Failed"} or result["Failed"] != []:
        return None
    successful = result["Successful"]
    if type(successful) is not list:
        return None
    for entry in successful:
        if type(entry) is not dict or entry.keys() != {"Id"} or type(entry["Id"]) is not str:
            return None
    return json.dumps({"Successful": [{"Id": entry["Id"]} for entry in successful], "Failed": []})


#: the answers written directly (the JSON protocol), by action
_WRITERS: dict[str, Callable[[Any], str | None]] = {
    "ReceiveMessage": receive_message_json,
    "ChangeMessageVisibilityBatch": batch_result_json,
    "DeleteMessageBatch": batch_result_json,
}


def _responses_without_per_request_reflection() -> None:
    import string

    from moto.core import responses, utils
    from moto.moto_api._internal import mock_random
    from moto.sqs.responses import SQSResponse

    original_names = utils.method_names_from_class
    names: dict[type, list[str]] = {}

    def method_names_from_class(clazz: Any) -> list[str]:
        # every request listed its response class's members (inspect.getmembers, ~0.4 ms); a
        # class's methods do not change while the server runs
        found = names.get(clazz)
        if found is None:
            found = names[clazz] = original_names(clazz)
        return list(found)

    original_request_id = responses.gen_amzn_requestid_long
    alphanumeric = string.ascii_letters + string.digits
    symbols = bytes.maketrans(bytes(range(256)), bytes(ord(alphanumeric[b % 62]) for b in range(256)))

    def gen_amzn_requestid_long(headerdict: dict[str, Any] | None = None) -> str:
        # moto's: 52 draws of one letter or digit each (a tenth of a ReceiveMessage's time); here one draw
        request_id = mock_random.randbytes(52).translate(symbols).decode("ascii")
        if headerdict is not None and isinstance(headerdict, dict):
            headerdict.update({"x-amzn-requestid": request_id})
        return request_id

    original_serialized = responses.BaseResponse.serialized

    def serialized(self: Any, action_result: Any) -> Any:
        # moto's serializer walks the Message shape member by member, trying each member's aliases
        # on each message: 7 ms of a ReceiveMessage of ten. The JSON protocol's answer to a receive
        # or a batch is written directly when it holds only text (_WRITERS), else by moto
        writer = _WRITERS.get(self._get_action()) if type(action_result) is responses.ActionResult else None
        if writer is not None:
            service_model = responses.get_service_model(self.boto3_service_name)
            if self.determine_response_protocol(service_model) == "json" and not responses.settings.PRETTIFY_RESPONSES:
                body = writer(action_result.result)
                if body is not None:
                    version = service_model.metadata.get("jsonVersion", "1.0")
                    headers = {"Content-Type": f"application/x-amz-json-{version}", **self.response_headers}
                    return 200, headers, body
        return original_serialized(self, action_result)

    gen_amzn_requestid_long.__agentwake_original__ = original_request_id  # type: ignore[attr-defined]
    responses.gen_amzn_requestid_long = gen_amzn_requestid_long
    method_names_from_class.__agentwake_original__ = original_names  # type: ignore[attr-defined]
    serialized.__agentwake_original__ = original_serialized  # type: ignore[attr-defined]
    responses.method_names_from_class = method_names_from_class  # type: ignore[assignment]
    SQSResponse.serialized = serialized  # type: ignore[method-assign]


# --------------------------------------------------------------------------------------------
# 9. a KMS key's private key is made when first used


_MAKING_KEY = threading.Lock()


class _PrivateKeyOnFirstUse:
    """What ``generate_private_key(key_spec)`` returns, made by it on the first use of the key."""

    def __init__(self, make: Callable[[str], Any], key_spec: str) -> None:
        self._make, self._key_spec, self._key = make, key_spec, None

    def made(self) -> bool:
        return self._key is not None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # our own fields (not yet set while copy or pickle rebuild us)
            raise AttributeError(name)
        with _MAKING_KEY:  # one key, even if two threads use it first at once
            if self._key is None:
                self._key = self._make(self._key_spec)
        return getattr(self._key, name)


def _kms_private_keys_on_first_use() -> None:
    from moto.kms import models, utils

    original = utils.generate_private_key

    def generate_private_key(key_spec: str) -> Any:
        return _PrivateKeyOnFirstUse(original, key_spec)

    generate_private_key.__agentwake_original__ = original  # type: ignore[attr-defined]
    models.generate_private_key = generate_private_key
