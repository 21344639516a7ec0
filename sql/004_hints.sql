-- delayq schema, version 4: hints for tasks accepted by a node that does not own their shard.
-- A task due soon goes straight into the accepting node's memory when the node owns a shard to
-- put it on; when it owns none (drained, just joined, its ZooKeeper session suspended) the task
-- lands on another node's shard, and a hint row tells that shard's owner to load it now rather
-- than at its next full re-read. Owners read and delete the hints of their shards.
CREATE TABLE IF NOT EXISTS job_delay_hint (
  shard_id  INT NOT NULL,
  task_id   VARCHAR(64) NOT NULL,
  due_ms    BIGINT NOT NULL,
  PRIMARY KEY (shard_id, task_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
