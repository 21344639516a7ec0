# shellcheck shell=bash
# Source me: rabbitmq_tls_conf PORT DIR prints the rabbitmq.conf lines of a TLS listener on
# 127.0.0.1:PORT with the CA, certificate and key scripts/services.sh makes in DIR (clients are
# not asked for a certificate). The single instance and the --ha members use the same ones.
rabbitmq_tls_conf() {
    cat <<CONF
listeners.ssl.default = 127.0.0.1:$1
ssl_options.cacertfile = $2/ca.pem
ssl_options.certfile = $2/server.pem
ssl_options.keyfile = $2/server.key
ssl_options.verify = verify_none
ssl_options.fail_if_no_peer_cert = false
CONF
}
