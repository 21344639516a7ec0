-- delayq schema, version 2: FAILED tasks waiting to be published to their service's dead-letter
-- exchange (1 until the broker confirmed it; cleared at once when the service has none).
-- Portable to MySQL 8 (no IF NOT EXISTS on columns): a re-run after an interruption is told
-- "duplicate column/key" and the runner counts that as applied.
ALTER TABLE job_delay_task_backlog
  ADD COLUMN dead_letter TINYINT NOT NULL DEFAULT 0,
  ADD INDEX idx_dead_letter (dead_letter, shard_id);
