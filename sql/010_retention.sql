-- delayq schema, version 10: retention. The execlog and the backlog are partitioned by day (RANGE
-- on epoch milliseconds, UTC), so that history past retention goes by dropping whole partitions
-- (delayq.retention, delayq.store.retention). MySQL and MariaDB require every unique key of a
-- partitioned table to hold the partitioning column, so it joins each primary key:
--   backlog: (task_id, finished_ms). A task has one backlog row at a time: it moves there in the
--            transaction that deletes its live row (delayq.store.backlog), and a redrive deletes it.
--   execlog: (task_id, attempt, due_ms), due_ms being the task's due time when the attempt was
--            claimed: every writer of an attempt's row (the recorder, a release, a result) knows
--            it, so they keep meeting on one row.
-- Lookups by task id read the primary key's prefix in each partition.
-- Portable to MySQL 8: the partitioning statements are prepared, as their first bound (the end of
-- the day this runs, UTC) is computed; rows already there all go to that first partition.
-- A partitioned table's secondary keys do not order by the primary key appended to them, so the
-- keys read in (time, task_id) order name task_id themselves: newest-first pages by finish time
-- (idx_finished), a key's tasks newest first (idx_topic_key) and a topic's by due time
-- (idx_topic_due, both of version 8) read in order instead of sorting every match.
ALTER TABLE job_delay_task_backlog DROP PRIMARY KEY, ADD PRIMARY KEY (task_id, finished_ms),
  DROP KEY idx_finished, ADD KEY idx_finished (finished_ms, task_id),
  DROP KEY idx_topic_key, ADD KEY idx_topic_key (topic, task_key, created_ms, task_id),
  DROP KEY idx_topic_due, ADD KEY idx_topic_due (topic, due_ms, task_id),
  ADD KEY idx_topic_finished (topic, finished_ms);

ALTER TABLE job_delay_task_execlog ADD COLUMN due_ms BIGINT NOT NULL DEFAULT 0;
UPDATE job_delay_task_execlog SET due_ms = COALESCE(dispatched_ms, result_ms, 0) WHERE due_ms = 0;
ALTER TABLE job_delay_task_execlog MODIFY due_ms BIGINT NOT NULL, DROP PRIMARY KEY, ADD PRIMARY KEY (task_id, attempt, due_ms);

SET @retention_first = CONCAT('PARTITION p', REPLACE(UTC_DATE(), '-', ''), ' VALUES LESS THAN (',
  (DATEDIFF(UTC_DATE(), '1970-01-01') + 1) * 86400000, '), PARTITION pmax VALUES LESS THAN MAXVALUE)');
SET @retention_ddl = CONCAT('ALTER TABLE job_delay_task_backlog PARTITION BY RANGE (finished_ms) (', @retention_first);
PREPARE retention_ddl FROM @retention_ddl;
EXECUTE retention_ddl;
SET @retention_ddl = CONCAT('ALTER TABLE job_delay_task_execlog PARTITION BY RANGE (due_ms) (', @retention_first);
PREPARE retention_ddl FROM @retention_ddl;
EXECUTE retention_ddl;
DEALLOCATE PREPARE retention_ddl;

-- A topic whose history is kept for another number of days than DELAYQ_RETENTION_DAYS (0: for ever).
CREATE TABLE IF NOT EXISTS job_topic_retention (
  topic       VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  days        INT NOT NULL,
  updated_ms  BIGINT NOT NULL,
  PRIMARY KEY (topic)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
