"""A node frozen inside a claim's transaction, holding the locks of its shard and task rows: once its
session expires and its shards move, their tasks fire from the new owners while it is still frozen,
as a RabbitMQ consumer sees them; none is lost, early, or delivered twice. Before the master ended
a departed node's connections, they fired only once the frozen node woke, whatever the host's speed.

How soon after the move they fire is a performance target (1 s p99, 2 s at the latest), kept in
`python -m bench --scenario faults --set faults.faults=claim_pause`, not here: the speed of a shared
CI host moves by half."""
from __future__ import annotations

import signal
import time
import uuid

import pytest
import sqlalchemy.exc

from conftest import Collector, now_ms, wait_until
from delayq import config, db
from delayq.clock import SystemClock
from delayq.client import CallbackService
from delayq.errors import StoreUnavailable
from delayq.store.connections import NodeConnections
from delayq.store.epochs import ShardEpochs
from delayq.testing.process import process_state
from test_cluster import balanced, cluster, owners  # noqa: F401  (cluster: fixture)
from test_handover import PRODUCTION, assert_each_attempt_once_and_none_early, first_deliveries, submit_stream

pytestmark = pytest.mark.integration

FROZEN_S = 10           # as long as the pause seen in production, past the 3 s session
# The node stays frozen at least this long after its shards moved: time for their tasks to fire
# from the new owners many times over, so that firing before it wakes tells the new owners did not
# wait for it on a host of any speed.
FROZEN_AFTER_MOVE_S = 5


def quantile(values: list[int], q: float) -> int:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@pytest.mark.timeout(150)
def test_a_node_frozen_inside_a_claim_holds_up_no_task_of_its_shards_once_they_moved(cluster, tmp_path):
    freeze = tmp_path / "freeze-n3"
    # The production window: every task of the stream is due within it, so it goes to the
    # accepting node's own shards and memory.
    nodes = [cluster(**PRODUCTION), cluster(**PRODUCTION),
             cluster(DELAYQ_FREEZE_IN_CLAIM_FILE=str(freeze), **PRODUCTION)]
    wait_until(lambda: balanced(nodes[0], {"n1", "n2", "n3"}), 15, 0.05, what="three balanced nodes")
    frozen, watcher = nodes[2], nodes[0]
    assert watcher.node_id == "n1" and balanced(watcher, {"n1", "n2", "n3"}).master != frozen.node_id
    topic = f"t.{uuid.uuid4().hex[:10]}"
    with watcher.client() as c:
        c.registerService(CallbackService(topic=topic, ttrMs=0))
    collector = Collector("delayq", topic)
    try:
        # One task every 5 ms for 12 s, all on n3's shards and in its memory.
        due = submit_stream(frozen, topic, now_ms() + 1500, 2400, 5)
        wait_until(lambda: len(collector.messages) >= 100, 15, 0.005, what="the stream to flow")
        freeze.touch()
        wait_until(lambda: process_state(frozen.pid) == "T", 5, 0.001, what="n3 to stop inside a claim")
        frozen_at = now_ms()
        try:
            seen_owner_at = now_ms()
            while frozen.node_id in owners(watcher).values():
                seen_owner_at = now_ms()
                assert seen_owner_at - frozen_at < 15_000, "n3's shards never moved"
                time.sleep(0.02)
            # The move happened after the last look that still showed n3 as an owner.
            moved_at = seen_owner_at
            wake_at = max(frozen_at / 1000 + FROZEN_S, moved_at / 1000 + FROZEN_AFTER_MOVE_S)
            time.sleep(max(0.0, wake_at - time.time()))
        finally:
            frozen.kill(signal.SIGCONT)
            thawed_at = now_ms()

        wait_until(lambda: set(due) <= set(collector.task_ids()), 40, 0.1,
                   what=f"every task ({len(set(due) - set(collector.task_ids()))} missing)")
        assert_each_attempt_once_and_none_early(collector, due)
        first = first_deliveries(collector)
        # A task due from a second before the freeze on could be in the frozen claim, or due while
        # n3 held its shards frozen: it could fire no sooner than the move. (Those due after n3
        # went on are the rejoining node's handover, tests/integration/test_handover.py.)
        held = {t: first[t][0] - max(d, moved_at) for t, d in due.items() if frozen_at - 1000 <= d <= thawed_at}
        late = sorted(held.values())
        print(f"n3 frozen {(thawed_at - frozen_at) / 1000:.1f} s, its shards moved {moved_at - frozen_at} ms after; "
              f"{len(held)} tasks due from a second before the freeze: after the move or their due time "
              f"p50 {quantile(late, 0.5)} ms, p99 {quantile(late, 0.99)} ms, max {late[-1]} ms")
        # Those due by the move fire before n3 wakes: the new owners did not wait for its locks.
        # (The lateness is reported above, not asserted: it measures the host as much as the code.)
        waited = {t: first[t][0] - thawed_at for t, d in due.items()
                  if frozen_at - 1000 <= d <= moved_at and first[t][0] >= thawed_at}
        assert not waited, \
            f"{len(waited)} tasks of the frozen node's shards, due by the move, fired only once it woke " \
            f"{thawed_at - moved_at} ms after the move; the latest (ms after it woke, attempt): " \
            f"{[(ms, first[t][1]) for t, ms in sorted(waited.items(), key=lambda kv: -kv[1])[:8]]}"
    finally:
        collector.close()


def test_a_departed_nodes_transaction_holds_up_the_epoch_write_a_second_at_most_and_not_once_ended(database):
    # As the nodes run: the node account, each connection written down, lock waits bounded.
    settings = config.load({"DELAYQ_MYSQL_URL": database.node_url}).mysql
    frozen, master = db.make_engine(settings), db.make_engine(settings)
    connections = NodeConnections(master, settings)
    for engine, node in ((frozen, "frozen"), (master, "master")):
        connections.register(engine, node)
        db.bound_lock_waits(engine)
    epochs = ShardEpochs(master, SystemClock())
    try:
        held = frozen.connect()
        stuck = held.begin()
        # What a claim holds between its first statement and its commit.
        held.exec_driver_sql("SELECT shard_id FROM job_shard WHERE shard_id = 0 LOCK IN SHARE MODE").all()
        began = time.monotonic()
        with pytest.raises(StoreUnavailable) as refused:
            epochs.grant({0: ("n2@1", 10**6)})
        assert refused.value.code == 1205 and time.monotonic() - began < 2.5, \
            f"the write waited {time.monotonic() - began:.1f} s and ended with {refused.value}"

        assert connections.end(["frozen"]) >= 1
        began = time.monotonic()
        assert epochs.grant({0: ("n2@1", 10**6)}) == 1
        assert time.monotonic() - began < 0.5
        assert epochs.read()[0] == ("n2@1", 10**6)
        with pytest.raises(sqlalchemy.exc.DBAPIError):      # the frozen node, going on, finds it ended
            held.exec_driver_sql("SELECT 1").all()
        stuck.close()
        held.close()
        # Forgotten once ended; the master's own connections are left alone.
        assert connections.end(["frozen"]) == 0
        with master.connect() as conn:
            assert conn.exec_driver_sql("SELECT 1").scalar() == 1
    finally:
        frozen.dispose()
        master.dispose()


def test_a_stopping_node_withdraws_its_connections_and_a_reused_id_is_never_ended(database):
    settings = config.load({"DELAYQ_MYSQL_URL": database.node_url}).mysql
    engine = db.make_engine(settings)
    connections = NodeConnections(engine, settings)
    connections.register(engine, "n1")
    try:
        with engine.connect() as conn:
            mine = conn.exec_driver_sql("SELECT CONNECTION_ID()").scalar()
            server, client = conn.exec_driver_sql(
                "SELECT server, client FROM job_node_connection WHERE node_id = 'n1' AND connection_id = %s",
                (mine,)).one()
            assert client and server.endswith(":3306")
            conn.commit()           # a snapshot of its own for each read below
            connections.forget("n1")
            assert conn.exec_driver_sql("SELECT COUNT(*) FROM job_node_connection WHERE node_id = 'n1'").scalar() == 0
            conn.commit()
            # A row naming this live id from another client: a restarted server gave the id out
            # again, and it is not that row's node's connection.
            conn.exec_driver_sql("INSERT INTO job_node_connection VALUES (%s, %s, 'old', 'elsewhere:1', 0)",
                                 (server, mine))
            conn.commit()
            assert connections.end(["old"]) == 0
            assert conn.exec_driver_sql("SELECT CONNECTION_ID()").scalar() == mine
    finally:
        engine.dispose()
