-- delayq schema, version 14: an ended task keeps the dedup mode it held its key under.
--   key_mode     job_delay_task.key_mode when the task ended (sql/012): NULL for a task without a
--                key, submitted with ALLOW, or ended before this version. A redrive of a FAILED
--                task with a key_mode takes its key again under that mode (delayq.store.redrives),
--                or leaves the task FAILED while another live task holds the key.
ALTER TABLE job_delay_task_backlog ADD COLUMN key_mode TINYINT UNSIGNED NULL;
