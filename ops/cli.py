"""The `delayq` command: run a node, manage the schema, run the demo.

Exit codes: 0 success, 1 failure (a refused request, a task that did not arrive), 2 usage error,
3 a dependency (MySQL, RabbitMQ, ZooKeeper) is unavailable.
"""
from __future__ import annotations

import contextlib
import gc
import json
import logging
import signal
import sys
import threading

import click

from delayq import options
from delayq.errors import ConfigError, Unavailable
from delayq.ops.common import SECONDS, Commands, load_settings

EXIT_UNAVAILABLE = 3
# The collector's first generation runs once this many more objects were made than freed. At
# Python's 700, a 1000-task submitBatch, which holds a few thousand objects for a moment, set off
# passes on every call; above what one group of submits holds, it runs only as objects pile up.
GC_THRESHOLDS = (50_000, 10, 10)


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {"ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
               "level": record.levelname, "logger": record.name, "msg": record.getMessage(),
               "thread": record.threadName}
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out)


def setup_logging(level: str, fmt: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonFormatter() if fmt == "json" else logging.Formatter(
        "%(asctime)s %(levelname)s %(name)s [%(threadName)s] %(message)s"))
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
    logging.getLogger("pika").setLevel(logging.WARNING)
    # A refused declare on the exchange guard's throwaway channels is how it learns an exchange's
    # type; the node logs what matters itself (delayq.nodes.amqp.exchanges, delayq.nodes.amqp.publisher).
    logging.getLogger("pika.channel").setLevel(logging.ERROR)
    # A connection attempt RabbitMQ refuses is logged by pika as eight ERROR lines and a traceback,
    # every second of an outage; the node's publisher says it in one WARNING a try, with the
    # reason (delayq.nodes.amqp.publisher).
    for noisy in ("pika.adapters.utils.connection_workflow", "pika.adapters.utils.io_services_utils",
                  "pika.adapters.base_connection", "pika.adapters.blocking_connection"):
        logging.getLogger(noisy).setLevel(logging.CRITICAL)
    logging.getLogger("kazoo").setLevel(logging.WARNING)


@click.group(cls=Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="delayq", prog_name="delayq", message="%(prog)s %(version)s")
def main() -> None:
    """delayq: a distributed delayed-task scheduler (Thrift in, MySQL as truth, RabbitMQ out)."""
    # Commands say in one line why a node could not be reached; Thrift's socket logger would say
    # it again for every address it tried.
    logging.getLogger("thrift.transport.TSocket").setLevel(logging.CRITICAL)


@main.command(epilog="\b\nSettings (environment variables, or keys of the --config TOML file):\n\n"
              + "\n\n".join("\b\n" + para for para in options.reference()))
@click.option("--config", "config_file", type=click.Path(dir_okay=False), help="TOML file with settings.")
def node(config_file: str | None) -> None:
    """Run a scheduling node until SIGTERM or SIGINT."""
    from delayq.nodes.main import NodeRuntime
    settings = load_settings(config_file)
    setup_logging(settings.log.level, settings.log.format)
    # The process is this node: its threads take turns at the interpreter this often.
    sys.setswitchinterval(settings.node.switch_interval_us / 1e6)
    try:
        runtime = NodeRuntime(settings)
    except ConfigError as e:
        raise click.UsageError(str(e)) from None
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        runtime.start()
    except ConfigError as e:        # found on starting (a cluster znode not delayq's): as bad as a bad setting
        raise click.UsageError(str(e)) from None
    except Unavailable as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(EXIT_UNAVAILABLE)
    # What the node built to start (modules, engines, connections) lives as long as the process.
    # Frozen, it is left out of the collector's full passes, which otherwise walk all of it while
    # every thread waits (25-50 ms each, several times a minute under load).
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    # Woken every half second, not only by the event: Python runs a signal's handler on the main
    # thread, but Linux may deliver SIGTERM to another thread (it does when the main thread still
    # has a signal pending, as right after a SIGCONT), which only notes it; a main thread asleep
    # on the event would never run the handler, and the node would not stop.
    while not stop.wait(0.5):
        pass
    runtime.stop()


@main.group()
def db() -> None:
    """Create and migrate the schema."""


@db.command("init")
@click.option("--config", "config_file", type=click.Path(dir_okay=False))
@click.option("--shards", type=click.IntRange(1, 4096), default=None,
              help="Logical shards of a new cluster (default: DELAYQ_SHARDS, 64). An existing cluster keeps its count.")
@click.option("--node-account", help="Also create or update this MySQL account for the nodes: read and write "
              "delayq's tables, nothing else (run db init with an admin account).")
@click.option("--node-url-file", type=click.Path(dir_okay=False),
              help="With --node-account: write the nodes' DELAYQ_MYSQL_URL here (mode 0600; its password is kept "
                   "when the file exists).")
def db_init(config_file: str | None, shards: int | None, node_account: str | None, node_url_file: str | None) -> None:
    """Create the database if missing, apply migrations, create the cluster's shards, and with
    --node-account the nodes' own MySQL account. Idempotent."""
    from delayq import accounts, db as dbm, schema
    from delayq.ops.common import PrivateFile
    if bool(node_account) != bool(node_url_file):
        raise click.UsageError("--node-account and --node-url-file go together")
    if node_account:
        try:
            accounts.check_account(node_account)
        except ValueError as e:
            raise click.UsageError(str(e)) from None
    settings = load_settings(config_file)
    setup_logging("WARNING", settings.log.format)
    # Errors end as the `delayq` group says them (an outage 3, an account refused 2). A bad
    # --node-url-file is refused before anything changes.
    with PrivateFile(node_url_file, "--node-url-file") if node_url_file else contextlib.nullcontext() as out:
        database = dbm.database_name(settings.mysql)
        schema.create_database(dbm.make_engine(settings.mysql, database=False), database)
        engine = dbm.make_engine(settings.mysql)
        with dbm.unavailable_on_failure():
            applied = schema.migrate(engine)
            count = schema.init_cluster(engine, shards or settings.scheduling.shards)
            if node_account and node_url_file and out is not None:      # given together (checked above)
                kept = _read_url_password(node_url_file)
                password = accounts.ensure_node_account(engine, database, node_account, kept)
                url = accounts.node_url(settings.mysql.url, node_account, password)
                try:
                    out.write(url)
                except OSError as e:
                    click.echo(url)     # the password was set: say it, or no one will know it
                    click.echo(f"error: could not write {node_url_file} ({e.strerror or e}): the nodes' "
                               "URL is printed above, on stdout", err=True)
                    sys.exit(1)
    click.echo(f"schema: applied {applied}" if applied else "schema: up to date")
    click.echo(f"cluster: {count} shards")
    if node_account:
        click.echo(f"node account: {node_account} (URL in {node_url_file})")


def _read_url_password(path: str) -> str | None:
    from delayq import accounts
    try:
        with open(path, encoding="utf-8") as fh:
            return accounts.password_in(fh.read().strip())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise click.UsageError(f"cannot read {path}: {getattr(e, 'strerror', None) or 'not a URL'}") from None


@db.command("migrate")
@click.option("--config", "config_file", type=click.Path(dir_okay=False))
def db_migrate(config_file: str | None) -> None:
    """Apply pending schema migrations."""
    from delayq import db as dbm, schema
    settings = load_settings(config_file)
    with dbm.unavailable_on_failure():      # its errors end as the `delayq` group says them
        applied = schema.migrate(dbm.make_engine(settings.mysql))
    click.echo(f"schema: applied {applied}" if applied else "schema: up to date")


@main.command()
@click.option("--endpoint", "endpoints", multiple=True,
              help="A node's Thrift endpoint (default: the live nodes found in ZooKeeper).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@click.option("--config", "config_file", type=click.Path(dir_okay=False))
def status(endpoints: tuple[str, ...], as_json: bool, config_file: str | None) -> None:
    """Show the cluster: master, nodes with their shards and DelayQueue sizes, epoch, task counts."""
    from delayq.ops.common import checked_endpoints, run
    from delayq.ops.status import collect, render
    checked_endpoints(endpoints)
    settings = load_settings(config_file)
    setup_logging("ERROR", settings.log.format)
    report = run(lambda: collect(settings, list(endpoints)), as_json)
    # Not sort_keys: shards are listed in numeric order, which sorting as strings would undo.
    click.echo(json.dumps(report, indent=2) if as_json else render(report))


@main.command()
@click.option("--endpoint", "endpoints", multiple=True, default=["127.0.0.1:9090"], show_default=True,
              help="A node's Thrift endpoint (repeat for several).")
@click.option("--tasks", type=click.IntRange(1, 10_000), default=10, show_default=True)
@click.option("--spread-ms", type=click.IntRange(0, 600_000), default=5000, show_default=True,
              help="Due times are spread over this span, starting 1 s from now.")
@click.option("--timeout", "timeout_s", type=SECONDS, default=60.0, show_default=True)
@click.option("--config", "config_file", type=click.Path(dir_okay=False))
def demo(endpoints: tuple[str, ...], tasks: int, spread_ms: int, timeout_s: float, config_file: str | None) -> None:
    """Register the topic `demo`, submit tasks and print them as they fire from RabbitMQ."""
    from delayq.client.demo import run_demo
    settings = load_settings(config_file)
    setup_logging("WARNING", settings.log.format)
    if not run_demo(list(endpoints), settings.amqp.url, tasks, spread_ms, timeout_s):
        sys.exit(1)


def _register_subcommands() -> None:
    from delayq.ops import cluster as cli_cluster
    from delayq.ops.audit import audit
    from delayq.ops.certs import certs
    from delayq.ops.clients import clients
    from delayq.ops.retention import retention
    from delayq.ops.services import services
    from delayq.ops import keys  # noqa: F401 - adds the by-key commands to `delayq tasks`
    from delayq.ops import bulk  # noqa: F401 - adds `delayq tasks bulk`
    from delayq.ops.tasks import purge_cmd, tasks
    from delayq.ops.tenants import tenants
    from delayq.ops.topics import topics
    main.add_command(tasks)
    main.add_command(services)
    main.add_command(topics)
    main.add_command(clients)
    main.add_command(tenants)
    main.add_command(certs)
    main.add_command(audit)
    main.add_command(retention)
    db.add_command(purge_cmd)
    for command in (cli_cluster.drain, cli_cluster.undrain, cli_cluster.pin, cli_cluster.unpin,
                    cli_cluster.rebalance, cli_cluster.intents, cli_cluster.reshard):
        main.add_command(command)


_register_subcommands()

if __name__ == "__main__":
    main()
