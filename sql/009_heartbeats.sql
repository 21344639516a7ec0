-- delayq schema, version 9: heartbeats of long tasks (touch).
-- cancel_ms: when a cancel was asked of the task while an attempt of it ran (READY or RUNNING).
--   The running attempt's touch answers cancelled, and the attempt's end (anything but SUCCESS,
--   its time-to-run included) makes the task CANCELLED instead of retrying it.
-- The deadline a touch extends is job_delay_task.deadline_ms, in MySQL so that an extension
-- outlives the node that dispatched the attempt.
ALTER TABLE job_delay_task ADD COLUMN cancel_ms BIGINT NULL;

-- The last progress a touch stored for an attempt (up to 1024 bytes), shown by `get`.
ALTER TABLE job_delay_task_execlog ADD COLUMN progress VARBINARY(1024) NULL;
