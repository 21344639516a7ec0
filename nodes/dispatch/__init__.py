"""Dispatch: due tasks taken from memory, claimed in MySQL under a lease (`lease`, `claimlead`),
decided on by the pure `decide` and handed to the publisher as typed `attempts`. Two `lanes`
each run a `dispatcher`, built from the bundles and settings of `wiring`; `ports` says what they
need of MySQL and RabbitMQ; `unsettled` undoes claims whose answer MySQL lost."""
