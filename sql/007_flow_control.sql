-- delayq schema, version 7: flow control per topic, and tenants with quotas.
-- Controls live on the topic's callback service (registerService leaves them as they are):
--   max_fire_rate  tasks/s across the cluster (NULL: no limit), fire_burst tasks above the rate at once,
--   max_in_flight  attempts dispatched and not yet reported, across the cluster (NULL: no cap),
--   paused         nothing of the topic fires; its tasks stay DELAY,
--   weight         its share of a node's dispatch when several topics have tasks due,
--   tenant         the tenant whose quotas its submits count against (NULL: none).
-- Nodes re-read services, controls and tenants whenever services_version in delayq_meta moves.
ALTER TABLE job_callback_service ADD COLUMN max_fire_rate DOUBLE NULL;
ALTER TABLE job_callback_service ADD COLUMN fire_burst INT NULL;
ALTER TABLE job_callback_service ADD COLUMN max_in_flight INT NULL;
ALTER TABLE job_callback_service ADD COLUMN paused TINYINT NOT NULL DEFAULT 0;
ALTER TABLE job_callback_service ADD COLUMN weight INT NOT NULL DEFAULT 1;
ALTER TABLE job_callback_service ADD COLUMN tenant VARCHAR(64) NULL;

-- Counts a topic's attempts in flight (READY, RUNNING) for max_in_flight and its pending tasks for
-- the tenant's quota, and reads a limited topic's earliest tasks, without reading other topics' rows.
ALTER TABLE job_delay_task ADD KEY idx_topic_status_due (topic, status, due_ms);

-- A hint carries its task's topic: the owner's memory holds every task under its topic's controls.
ALTER TABLE job_delay_hint ADD COLUMN topic VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT '';

-- A tenant groups topics (job_callback_service.tenant) and clients (job_client.tenant). Every
-- quota is optional (NULL: no limit beyond the node's own).
CREATE TABLE IF NOT EXISTS job_tenant (
  name               VARCHAR(64) NOT NULL,
  max_pending        BIGINT NULL,       -- live tasks (DELAY, READY, RUNNING) of its topics
  max_submit_rate    DOUBLE NULL,       -- tasks/s submitted to its topics, across the cluster
  max_horizon_ms     BIGINT NULL,       -- how far ahead a task may be due
  max_payload_bytes  INT NULL,
  created_ms         BIGINT NOT NULL,
  updated_ms         BIGINT NOT NULL,
  PRIMARY KEY (name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

ALTER TABLE job_client ADD COLUMN tenant VARCHAR(64) NULL;
