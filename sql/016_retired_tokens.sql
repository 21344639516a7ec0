-- delayq schema, version 16: the digests of a client's tokens that no longer work, so that a node
-- can tell a token revoked or replaced by a rotation from one that never was a client's.
--   token_sha256  the SHA-256 of the retired token's secret, as job_client.token_sha256 held it
--   why           revoked | rotated: the refusal's reason when the token is presented again
-- `delayq clients revoke` and `rotate` write a row and keep a client's newest 10 (delayq.store.clients).
CREATE TABLE IF NOT EXISTS job_client_retired_token (
  name          VARCHAR(64) NOT NULL,
  token_sha256  CHAR(64) NOT NULL,
  why           VARCHAR(8) NOT NULL,
  retired_ms    BIGINT NOT NULL,
  PRIMARY KEY (name, token_sha256)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
