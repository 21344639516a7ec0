-- delayq schema, version 15: a bulk job with a key prefix walks its tasks by key.
--   lane_cursors   a lane walking by key holds the key of the last task it passed (up to 255 bytes,
--                  as hex) with its creation time and id: eight of them need more than 1024
--                  characters. A lane walking by key starts "~", past every task
--                  id, so a node of an earlier version finds such a job's lanes at their end and
--                  changes none of its tasks (cursor_id holds "~" for the same reason).
ALTER TABLE job_bulk MODIFY lane_cursors VARCHAR(8192) CHARACTER SET ascii COLLATE ascii_bin NULL;
