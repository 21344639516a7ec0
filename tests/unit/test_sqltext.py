"""delayq.store.sqltext writes values into SQL text itself: each literal must be what PyMySQL's own
escaping makes of the same value, and a value it cannot write safely must be refused (pure)."""
from __future__ import annotations

import pytest
from pymysql.converters import escape_item

from delayq.store.sqltext import insert_tasks, literal_id, literal_ids
from delayq.store.values import KeyMode, NewTask

IDS = ["0190abcdef0123456789abcd", "order-42", "a.b:c_d-e", "X"]


def _escaped(value) -> str:
    return escape_item(value, "utf8mb4")


@pytest.mark.parametrize("task_id", IDS)
def test_a_task_id_is_the_literal_pymysql_makes(task_id):
    assert literal_id(task_id) == _escaped(task_id)


def test_a_list_of_ids_is_pymysqls_literals_joined():
    assert literal_ids(IDS) == ",".join(_escaped(i) for i in IDS)


@pytest.mark.parametrize("bad", ["it's", "back\\slash", "100%", "sp ace", "caf\u00e9", "", "new\nline"])
def test_a_value_that_would_need_escaping_is_refused(bad):
    with pytest.raises(ValueError):
        literal_id(bad)
    with pytest.raises(ValueError):
        literal_ids(["ok", bad] if bad else ["ok", "a'b"])
    task = NewTask("t1", bad or "x'y", 0, 1, b"", b"h" * 16, 3, 0, 1, client_id=False)
    with pytest.raises(ValueError):
        insert_tasks([task])


def test_an_insert_writes_every_value_as_pymysql_would_mean_it():
    task = NewTask("t-1", "order.cancel", 7, 1_795_000_000_000, b"\x00'\\\xff", bytes(range(16)), 3, 500,
                   1_794_000_000_000, client_id=False)
    sql = insert_tasks([task])
    values = sql[sql.index("VALUES ") + len("VALUES "):]
    # bytes as hex literals: the same bytes PyMySQL sends as an escaped _binary string
    expected = ",".join([_escaped("t-1"), _escaped("order.cancel"), "7", "1795000000000",
                         "X'" + task.payload.hex() + "'", "X'" + task.spec_hash.hex() + "'", "3", "500",
                         "1794000000000", "1794000000000", "NULL", "NULL", "NULL", "NULL", "NULL", "NULL"])
    assert values == f"({expected})"
    assert bytes.fromhex(task.payload.hex()) == task.payload


def test_a_keyed_insert_writes_the_key_tags_and_trace_context_and_the_hold():
    tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    task = NewTask("t-2", "order.cancel", 7, 5, b"", bytes(16), 3, 500, 4, key="ключ'%".encode(), tags=b"a,b",
                   traceparent=tp)
    values = insert_tasks([task], {"t-2": 3})
    tail = values[values.index("500,4,4,") + len("500,4,4,"):]
    assert tail == f"X'{task.key.hex()}',X'{b'a,b'.hex()}','{tp}',X'{task.key.hex()}',3,0)"
    assert insert_tasks([task]).endswith(f"'{tp}',NULL,NULL,NULL)")
    # The mode is stored for the task that holds its key: KEEP_IF_ACTIVE's rule reads it.
    assert insert_tasks([task._replace(mode=KeyMode.KEEP_IF_ACTIVE)], {"t-2": 3}).endswith(",3,4)")
    with pytest.raises(ValueError):
        insert_tasks([task._replace(traceparent="00-x'")])
