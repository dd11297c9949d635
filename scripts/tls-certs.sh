#!/usr/bin/env bash
# tls-certs.sh — a throw-away CA and one certificate per member for a
# Ferry job over mutual TLS (docs/security.md), made with openssl.
#
#   scripts/tls-certs.sh DIR NAME...
#
# writes DIR/ca.pem (the CA certificate, for --tls-ca), DIR/ca.key, and
# for each NAME DIR/NAME.pem and DIR/NAME.key (for --tls-cert and
# --tls-key), with subject CN=ferry-NAME and the same name as a DNS SAN.
# Names used by scripts/run-local.sh: scheduler, server-I, trainer-R,
# operator. Keys are ECDSA P-256, unencrypted, mode 600; certificates are
# valid for 30 days. For tests and local jobs: a real deployment's CA
# lives elsewhere and signs its members' requests.
set -euo pipefail
if [ $# -lt 2 ]; then
	echo "usage: $0 DIR NAME..." >&2
	exit 2
fi
command -v openssl >/dev/null || {
	echo "$0: openssl is not installed" >&2
	exit 1
}
dir=$1
shift
mkdir -p "$dir"
umask 077
if [ ! -f "$dir/ca.pem" ]; then
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
		-keyout "$dir/ca.key" -out "$dir/ca.pem" -days 30 \
		-subj "/CN=ferry-job-ca" >/dev/null 2>&1
fi
for name in "$@"; do
	openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
		-keyout "$dir/$name.key" -out "$dir/$name.csr" \
		-subj "/CN=ferry-$name" >/dev/null 2>&1
	printf 'subjectAltName=DNS:ferry-%s\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth,clientAuth\n' \
		"$name" >"$dir/$name.ext"
	openssl x509 -req -in "$dir/$name.csr" -CA "$dir/ca.pem" \
		-CAkey "$dir/ca.key" -CAcreateserial -days 30 \
		-extfile "$dir/$name.ext" -out "$dir/$name.pem" >/dev/null 2>&1
	rm -f "$dir/$name.csr" "$dir/$name.ext"
done
chmod 644 "$dir/ca.pem"
