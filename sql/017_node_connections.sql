-- delayq schema, version 17: the MySQL connections each node holds, so that a node whose ZooKeeper
-- session expired while it was frozen (SIGSTOP, a GC or VM pause) can have its connections ended:
-- an open transaction of a frozen node holds its row locks until the connection ends.
--   node_id        the node's DELAYQ_NODE_ID
--   server         the address (host:port) the node connected to: the member of a Galera cluster that
--                  holds the connection, where its KILL must be sent
--   connection_id  CONNECTION_ID() on that server
--   client         the connection's HOST in that server's processlist (the client's address and
--                  port): an id the server gave out again after a restart is not taken for this one
-- Each node writes its rows as it connects (delayq.store.connections); the master ends and removes
-- a departed node's.
CREATE TABLE IF NOT EXISTS job_node_connection (
  server         VARCHAR(255) NOT NULL,
  connection_id  BIGINT UNSIGNED NOT NULL,
  node_id        VARCHAR(128) NOT NULL,
  client         VARCHAR(255) NOT NULL,
  created_ms     BIGINT NOT NULL,
  PRIMARY KEY (server, connection_id),
  KEY idx_node (node_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
