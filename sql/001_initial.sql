-- delayq schema, version 1. Applied by `delayq db init` / `delayq db migrate`.
-- Times are BIGINT epoch milliseconds of the node that wrote them (no 2038 limit).

-- One row per topic: where its tasks are published and how they are retried.
CREATE TABLE IF NOT EXISTS job_callback_service (
  topic                 VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  exchange              VARCHAR(255) NOT NULL,
  routing_key           VARCHAR(255) NOT NULL,
  max_retries           INT NOT NULL DEFAULT 3,
  backoff               VARCHAR(16) NOT NULL DEFAULT 'exponential',
  retry_backoff_ms      INT NOT NULL DEFAULT 1000,
  retry_backoff_max_ms  INT NOT NULL DEFAULT 300000,
  ttr_ms                INT NOT NULL DEFAULT 60000,
  enabled               TINYINT NOT NULL DEFAULT 1,
  dead_letter_exchange  VARCHAR(255) NULL,
  misfire_threshold_ms  BIGINT NULL,
  misfire_policy        VARCHAR(16) NOT NULL DEFAULT 'fire',
  created_ms            BIGINT NOT NULL,
  updated_ms            BIGINT NOT NULL,
  PRIMARY KEY (topic)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- Live tasks only (DELAY, READY, RUNNING): final ones move to the backlog in the same transaction.
-- status: 0 DELAY, 1 READY, 2 RUNNING. attempt: dispatches made so far.
-- deadline_ms: while READY/RUNNING, when the attempt times out (time-to-run).
CREATE TABLE IF NOT EXISTS job_delay_task (
  task_id      VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  topic        VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  shard_id     INT NOT NULL,
  due_ms       BIGINT NOT NULL,
  status       TINYINT NOT NULL DEFAULT 0,
  attempt      INT NOT NULL DEFAULT 0,
  payload      MEDIUMBLOB NOT NULL,
  spec_hash    BINARY(16) NOT NULL,
  max_retries  INT NOT NULL,
  ttr_ms       INT NOT NULL,
  deadline_ms  BIGINT NULL,
  node_id      VARCHAR(128) NULL,
  created_ms   BIGINT NOT NULL,
  updated_ms   BIGINT NOT NULL,
  PRIMARY KEY (task_id),
  KEY idx_shard_status_due (shard_id, status, due_ms)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- One row per dispatch attempt, written once the broker confirmed the publish.
CREATE TABLE IF NOT EXISTS job_delay_task_execlog (
  task_id        VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  attempt        INT NOT NULL,
  node_id        VARCHAR(128) NOT NULL,
  dispatched_ms  BIGINT NOT NULL,
  result         VARCHAR(16) NULL,
  result_ms      BIGINT NULL,
  message        VARCHAR(1024) NULL,
  PRIMARY KEY (task_id, attempt),
  KEY idx_dispatched (dispatched_ms)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- The final state of every task: FINISHED (3), FAILED (4) or CANCELLED (5).
CREATE TABLE IF NOT EXISTS job_delay_task_backlog (
  task_id      VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  topic        VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  shard_id     INT NOT NULL,
  due_ms       BIGINT NOT NULL,
  status       TINYINT NOT NULL,
  attempt      INT NOT NULL,
  payload      MEDIUMBLOB NOT NULL,
  spec_hash    BINARY(16) NOT NULL,
  max_retries  INT NOT NULL,
  ttr_ms       INT NOT NULL,
  created_ms   BIGINT NOT NULL,
  finished_ms  BIGINT NOT NULL,
  message      VARCHAR(1024) NULL,
  PRIMARY KEY (task_id),
  KEY idx_finished (finished_ms)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- Shard ownership, the fence: a claim succeeds only while its node owns the shard at its epoch.
CREATE TABLE IF NOT EXISTS job_shard (
  shard_id    INT NOT NULL,
  owner       VARCHAR(128) NULL,
  epoch       BIGINT NOT NULL DEFAULT 0,
  updated_ms  BIGINT NOT NULL,
  PRIMARY KEY (shard_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- Cluster-wide settings, e.g. shard_count.
CREATE TABLE IF NOT EXISTS delayq_meta (
  name   VARCHAR(64) NOT NULL,
  value  VARCHAR(255) NOT NULL,
  PRIMARY KEY (name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
