-- delayq schema, version 13: a bulk job runs in lanes, batches of each lane in parallel.
--   lane_cursors   the last task id each lane passed, as a JSON array; lane k of n changes the
--                  tasks with CRC32(task_id) % n = k. NULL: a job of one lane, whose cursor is cursor_id
--                  (jobs created before this version).
--   cursor_id      now the highest of the lanes' cursors: a node of an earlier version that takes
--                  the job over goes on from there, so it may pass tasks over but changes none twice;
--                  a node of this version that finds cursor_id past the lanes goes on from there
--                  in every lane
ALTER TABLE job_bulk ADD COLUMN lane_cursors VARCHAR(1024) CHARACTER SET ascii COLLATE ascii_bin NULL;
