"""The web console: pages an operator opens on any node's HTTP port, under /ui.

    app.Console        routes a request to a page or an action; sessions, CSRF, rendering
    assembly           the console as a part of the node: built, started and stopped with it
    sessions           login sessions and their CSRF tokens (in memory, per node)
    login, throttle    the way in; failed logins counted per address, summarised in the audit log
    door, hosts        the names the console answers under, its cookie and transport headers
    history            this node's last hour of fire rate and lateness per topic, a ring of 10 s slots
    peers              the other nodes' history and health, asked over their HTTP ports
    reads              the console's MySQL reads: bounded, indexed, with a statement timeout
    view               pure formatting: numbers, times, payloads, error fingerprints
    problems           a failed call or read as a sentence; an outage's text only in the log
    pages_*            one module per page group

Who may see and do what is the Thrift service's rule, not a second one: a login is
`authenticate(token)`, every request re-checks the client as a Thrift call does (delayq.nodes.front
.access), and every action is the Thrift call itself (front.service.Service) made on the HTTP
thread as the session's client, so its permission check and its audit row are the Thrift call's.
"""
