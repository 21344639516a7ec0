-- delayq schema, version 8: business keys, tags and trace context on tasks, and dedup per key.
--   task_key      the caller's business key (up to 255 bytes of UTF-8), found by topic and key
--   tags          up to 8 tags, comma-separated (a tag holds no comma)
--   traceparent   the W3C trace context given at submit, passed on as a message header
--   held_key      the key while this task holds it for a dedup mode other than ALLOW: at most one
--                 live task of a topic holds a key (the unique key below is the dedup's guarantee).
--                 A later submit of the key takes it over from a task that has fired; a dispatch,
--                 retry or release never changes it, so no state change of the task can collide.
--   key_since_ms  when the key's debounce chain began (REPLACE and maxDebounceMs)
ALTER TABLE job_delay_task ADD COLUMN task_key VARBINARY(255) NULL;
ALTER TABLE job_delay_task ADD COLUMN tags VARBINARY(520) NULL;
ALTER TABLE job_delay_task ADD COLUMN traceparent VARCHAR(55) CHARACTER SET ascii COLLATE ascii_bin NULL;
ALTER TABLE job_delay_task ADD COLUMN held_key VARBINARY(255) NULL;
ALTER TABLE job_delay_task ADD COLUMN key_since_ms BIGINT NULL;
ALTER TABLE job_delay_task ADD KEY idx_topic_key (topic, task_key, created_ms);
ALTER TABLE job_delay_task ADD UNIQUE KEY uq_topic_held_key (topic, held_key);

-- Ended tasks keep their key, tags and trace context; found by key (newest first) and listed by due time.
ALTER TABLE job_delay_task_backlog ADD COLUMN task_key VARBINARY(255) NULL;
ALTER TABLE job_delay_task_backlog ADD COLUMN tags VARBINARY(520) NULL;
ALTER TABLE job_delay_task_backlog ADD COLUMN traceparent VARCHAR(55) CHARACTER SET ascii COLLATE ascii_bin NULL;
ALTER TABLE job_delay_task_backlog ADD KEY idx_topic_key (topic, task_key, created_ms);
ALTER TABLE job_delay_task_backlog ADD KEY idx_topic_due (topic, due_ms);

-- Each attempt carries its task's key and tags.
ALTER TABLE job_delay_task_execlog ADD COLUMN task_key VARBINARY(255) NULL;
ALTER TABLE job_delay_task_execlog ADD COLUMN tags VARBINARY(520) NULL;
