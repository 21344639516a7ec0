"""Service: the object the generated Thrift Processor calls, one method per call of the IDL, each
handing it to the part that serves it, so that a reader (and an editor's jump-to-definition) finds
who answers a call here.

    task calls (cancel, reschedule, get...)  front.handler.Handler
    by key, and listTasks                    front.keycalls.KeyCalls
    services and topic controls              front.topics.TopicCalls
    admin calls (cluster, drain, pin, ...)   front.admin.AdminCalls
    endpoints (any client)                   front.discovery.DiscoveryCalls
    bulk jobs (bulkCount, bulkStart, ...)    front.bulkcalls.BulkCalls
    submit, submitBatch                      front.submits.SubmitBatcher, then front.submitpath.SubmitPath:
                                             the server hands those calls to it directly (front.server),
                                             they never come here

Each part checks the caller's identity and permissions itself (front.access) and maps errors to
the IDL's declared exceptions (front.errors).
"""
from __future__ import annotations

from delayq.client.gen.delayq_thrift import DelayScheduler
from delayq.nodes.front.admin import AdminCalls
from delayq.nodes.front.bulkcalls import BulkCalls
from delayq.nodes.front.discovery import DiscoveryCalls
from delayq.nodes.front.handler import Handler
from delayq.nodes.front.keycalls import KeyCalls
from delayq.nodes.front.topics import TopicCalls


class Service(DelayScheduler.Iface):
    def __init__(self, tasks: Handler, keys: KeyCalls, topics: TopicCalls, admin: AdminCalls, bulk: BulkCalls,
                 discovery: DiscoveryCalls):
        self._tasks, self._keys, self._topics, self._admin, self._bulk = tasks, keys, topics, admin, bulk
        self._discovery = discovery

    # ---- task calls (front.handler.Handler) ----------

    def authenticate(self, token):
        return self._tasks.authenticate(token)

    def cancel(self, taskId):
        return self._tasks.cancel(taskId)

    def reschedule(self, taskId, dueAtMs):
        return self._tasks.reschedule(taskId, dueAtMs)

    def get(self, taskId):
        return self._tasks.get(taskId)

    def reportResult(self, taskId, attempt, status, message):
        return self._tasks.reportResult(taskId, attempt, status, message)

    def touch(self, taskId, attempt, extendMs, progress):
        return self._tasks.touch(taskId, attempt, extendMs, progress)

    # ---- by business key, and listTasks (front.keycalls.KeyCalls) ----------

    def findByKey(self, topic, key, pageToken):
        return self._keys.findByKey(topic, key, pageToken)

    def cancelByKey(self, topic, key):
        return self._keys.cancelByKey(topic, key)

    def rescheduleByKey(self, topic, key, dueAtMs):
        return self._keys.rescheduleByKey(topic, key, dueAtMs)

    def listTasks(self, filter, pageToken, limit):
        return self._keys.listTasks(filter, pageToken, limit)

    # ---- services and topic controls (front.topics.TopicCalls) ----------

    def registerService(self, svc):
        return self._topics.registerService(svc)

    def listServices(self):
        return self._topics.listServices()

    def setTopicControls(self, controls):
        return self._topics.setTopicControls(controls)

    def listTopicControls(self):
        return self._topics.listTopicControls()

    # ---- where the nodes are (front.discovery.DiscoveryCalls) ----------

    def endpoints(self):
        return self._discovery.endpoints()

    # ---- admin calls (front.admin.AdminCalls) ----------

    def cluster(self):
        return self._admin.cluster()

    def drain(self, nodeId, force):
        return self._admin.drain(nodeId, force)

    def undrain(self, nodeId):
        return self._admin.undrain(nodeId)

    def pin(self, shard, nodeId, force):
        return self._admin.pin(shard, nodeId, force)

    def unpin(self, shard):
        return self._admin.unpin(shard)

    def rebalance(self):
        return self._admin.rebalance()

    def intents(self):
        return self._admin.intents()

    def reshard(self, shards):
        return self._admin.reshard(shards)

    def redrive(self, filter):
        return self._admin.redrive(filter)

    def discard(self, taskIds):
        return self._admin.discard(taskIds)

    def addClient(self, name, grants, certificateOnly):
        return self._admin.addClient(name, grants, certificateOnly)

    def grantClient(self, name, grant):
        return self._admin.grantClient(name, grant)

    def revokeClient(self, name, grant):
        return self._admin.revokeClient(name, grant)

    def rotateClient(self, name):
        return self._admin.rotateClient(name)

    def listClients(self):
        return self._admin.listClients()

    # ---- bulk jobs (front.bulkcalls.BulkCalls) ----------

    def bulkCount(self, request):
        return self._bulk.bulkCount(request)

    def bulkStart(self, request):
        return self._bulk.bulkStart(request)

    def bulkGet(self, jobId):
        return self._bulk.bulkGet(jobId)

    def bulkList(self, limit):
        return self._bulk.bulkList(limit)

    def bulkStop(self, jobId):
        return self._bulk.bulkStop(jobId)
