-- delayq schema, version 5: the clients that may call the nodes, and what each may do.
-- A client authenticates with a token (only the SHA-256 of its secret is kept here) or with a
-- client certificate whose common name is its name. Nodes re-read both tables whenever the
-- clients_version row of delayq_meta changes, which every change made by `delayq clients` bumps.
CREATE TABLE IF NOT EXISTS job_client (
  name          VARCHAR(64) NOT NULL,
  token_sha256  CHAR(64) NULL,
  revoked       TINYINT NOT NULL DEFAULT 0,
  created_ms    BIGINT NOT NULL,
  updated_ms    BIGINT NOT NULL,
  PRIMARY KEY (name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

CREATE TABLE IF NOT EXISTS job_client_grant (
  name        VARCHAR(64) NOT NULL,
  permission  VARCHAR(16) NOT NULL,
  pattern     VARCHAR(128) NOT NULL,
  PRIMARY KEY (name, permission, pattern)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
