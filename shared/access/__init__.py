"""Who may call a node: clients, their tokens and their grants (delayq.access.grants,
delayq.access.tokens), and the TLS contexts of both ends of a Thrift connection
(delayq.access.tls). The node enforces them (delayq.nodes.front.access); operators manage them
with `delayq clients` (delayq.ops.clients), which writes them through delayq.store.clients.
"""
