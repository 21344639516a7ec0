-- delayq schema, version 6: the audit log. One row per admin action and per cancel, reschedule
-- and redrive: who (a client's name, or operator:<login> for the delayq command), from where, what,
-- on what, when, and how it ended (including refusals).
CREATE TABLE IF NOT EXISTS job_audit (
  id        BIGINT NOT NULL AUTO_INCREMENT,
  at_ms     BIGINT NOT NULL,
  actor     VARCHAR(128) NOT NULL,
  address   VARCHAR(128) NOT NULL,
  action    VARCHAR(32) NOT NULL,
  target    VARCHAR(255) NOT NULL,
  outcome   VARCHAR(64) NOT NULL,
  PRIMARY KEY (id),
  KEY job_audit_at (at_ms)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
