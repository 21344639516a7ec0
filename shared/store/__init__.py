"""Every SQL statement delayq runs, by role: `tasks` (a written task's life: scans, claims,
attempts, results, cancel), `submits` (new tasks), `backlog` (the move of a finished task out of
the hot table), `epochs` (shard ownership: its one writer), `maintenance` (the operator's list,
redrive and purge), and the rows as values (`values`). MySQL is the truth; docs/ARCHITECTURE.md
draws the tables."""
