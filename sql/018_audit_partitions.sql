-- delayq schema, version 18: the audit log is kept for DELAYQ_AUDIT_RETENTION_DAYS. Like the
-- execlog and the backlog (version 10), job_audit is partitioned by day (RANGE on at_ms, epoch
-- milliseconds, UTC), and a retention pass drops its days past retention whole
-- (delayq.store.retention). A partitioned table's primary key must hold the partitioning column:
-- (id, at_ms); id stays unique, AUTO_INCREMENT. Rows already there all go to the first partition,
-- the end of the day this runs (UTC).
ALTER TABLE job_audit DROP PRIMARY KEY, ADD PRIMARY KEY (id, at_ms);

SET @audit_ddl = CONCAT('ALTER TABLE job_audit PARTITION BY RANGE (at_ms) (PARTITION p', REPLACE(UTC_DATE(), '-', ''),
  ' VALUES LESS THAN (', (DATEDIFF(UTC_DATE(), '1970-01-01') + 1) * 86400000,
  '), PARTITION pmax VALUES LESS THAN MAXVALUE)');
PREPARE audit_ddl FROM @audit_ddl;
EXECUTE audit_ddl;
DEALLOCATE PREPARE audit_ddl;

-- The nodes' account stays append-only on the audit log: SELECT and INSERT on job_audit, and
-- EXECUTE on this procedure, which is all it may do to the table's partitions. It runs as its
-- definer (SQL SECURITY DEFINER), the admin account that applies this migration, and decides
-- itself what goes: the days ending before the server's own clock less keep_days, never a day
-- the caller names, and it refuses a keep_days outside 0 (keep everything) to 3650
-- (DELAYQ_AUDIT_RETENTION_DAYS). It also splits the days up to ahead_days (1 to 30) out of the
-- empty pmax tail, as delayq.retention.plan does for the history tables.
--
-- MariaDB 10.11 and MySQL 8 alike: the account applying the migration needs CREATE ROUTINE and
-- ALTER ROUTINE (DROP PROCEDURE) on delayq's database and ALTER and DROP on job_audit, which an
-- admin account has; the definer must remain an account (MySQL error 1449 otherwise: apply the
-- migration again with another admin account). The partition DDL is prepared (a stored procedure
-- may PREPARE an ALTER TABLE; a function or trigger may not); stored procedures need neither
-- SUPER nor log_bin_trust_function_creators with the binary log on, in either server. Under
-- Galera, the CREATE PROCEDURE and each ALTER TABLE the procedure prepares replicate as any DDL,
-- in total order (TOI), and the CALL runs on the member the node is connected to.
-- DATABASE() in a routine is the routine's own database.
DROP PROCEDURE IF EXISTS delayq_prune_audit;

DELIMITER //
CREATE PROCEDURE delayq_prune_audit(IN keep_days INT, IN ahead_days INT)
  MODIFIES SQL DATA
  SQL SECURITY DEFINER
  COMMENT 'delayq retention of job_audit, drops its days past keep_days, splits ahead_days out of pmax'
BEGIN
  DECLARE today INT DEFAULT DATEDIFF(UTC_DATE(), '1970-01-01');
  DECLARE next_day INT;
  DECLARE parts TEXT DEFAULT '';
  DECLARE past TEXT;
  IF keep_days IS NULL OR keep_days NOT BETWEEN 0 AND 3650 OR ahead_days IS NULL OR ahead_days NOT BETWEEN 1 AND 30 THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'delayq_prune_audit needs keep_days from 0 to 3650 and ahead_days from 1 to 30';
  END IF;
  -- The first day without a partition of its own: the day after the last bounded one's, or today.
  SELECT GREATEST(today, COALESCE(MAX(CAST(PARTITION_DESCRIPTION AS UNSIGNED)) DIV 86400000, today)) INTO next_day
    FROM information_schema.PARTITIONS
    WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'job_audit' AND PARTITION_DESCRIPTION <> 'MAXVALUE';
  WHILE next_day <= today + ahead_days DO
    SET parts = CONCAT(parts, 'PARTITION p', REPLACE(DATE_ADD('1970-01-01', INTERVAL next_day DAY), '-', ''),
                       ' VALUES LESS THAN (', (next_day + 1) * 86400000, '), ');
    SET next_day = next_day + 1;
  END WHILE;
  IF parts <> '' THEN
    SET @delayq_audit_ddl = CONCAT('ALTER TABLE job_audit REORGANIZE PARTITION pmax INTO (', parts,
                                   'PARTITION pmax VALUES LESS THAN MAXVALUE)');
    PREPARE delayq_audit_ddl FROM @delayq_audit_ddl;
    EXECUTE delayq_audit_ddl;
    DEALLOCATE PREPARE delayq_audit_ddl;
  END IF;
  IF keep_days > 0 THEN
    -- Thousands of days may be past after a retention shortened: room for all their names.
    SET SESSION group_concat_max_len = 65536;
    -- Today's partition ends after the cutoff, so one bounded partition always stays.
    SELECT GROUP_CONCAT(PARTITION_NAME ORDER BY PARTITION_ORDINAL_POSITION) INTO past
      FROM information_schema.PARTITIONS
      WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'job_audit' AND PARTITION_DESCRIPTION <> 'MAXVALUE'
        AND CAST(PARTITION_DESCRIPTION AS UNSIGNED) <= UNIX_TIMESTAMP() * 1000 - keep_days * 86400000;
    IF past IS NOT NULL THEN
      SET @delayq_audit_ddl = CONCAT('ALTER TABLE job_audit DROP PARTITION ', past);
      PREPARE delayq_audit_ddl FROM @delayq_audit_ddl;
      EXECUTE delayq_audit_ddl;
      DEALLOCATE PREPARE delayq_audit_ddl;
    END IF;
  END IF;
END //
DELIMITER ;
