-- delayq schema, version 17: the audit log is kept for DELAYQ_AUDIT_RETENTION_DAYS. Like the
-- execlog and the backlog (version 10), job_audit is partitioned by day (RANGE on at_ms, epoch
-- milliseconds, UTC), and a retention pass drops its days past retention whole
-- (delayq.store.retention): the nodes' account keeps no DELETE or UPDATE on it, only the ALTER and
-- DROP that dropping a partition needs, as on the two history tables. A partitioned table's
-- primary key must hold the partitioning column: (id, at_ms); id stays unique, AUTO_INCREMENT.
-- Rows already there all go to the first partition, the end of the day this runs (UTC).
ALTER TABLE job_audit DROP PRIMARY KEY, ADD PRIMARY KEY (id, at_ms);

SET @audit_ddl = CONCAT('ALTER TABLE job_audit PARTITION BY RANGE (at_ms) (PARTITION p', REPLACE(UTC_DATE(), '-', ''),
  ' VALUES LESS THAN (', (DATEDIFF(UTC_DATE(), '1970-01-01') + 1) * 86400000,
  '), PARTITION pmax VALUES LESS THAN MAXVALUE)');
PREPARE audit_ddl FROM @audit_ddl;
EXECUTE audit_ddl;
DEALLOCATE PREPARE audit_ddl;
