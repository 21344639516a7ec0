"""What the node's log takes from its libraries (delayq.ops.cli.setup_logging)."""
from __future__ import annotations

import logging

from delayq.ops.cli import setup_logging


def test_pikas_connection_failures_are_left_to_the_nodes_own_warning_and_the_rest_of_pika_still_warns():
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        setup_logging("info", "text")
        for noisy in ("pika.adapters.utils.connection_workflow", "pika.adapters.utils.io_services_utils",
                      "pika.adapters.base_connection", "pika.adapters.blocking_connection"):
            assert not logging.getLogger(noisy).isEnabledFor(logging.ERROR), noisy
        assert logging.getLogger("pika.connection").isEnabledFor(logging.WARNING)
        assert logging.getLogger("delayq.nodes.amqp.publisher").isEnabledFor(logging.WARNING)
        assert logging.getLogger("kazoo.client").isEnabledFor(logging.WARNING)
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
