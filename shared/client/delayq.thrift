// delayq's Thrift service: TBinaryProtocol over TFramedTransport, default port 9090.
//
// Regenerate the Python code (committed in shared/client/gen/, the package delayq.client.gen) after any change with:
//   thrift --gen py -out shared/client/gen shared/client/delayq.thrift
// (Debian package thrift-compiler, 0.17.)

namespace py delayq_thrift

enum TaskStatus {
  DELAY = 0,      // waiting for its due time
  READY = 1,      // dispatched to RabbitMQ, waiting for a result
  RUNNING = 2,    // the consumer said it started
  FINISHED = 3,
  FAILED = 4,
  CANCELLED = 5,
}

enum CancelResult {
  CANCELLED = 1,           // it will not fire
  ALREADY_DISPATCHED = 2,  // too late: it fired (or finished) already. An attempt still running is
                           // told by its next touch, and the task is then not retried
  NOT_FOUND = 3,
}

enum ResultStatus {
  SUCCESS = 1,   // done: the task is FINISHED
  RETRY = 2,     // failed, try again after the service's backoff (FAILED after the last retry)
  FATAL = 3,     // failed, do not retry: the task is FAILED
  STARTED = 4,   // the consumer began work: READY -> RUNNING (the time-to-run keeps running)
}

enum ReportOutcome {
  APPLIED = 1,   // the report changed the task
  STALE = 2,     // it names an attempt that is not the current one, or the task is final: ignored
}

// What a submit does when a live task of its topic holds the same key (docs/clients.md, "Keys").
// Every mode but ALLOW makes the new task hold the key: at most one live task of a topic holds a key.
enum KeyConflict {
  ALLOW = 0,                     // no dedup: tasks may share the key (they do not hold it)
  REJECT = 1,                    // DEDUPLICATED: the holder is answered, nothing is written
  REPLACE = 2,                   // debounce: a holder that has not fired is cancelled, this one inserted (REPLACED)
  REPLACE_PAYLOAD_KEEP_DUE = 3,  // a holder that has not fired gets this payload, keeps its due time (REPLACED)
  KEEP_IF_ACTIVE = 4,            // a holder that has not fired is kept (DEDUPLICATED); one that fired: a new one waits
}

enum SubmitOutcome {
  CREATED = 1,        // this task was written
  REPLACED = 2,       // a waiting task of the key was replaced; taskId is the one that will fire
  DEDUPLICATED = 3,   // nothing written: taskId is the live task of the key (or this id, submitted before)
}

struct TaskSpec {
  1: required string topic,
  2: optional string taskId,     // client-chosen id: makes submit idempotent
  3: optional i64 delayMs,       // due = the node's clock at receipt + delayMs
  4: optional i64 dueAtMs,       // due = this epoch-ms instant (past = now)
  5: optional binary payload,
  6: optional i32 maxRetries,    // default: the service's
  7: optional i32 ttrMs,         // time-to-run; default: the service's
  8: optional string key,        // business key: up to 255 bytes of UTF-8, no control characters
  9: optional list<string> tags, // up to 8, each 1-64 bytes of UTF-8, no comma or control characters
  10: optional string traceparent,          // W3C trace context, passed on as a message header
  11: optional KeyConflict onKeyConflict,   // default ALLOW; needs a key
  12: optional i64 maxDebounceMs,           // REPLACE: due at most this long after the chain's first submit
}

struct TaskRef {
  1: required string taskId,
  2: required i64 dueAtMs,
  3: required bool created,      // false: nothing new was written (the same task id before, or a dedup)
  4: optional SubmitOutcome outcome,   // set by nodes that know keys
}

struct Attempt {
  1: required i32 attempt,
  2: required string nodeId,
  // When the broker got it; unset for an attempt never recorded as dispatched (MISFIRED, UNRECORDED).
  3: optional i64 dispatchedAtMs,
  // SUCCESS, RETRY, FATAL (the consumer's); TIMEOUT (no result within the time-to-run);
  // UNROUTABLE (no queue bound); MISFIRED (past the misfire threshold, never sent); CONFIRMED (the
  // broker's confirm, for ttr 0); UNCONFIRMED (published but the confirm was lost: it may have
  // reached a queue, and went again as a new attempt); UNRECORDED (claimed, but its node stopped
  // before any publish was recorded; timed out and sent again). Unset while pending.
  4: optional string result,
  5: optional i64 resultAtMs,
  6: optional string message,
  // The last progress a touch stored for this attempt (up to 1024 bytes), unset if none.
  7: optional binary progress,
  // The attempt in flight only: when its time-to-run runs out, epoch ms on MySQL's clock (a touch
  // moves it later).
  8: optional i64 deadlineMs,
  // The attempt in flight only: when a cancel was asked while it ran (touch answers cancelled;
  // the task is not retried).
  9: optional i64 cancelRequestedAtMs,
}

struct TaskInfo {
  1: required string taskId,
  2: required string topic,
  3: required TaskStatus status,
  4: required i32 attempt,       // dispatches made so far
  5: required i64 dueAtMs,
  6: required i32 shardId,
  7: required i32 maxRetries,
  8: required i32 ttrMs,
  9: required i64 createdAtMs,
  10: required i64 updatedAtMs,
  11: optional binary payload,
  12: required list<Attempt> attempts,
  13: optional string key,
  14: optional list<string> tags,
  15: optional string traceparent,
  // An ended task's: how it ended, as kept with it ("cancelled", "cancelled by key", "cancelled by
  // bulk job ID: REASON", "replaced by ID", "cancelled while it ran", or the message of the result
  // that ended it). Unset for a live task and for one that ended without a message.
  16: optional string message,
}

// A task as findByKey and listTasks show it.
struct TaskSummary {
  1: required string taskId,
  2: required string topic,
  3: required TaskStatus status,
  4: required i32 attempt,
  5: required i64 dueAtMs,
  6: required i64 createdAtMs,
  7: optional string key,
  8: optional list<string> tags,
}

// One page; nextPageToken (opaque, valid for the same query only) is unset on the last page.
struct TaskPage {
  1: required list<TaskSummary> tasks,
  2: optional string nextPageToken,
}

// Which tasks listTasks shows: a topic's, narrowed by each field set. Listed by due time.
struct TaskFilter {
  1: required string topic,
  2: optional TaskStatus status,     // unset: live and ended
  3: optional string keyPrefix,
  4: optional string tag,
  5: optional i64 dueFromMs,         // due at or after
  6: optional i64 dueBeforeMs,       // due before
}

enum KeyedResult {
  CANCELLED = 1,           // cancelByKey: it will not fire
  RESCHEDULED = 2,         // rescheduleByKey: it fires at dueAtMs, never at its old time
  ALREADY_DISPATCHED = 3,  // too late: it fired first (it runs, or ran, at its old time)
}

struct KeyedOutcome {
  1: required string taskId,
  2: required KeyedResult result,
  3: required i64 dueAtMs,           // when it fires (RESCHEDULED), or was due
}

// Per live task of the key, newest first; more: the key has more tasks to change than one call
// handles (1,000): call again, and it goes on with those (of such a key, a call takes first the
// tasks still to change, then the others as room is left).
struct KeyedOutcomes {
  1: required list<KeyedOutcome> tasks,
  2: required bool more,
}

// touch's answer.
struct TouchResult {
  // A cancel was asked while this attempt ran: stop the work. Whatever the attempt then reports
  // but SUCCESS ends the task CANCELLED (no retry, no dead letter).
  1: required bool cancelled,
  // When the attempt's time-to-run now runs out, epoch ms on MySQL's clock.
  2: required i64 deadlineMs,
}

struct CallbackService {
  1: required string topic,
  2: optional string exchange,            // default: the node's DELAYQ_EXCHANGE
  3: optional string routingKey,          // default: the topic
  4: optional i32 maxRetries = 3,
  5: optional string backoff = "exponential",   // fixed | exponential (with jitter)
  6: optional i32 retryBackoffMs = 1000,
  7: optional i32 retryBackoffMaxMs = 300000,
  8: optional i32 ttrMs = 60000,          // 0: no result expected, the task finishes at the broker's confirm
  9: optional bool enabled = true,
  10: optional string deadLetterExchange,
  11: optional i64 misfireThresholdMs,     // unset: never a misfire
  12: optional string misfirePolicy = "fire",  // fire | fail
}

// A topic's flow controls. In setTopicControls an unset field keeps its value; 0 clears a limit.
struct TopicControls {
  1: required string topic,
  // Tasks per second fired across the cluster (split between nodes by their share of the shards).
  2: optional double maxFireRate,
  // Tasks that may fire at once above the rate; default maxFireRate / 20, at least 1.
  3: optional i32 fireBurst,
  // Attempts dispatched and not yet reported (READY or RUNNING), across the cluster.
  4: optional i32 maxInFlight,
  // Nothing of the topic fires while paused; its tasks stay DELAY (cancel and reschedule work).
  // On resume, late tasks fire at the node's catch-up rate, under the service's misfire policy.
  5: optional bool paused,
  // The topic's share of a node's dispatch when tasks of several topics are due (1-1000; default 1).
  6: optional i32 weight,
  // The tenant whose quotas the topic's submits count against; read only here (`delayq tenants`).
  7: optional string tenant,
  // Read only: the topic's attempts in flight (READY, RUNNING) across the cluster, in listTopicControls.
  8: optional i32 inFlight,
}

struct NodeInfo {
  1: required string nodeId,
  2: required string endpoint,
  3: required i32 shardCount,
  4: required i32 queueSize,
  5: required bool master,
  // This node's system clock minus MySQL's, in ms, at its last check (positive: ahead). Due times
  // follow MySQL's clock whatever it is; unset until the node could read MySQL's clock.
  6: optional i64 clockOffsetMs,
  // Topics whose tasks this node holds back because their service's exchange is unusable (a
  // fanout exchange, no permission...): topic -> why. They stay DELAY and fire once it is fixed.
  7: optional map<string, string> heldTopics,
}

// Where a client reaches the cluster: its name and the Thrift endpoint (host:port) each live node
// advertises. What discovery needs and nothing more (ClusterInfo, admin's only, says the rest).
struct Endpoints {
  1: required string cluster,
  2: required list<string> endpoints,
}

struct ClusterInfo {
  1: required string cluster,
  2: required i32 shardCount,
  3: required i64 epoch,
  4: optional string master,
  5: required list<NodeInfo> nodes,
  6: required map<i32, string> assignment,
}

// What operators asked of the cluster's layout (admin calls drain, pin, reshard; `delayq intents`).
struct Intents {
  1: required list<string> drained,        // nodes that own no shard
  2: required map<i32, string> pinned,     // shard -> the node it stays on
  3: optional i32 reshardTo,               // a reshard in progress: its shard count
}

struct ReshardStatus {
  1: required i32 fromShards,
  2: required i32 toShards,
  3: required bool running,                // running on the node that answered
  4: required i64 moved,                   // tasks moved by that run so far
  5: optional string error,                // why that run stopped before the end (answered once; the next call resumes it)
  6: optional bool started,                // this call started (or resumed) the run
}

// Which FAILED tasks to send again: those of a topic (due from sinceMs, before untilMs), or by id.
struct RedriveFilter {
  1: optional string topic,
  2: optional i64 sinceMs,
  3: optional i64 untilMs,
  4: optional list<string> taskIds,        // at most 500
  5: optional string afterTaskId,          // only tasks with ids after this one: the last call's lastTaskId
                                           // ("" on a first call that pages: see RedriveResult.more)
}

// A task submitted with onKeyConflict other than ALLOW comes back holding its key under that mode;
// while another live task holds the key, it stays FAILED and is listed in keyHeld (docs/operations.md).
struct RedriveResult {
  1: required i32 redriven,                // back to DELAY, due now, with a fresh set of retries
  2: required bool more,                   // more match: call again, with afterTaskId = lastTaskId (a call
                                           // without afterTaskId is told of more only when it redrove some)
  3: optional map<string, string> keyHeld, // left FAILED: task id -> the live task holding its key
  4: optional string lastTaskId,           // the last task this call read (redriven or left FAILED)
}

enum BulkAction {
  CANCEL = 1,              // DELAY tasks: cancelled
  RESCHEDULE = 2,          // DELAY tasks: moved by shiftMs, or to dueAtMs
  REDRIVE = 3,             // FAILED tasks: back to DELAY, due now, with a fresh set of retries
}

enum BulkState {
  RUNNING = 1,
  DONE = 2,
  STOPPED = 3,             // by bulkStop: `changed` is final
  FAILED = 4,              // see error
}

// A bulk job: its action on one topic's tasks that match the filter when it is created (a cancel
// or reschedule acts on DELAY tasks, a redrive on FAILED ones; filter.status, if set, must be that).
struct BulkRequest {
  1: required BulkAction action,
  2: required TaskFilter filter,
  3: required string reason,               // why, 1-255 characters: kept with the job and audited
  4: optional i64 shiftMs,                 // reschedule: each task moves by this much (either way); one
                                           // it would take past the horizon when its batch runs is skipped
  5: optional i64 dueAtMs,                 // reschedule: every task moves to this instant (within the horizon)
  6: optional i32 opsPerSecond,            // default: DELAYQ_BULK_RATE; 1 to 100000
  7: optional i64 maxTasks,                // changes at most this many: the count the operator was shown
}

struct BulkJob {
  1: required string jobId,
  2: required BulkAction action,
  3: required TaskFilter filter,
  4: required string reason,
  5: required BulkState state,
  6: required i64 total,                   // tasks it counted when created (at most maxTasks): it changes no more
  7: required i64 changed,                 // tasks it changed so far
  8: required i64 skipped,                 // once DONE: counted, but fired, ended or changed before their batch,
                                           // or (shiftMs) its new due time past the horizon then: left as it was
                                           // (a redrive: also those left FAILED, their key held by another live task)
  9: required i32 opsPerSecond,
  10: required string createdBy,
  11: required i64 createdAtMs,
  12: optional i64 finishedAtMs,
  13: optional string runningOn,           // the node that holds it now
  14: optional string error,
  15: optional i64 shiftMs,
  16: optional i64 dueAtMs,
}

struct Grant {
  1: required string permission,           // submit | cancel | read | report | admin
  2: required string pattern,              // a topic, `*` for any run of characters
}

struct ClientInfo {
  1: required string name,
  2: required bool hasToken,               // false: certificate only, or revoked
  3: required bool revoked,
  4: required list<Grant> grants,
  5: optional string tenant,
  6: required i64 updatedAtMs,
}

exception InvalidTask {
  1: required string field,
  2: required string reason,
  3: optional i32 index,        // position in a submitBatch
}

exception InvalidService {
  1: required string field,
  2: required string reason,
}

// An admin call's argument is wrong: names the argument and why (e.g. the members, the shard range).
exception InvalidRequest {
  1: required string field,
  2: required string reason,
}

// No enabled callback service for the topic: none registered, or (disabled set) one that is
// disabled, which takes no new tasks until it is enabled again.
exception UnknownTopic {
  1: required string topic,
  2: optional bool disabled,
}

exception Conflict {
  1: required string taskId,
  2: required string reason,
}

exception NotFound {
  1: required string taskId,
}

// The call needs a client identity this connection does not have: call authenticate with a
// valid token first, or connect with a client certificate of a registered client. Also raised
// when the client was revoked or its token rotated since it authenticated.
exception Unauthenticated {
  1: required string reason,
}

// The client lacks a permission. `topic` is the topic it named in the call itself, or "" when the
// client holds the permission on no topic at all. (A task of a topic the client may not see is
// NotFound, never Forbidden: no call tells a client which other topics or tasks exist.)
exception Forbidden {
  1: required string permission,   // submit | cancel | read | report | admin
  2: required string topic,
}

// A submit over one of its tenant's quotas; nothing of the call was written. quota: pending (live
// tasks), submitRate (tasks/s), horizon (ms ahead), payloadSize (bytes).
exception QuotaExceeded {
  1: required string tenant,
  2: required string quota,
  3: required i64 limit,
  4: optional i32 index,        // position in a submitBatch, for horizon and payloadSize
}

// A touch of an attempt that is no longer the task's running one: it timed out (and may have
// been dispatched again), or the task ended. Stop the work: its result will be ignored.
exception StaleAttempt {
  1: required string taskId,
  2: required i32 attempt,
  3: required string reason,
}

// Retriable: MySQL, RabbitMQ or ZooKeeper is down. Retry, on this node or another.
exception Unavailable {
  1: required string reason,
}

service DelayScheduler {
  // Runs the rest of this connection's calls as the token's client; returns the client's name.
  // A connection made with a client certificate is its client already (no token needed).
  string authenticate(1: string token)
    throws (5: Unauthenticated unauthenticated),

  TaskRef submit(1: TaskSpec task)
    throws (1: InvalidTask invalid, 2: UnknownTopic unknownTopic, 3: Conflict conflict, 4: Unavailable unavailable,
    5: Unauthenticated unauthenticated, 6: Forbidden forbidden, 7: QuotaExceeded quota),

  // All or nothing: one bad task refuses the whole batch.
  list<TaskRef> submitBatch(1: list<TaskSpec> tasks)
    throws (1: InvalidTask invalid, 2: UnknownTopic unknownTopic, 3: Conflict conflict, 4: Unavailable unavailable,
    5: Unauthenticated unauthenticated, 6: Forbidden forbidden, 7: QuotaExceeded quota),

  CancelResult cancel(1: string taskId)
    throws (1: InvalidTask invalid, 4: Unavailable unavailable,
    5: Unauthenticated unauthenticated, 6: Forbidden forbidden),

  // Only a task that has not fired (DELAY) can be rescheduled.
  TaskRef reschedule(1: string taskId, 2: i64 dueAtMs)
    throws (1: InvalidTask invalid, 2: NotFound notFound, 3: Conflict conflict, 4: Unavailable unavailable,
    5: Unauthenticated unauthenticated, 6: Forbidden forbidden),

  TaskInfo get(1: string taskId)
    throws (1: InvalidTask invalid, 2: NotFound notFound, 4: Unavailable unavailable,
    5: Unauthenticated unauthenticated, 6: Forbidden forbidden),

  // ---- by business key (read: findByKey, listTasks; cancel: cancelByKey, rescheduleByKey) -----
  // The topic's tasks of the key, live and ended, newest first.
  TaskPage findByKey(1: string topic, 2: string key, 3: string pageToken)
    throws (1: InvalidTask invalid, 4: Unavailable unavailable,
    5: Unauthenticated unauthenticated, 6: Forbidden forbidden),

  // Cancels every live task of the key that has not fired; says what happened to each.
  KeyedOutcomes cancelByKey(1: string topic, 2: string key)
    throws (1: InvalidTask invalid, 4: Unavailable unavailable,
    5: Unauthenticated unauthenticated, 6: Forbidden forbidden),

  // Moves every live task of the key that has not fired to dueAtMs; says what happened to each.
  KeyedOutcomes rescheduleByKey(1: string topic, 2: string key, 3: i64 dueAtMs)
    throws (1: InvalidTask invalid, 4: Unavailable unavailable,
    5: Unauthenticated unauthenticated, 6: Forbidden forbidden),

  // A topic's tasks matching the filter, by due time (then task id), a page at a time (at most 500).
  TaskPage listTasks(1: TaskFilter filter, 2: string pageToken, 3: i32 limit)
    throws (1: InvalidTask invalid, 4: Unavailable unavailable,
    5: Unauthenticated unauthenticated, 6: Forbidden forbidden),

  // Creates the topic's service, or REPLACES it whole: every field left unset takes its default
  // (retries, backoff, time-to-run, dead-letter exchange...), not the value registered before.
  // To change one setting, read it with listServices and send it back changed (`delayq services
  // update` does that). Refused with InvalidService when an exchange cannot be published to.
  void registerService(1: CallbackService svc)
    throws (1: InvalidService invalid, 4: Unavailable unavailable,
    5: Unauthenticated unauthenticated, 6: Forbidden forbidden),

  list<CallbackService> listServices()
    throws (4: Unavailable unavailable,
    5: Unauthenticated unauthenticated, 6: Forbidden forbidden),

  ReportOutcome reportResult(1: string taskId, 2: i32 attempt, 3: ResultStatus status, 4: string message)
    throws (1: InvalidTask invalid, 2: NotFound notFound, 4: Unavailable unavailable,
    5: Unauthenticated unauthenticated, 6: Forbidden forbidden),

  // A heartbeat of a running attempt (permission: report, like reportResult): moves its deadline
  // to at least now + extendMs (0 to 3,600,000; never earlier) and, when progress is set, stores
  // it (up to 1024 bytes; `get` shows it). The answer says whether a cancel was asked meanwhile.
  TouchResult touch(1: string taskId, 2: i32 attempt, 3: i64 extendMs, 4: binary progress)
    throws (1: InvalidTask invalid, 2: NotFound notFound, 3: StaleAttempt stale, 4: Unavailable unavailable,
    5: Unauthenticated unauthenticated, 6: Forbidden forbidden),

  // Changes a topic's flow controls (admin); returns them as they now are. Nodes apply a change
  // within a second.
  TopicControls setTopicControls(1: TopicControls controls)
    throws (1: InvalidService invalid, 2: UnknownTopic unknownTopic, 4: Unavailable unavailable,
    5: Unauthenticated unauthenticated, 6: Forbidden forbidden),

  // The controls of every topic the client may read (admins: all).
  list<TopicControls> listTopicControls()
    throws (4: Unavailable unavailable,
    5: Unauthenticated unauthenticated, 6: Forbidden forbidden),

  // The live nodes' endpoints, for a client that was given one or a few of them to find the rest
  // (and to find them again when those it knows stop answering). Any authenticated client.
  Endpoints endpoints()
    throws (4: Unavailable unavailable, 5: Unauthenticated unauthenticated),

  ClusterInfo cluster()
    throws (4: Unavailable unavailable,
    5: Unauthenticated unauthenticated, 6: Forbidden forbidden),

  // ---- admin: the cluster's layout ------------------------------------------------------------
  // Each records the intent in ZooKeeper and returns the intents as recorded; the master applies
  // them within a moment (cluster() shows the assignment). force: for a node that is not a member yet.
  Intents drain(1: string nodeId, 2: bool force)
    throws (1: InvalidRequest invalid, 4: Unavailable unavailable, 5: Unauthenticated unauthenticated,
    6: Forbidden forbidden),
  Intents undrain(1: string nodeId)
    throws (1: InvalidRequest invalid, 4: Unavailable unavailable, 5: Unauthenticated unauthenticated,
    6: Forbidden forbidden),
  Intents pin(1: i32 shard, 2: string nodeId, 3: bool force)
    throws (1: InvalidRequest invalid, 4: Unavailable unavailable, 5: Unauthenticated unauthenticated,
    6: Forbidden forbidden),
  Intents unpin(1: i32 shard)
    throws (1: InvalidRequest invalid, 4: Unavailable unavailable, 5: Unauthenticated unauthenticated,
    6: Forbidden forbidden),
  // A fresh balanced assignment, ignoring where the shards are now (as `delayq rebalance`).
  Intents rebalance()
    throws (1: InvalidRequest invalid, 4: Unavailable unavailable, 5: Unauthenticated unauthenticated,
    6: Forbidden forbidden),
  Intents intents()
    throws (1: InvalidRequest invalid, 4: Unavailable unavailable, 5: Unauthenticated unauthenticated,
    6: Forbidden forbidden),

  // Starts (or resumes) changing the shard count online, on the node that answers, and returns at
  // once; call again with the same count for its progress.
  ReshardStatus reshard(1: i32 shards)
    throws (1: InvalidRequest invalid, 4: Unavailable unavailable, 5: Unauthenticated unauthenticated,
    6: Forbidden forbidden),

  // Sends FAILED tasks again, up to 5,000 per call (`more`: call again with afterTaskId = lastTaskId).
  // A task that held its key comes back holding it, or stays FAILED (keyHeld) while another live task holds it.
  RedriveResult redrive(1: RedriveFilter filter)
    throws (1: InvalidRequest invalid, 4: Unavailable unavailable, 5: Unauthenticated unauthenticated,
    6: Forbidden forbidden),
  // Deletes FAILED tasks (at most 500 ids) from the archive with their attempts: they are no longer
  // listed as dead letters nor can be redriven. Answers how many were deleted (ids that name no
  // FAILED task are left alone).
  i32 discard(1: list<string> taskIds)
    throws (1: InvalidRequest invalid, 4: Unavailable unavailable, 5: Unauthenticated unauthenticated,
    6: Forbidden forbidden),

  // ---- bulk jobs: admin, or for cancel and reschedule `cancel` on the topic (docs/security.md) -----
  // How many tasks the request would change now; nothing is written. InvalidRequest on `filter`:
  // it matches more tasks than MySQL counts within 3 s (narrow it: a job for each part of a due range).
  i64 bulkCount(1: BulkRequest request)
    throws (1: InvalidRequest invalid, 4: Unavailable unavailable, 5: Unauthenticated unauthenticated,
    6: Forbidden forbidden),
  // Creates the job and returns at once; a node of the cluster runs it (another one if that node dies).
  // Counts first, as bulkCount does.
  BulkJob bulkStart(1: BulkRequest request)
    throws (1: InvalidRequest invalid, 4: Unavailable unavailable, 5: Unauthenticated unauthenticated,
    6: Forbidden forbidden),
  BulkJob bulkGet(1: string jobId)
    throws (1: InvalidRequest invalid, 4: Unavailable unavailable, 5: Unauthenticated unauthenticated,
    6: Forbidden forbidden),
  // The newest jobs first (at most 100), of the topics the client may read.
  list<BulkJob> bulkList(1: i32 limit)
    throws (1: InvalidRequest invalid, 4: Unavailable unavailable, 5: Unauthenticated unauthenticated,
    6: Forbidden forbidden),
  // Stops a running job (a batch under way rolls back); answers it with its final counts.
  BulkJob bulkStop(1: string jobId)
    throws (1: InvalidRequest invalid, 4: Unavailable unavailable, 5: Unauthenticated unauthenticated,
    6: Forbidden forbidden),

  // ---- admin: clients (like `delayq clients`; every node applies a change within a second) ------
  // Returns the new client's token ("" with certificateOnly): shown this once, stored hashed.
  string addClient(1: string name, 2: list<Grant> grants, 3: bool certificateOnly)
    throws (1: InvalidRequest invalid, 4: Unavailable unavailable, 5: Unauthenticated unauthenticated,
    6: Forbidden forbidden),
  void grantClient(1: string name, 2: Grant grant)
    throws (1: InvalidRequest invalid, 4: Unavailable unavailable, 5: Unauthenticated unauthenticated,
    6: Forbidden forbidden),
  // Takes one grant back; without a grant, revokes the client (its token and certificate stop working).
  void revokeClient(1: string name, 2: Grant grant)
    throws (1: InvalidRequest invalid, 4: Unavailable unavailable, 5: Unauthenticated unauthenticated,
    6: Forbidden forbidden),
  // A new token; the old one stops working (a revoked client is reinstated).
  string rotateClient(1: string name)
    throws (1: InvalidRequest invalid, 4: Unavailable unavailable, 5: Unauthenticated unauthenticated,
    6: Forbidden forbidden),
  list<ClientInfo> listClients()
    throws (4: Unavailable unavailable, 5: Unauthenticated unauthenticated, 6: Forbidden forbidden),
}
