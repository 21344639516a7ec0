"""The client SDK: what a business system or a downstream app installs delayq for.

    from delayq.client import DelayqClient, TaskSpec
    from delayq.client.consumer import TaskConsumer     # downstream apps (needs pika)

`delayq.client` itself needs only the `thrift` package. The IDL is `delayq.thrift` beside this
file; `gen/` is its generated Python code (never edited by hand).
"""
from delayq.client.gen.delayq_thrift.ttypes import (BulkAction, BulkRequest, BulkState,  # noqa: F401
                                                    CallbackService, CancelResult, KeyConflict, KeyedResult,
                                                    ReportOutcome, ResultStatus, SubmitOutcome, TaskFilter, TaskSpec,
                                                    TaskStatus)
from delayq.client.scheduler import DelayqClient, closed_by_peer, connect, live_endpoints, parse_endpoint  # noqa: F401
from delayq.client.zkdiscovery import discover  # noqa: F401

__all__ = ["BulkAction", "BulkRequest", "BulkState", "CallbackService", "CancelResult", "DelayqClient", "KeyConflict", "KeyedResult", "ReportOutcome",
           "ResultStatus", "SubmitOutcome", "TaskFilter", "TaskSpec", "TaskStatus", "closed_by_peer", "connect",
           "discover", "live_endpoints", "parse_endpoint"]
