"""Code both roles use: config, errors, the Thrift IDL and its generated code, the tables, the
RabbitMQ topology and publisher, the consumer helper and the Python client."""
