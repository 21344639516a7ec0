"""Every SQL statement delayq runs, by role: `tasks` (the task rows, their attempts and final
states), `epochs` (shard ownership: the one writer of shard epochs), `maintenance` (the operator's
list, redrive and purge). MySQL is the truth; see docs/ARCHITECTURE.md for the tables."""
