-- delayq schema, version 3: an execlog row may have no dispatch time. An attempt that was claimed
-- but whose publish was never recorded (its node stopped first) is logged when its time-to-run
-- runs out, with result UNRECORDED and no made-up dispatch time; a MISFIRED attempt was never
-- dispatched either. MODIFY is idempotent: a re-run changes nothing.
ALTER TABLE job_delay_task_execlog MODIFY dispatched_ms BIGINT NULL;
