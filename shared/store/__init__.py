"""The SQL of tasks and shards, by role: `tasks` (a written task's life: scans, claims,
attempts, results, cancel), `overdue` (attempts past their time-to-run), `submits` (new tasks), `backlog` (the move of a finished task out of
the hot table), `epochs` (shard ownership: its one writer), `maintenance` (the operator's list,
redrive and purge), and the rows as values (`values`). Services, hints, the clock check, the
schema and resharding keep their few statements beside their logic. docs/ARCHITECTURE.md draws
the tables and who writes each."""
