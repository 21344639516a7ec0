"""The Thrift front: the server with its connections and inboxes, the submit path, the task, topic
and admin calls, who each call runs as, and the one mapping of delayq's errors to the IDL's
exceptions."""
