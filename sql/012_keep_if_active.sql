-- delayq schema, version 12: KEEP_IF_ACTIVE keeps one attempt of a key in flight.
--   key_mode     the dedup mode a task holding its key was submitted with (4: KEEP_IF_ACTIVE);
--                NULL for a task without a key or submitted with ALLOW
--   flight_key   the key of a KEEP_IF_ACTIVE task while an attempt of it is in flight (READY,
--                RUNNING), otherwise NULL: computed by the server from the row, so no code path
--                can leave it stale. The unique key below makes a second attempt of the key in
--                flight impossible: the claim (delayq.store.oneflight) leaves such a task DELAY.
--                Unkeyed tasks keep it NULL through every change, so their claims and results
--                never write this index.
ALTER TABLE job_delay_task ADD COLUMN key_mode TINYINT UNSIGNED NULL;
ALTER TABLE job_delay_task ADD COLUMN flight_key VARBINARY(255)
    AS (IF(key_mode = 4 AND status IN (1, 2), task_key, NULL)) STORED;
ALTER TABLE job_delay_task ADD UNIQUE KEY uq_topic_flight_key (topic, flight_key);
