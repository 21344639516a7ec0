"""What `python -m bench.topologies` points the replicated side at, and how it sums a service's CPU
over its members."""
import sys
from pathlib import Path

# The benchmark is not part of the installed package: its modules are tested from the checkout.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.cpu import by_service  # noqa: E402
from bench.measure import Run, service_figures  # noqa: E402
from bench.topologies import replicated_env  # noqa: E402


def test_the_replicated_side_runs_on_every_member_of_the_three_services(monkeypatch):
    monkeypatch.setenv("DELAYQ_BENCH_NODE_ENV", "DELAYQ_CLAIM_LEAD_MS=40")
    env = replicated_env()
    assert env["DELAYQ_TEST_MYSQL"].endswith("@127.0.0.1:3311")
    assert env["DELAYQ_TEST_ZK"] == "127.0.0.1:2281,127.0.0.1:2282,127.0.0.1:2283"
    assert env["DELAYQ_RABBITMQ_TLS_PORT"] == "5691" and env["DELAYQ_BENCH_TOPOLOGY"] == "ha"
    nodes = dict(kv.split("=", 1) for kv in env["DELAYQ_BENCH_NODE_ENV"].split())
    assert nodes == {"DELAYQ_MYSQL_HOSTS": "127.0.0.1:3311,127.0.0.1:3312,127.0.0.1:3313",
                     "DELAYQ_AMQP_HOSTS": "127.0.0.1:5691,127.0.0.1:5692,127.0.0.1:5693",
                     "DELAYQ_CLAIM_LEAD_MS": "40"}       # the caller's own node settings kept


def test_a_service_s_cpu_is_its_members_summed_and_each_member_is_in_the_note(tmp_path):
    used = {"node": 3.0, "consumer": 1.0, "MariaDB 1": 2.0, "MariaDB 2": 0.5, "MariaDB 3": 0.5, "RabbitMQ 1": 1.0}
    assert by_service(used) == {"MariaDB": 3.0, "RabbitMQ": 1.0}
    figs = service_figures(Run(tmp_path, tmp_path, lambda f: None), "steady", used, wall=10.0)
    by_name = {f["figure"]: f for f in figs}
    assert by_name["mariadb_cpu"]["value"] == 30.0 and by_name["mariadb_cpu"]["unit"] == "% of a core"
    assert by_name["mariadb_cpu"]["note"] == "MariaDB 1 20%, MariaDB 2 5%, MariaDB 3 5%"
    assert by_name["rabbitmq_cpu"]["value"] == 10.0
    single = service_figures(Run(tmp_path, tmp_path, lambda f: None), "steady", {"MariaDB": 2.0}, wall=10.0)
    assert single == [{**single[0], "figure": "mariadb_cpu", "value": 20.0}] and "note" not in single[0]
