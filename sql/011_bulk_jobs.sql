-- delayq schema, version 11: bulk jobs (delayq.bulk). A job cancels, reschedules or redrives the
-- tasks of one topic that a filter matched when it was created, in batches by task id; any node
-- runs it, holding a lease on its row, and one that finds the lease lapsed takes it over.
--   upto_id / created_ms   its snapshot: tasks up to this id, created by then (the matching set it counted)
--   total                  that count, or the count the operator was shown if lower: it changes no more
--   cursor_id              the last task id passed, written in each batch's own transaction
--   lease_owner / _until   the node running it, until when (renewed by every batch)
CREATE TABLE IF NOT EXISTS job_bulk (
  job_id          VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  action          VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  topic           VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  key_prefix      VARBINARY(255) NULL,
  tag             VARBINARY(64) NULL,
  due_from_ms     BIGINT NULL,
  due_before_ms   BIGINT NULL,
  shift_ms        BIGINT NULL,
  due_at_ms       BIGINT NULL,
  reason          VARCHAR(255) NOT NULL,
  actor           VARCHAR(128) NOT NULL,
  rate            INT NOT NULL,
  total           BIGINT NOT NULL,
  upto_id         VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  created_ms      BIGINT NOT NULL,
  cursor_id       VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT '',
  changed         BIGINT NOT NULL DEFAULT 0,
  skipped         BIGINT NOT NULL DEFAULT 0,
  state           VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  lease_owner     VARCHAR(128) NULL,
  lease_until_ms  BIGINT NOT NULL DEFAULT 0,
  updated_ms      BIGINT NOT NULL,
  finished_ms     BIGINT NULL,
  error           VARCHAR(255) NULL,
  PRIMARY KEY (job_id),
  KEY idx_state (state, lease_until_ms)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
