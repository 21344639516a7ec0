"""The Thrift front: the server and its connections and inboxes, the handler, the one mapping of
delayq's errors to the IDL's exceptions, and the submit write strategy."""
