#!/bin/sh
# One-shot (service `certs` of docker-compose.yml): a development CA and the broker's TLS
# certificate, in PEM, for the compose stack's SASL_SSL listeners.
#
#   make-certs.sh BROKER_DIR CA_DIR
#
# BROKER_DIR (volume kafka-certs, mounted into the broker only) gets
#   broker.pem  the broker's private key (unencrypted PKCS#8), its certificate and the CA's:
#               one file, what Kafka reads as ssl.keystore.type=PEM
#   ca.crt      the CA (ssl.truststore.type=PEM; used only if client certificates are required)
# CA_DIR (volume kafka-ca, mounted read-only into the kvldp containers) gets
#   ca.crt      what clients trust: ssl.ca.location in the files of deploy/kafka-clients
#
# The broker certificate names kafka (the address inside the compose network), localhost
# and 127.0.0.1 (the published port), so clients keep checking the host name
# (ssl.endpoint.identification.algorithm=https). The CA's private key is deleted as soon
# as it has signed: nothing else can ever be signed with it. Existing files are kept;
# `docker compose down -v` (or removing the two volumes) makes new ones.
#
# Needs only sh and the openssl command line (the stack runs it in python:3.11-slim, whose
# ca-certificates package brings openssl).
set -eu

broker_dir=${1:?usage: make-certs.sh BROKER_DIR CA_DIR}
ca_dir=${2:?usage: make-certs.sh BROKER_DIR CA_DIR}
days=${KVLDP_CERT_DAYS:-825}
sans=${KVLDP_CERT_SANS:-DNS:kafka,DNS:localhost,IP:127.0.0.1}

if [ -s "$broker_dir/broker.pem" ] && [ -s "$broker_dir/ca.crt" ] && [ -s "$ca_dir/ca.crt" ]; then
    echo "certs: keeping the CA and broker certificate made before ($broker_dir, $ca_dir)"
    exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
umask 077

cat > "$work/ca.cnf" <<CNF
[req]
prompt = no
distinguished_name = dn
x509_extensions = ca
[dn]
CN = kvldp development CA
[ca]
basicConstraints = critical, CA:TRUE, pathlen:0
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid:always
CNF

cat > "$work/broker.ext" <<CNF
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = $sans
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
CNF

# genpkey writes PKCS#8 ("BEGIN PRIVATE KEY"), the only key format Kafka's PEM keystore reads
openssl genpkey -quiet -algorithm RSA -pkeyopt rsa_keygen_bits:3072 -out "$work/ca.key"
openssl genpkey -quiet -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$work/broker.key"
openssl req -x509 -new -key "$work/ca.key" -sha256 -days "$days" -config "$work/ca.cnf" -out "$work/ca.crt"
openssl req -new -key "$work/broker.key" -subj "/CN=kafka" -out "$work/broker.csr"
openssl x509 -req -in "$work/broker.csr" -CA "$work/ca.crt" -CAkey "$work/ca.key" \
    -set_serial "0x$(openssl rand -hex 16)" -days "$days" -sha256 \
    -extfile "$work/broker.ext" -out "$work/broker.crt"
rm -f "$work/ca.key"
openssl verify -CAfile "$work/ca.crt" "$work/broker.crt"

cat "$work/broker.key" "$work/broker.crt" "$work/ca.crt" > "$work/broker.pem"
# Readable by every user: the broker runs as apache/kafka's appuser, the kvldp services as
# uid 10001. The volume holding the broker's key is mounted into the broker only.
umask 022
mkdir -p "$broker_dir" "$ca_dir"
chmod 0755 "$broker_dir" "$ca_dir"
put() {  # put FILE DIR: copy, then rename into place (never a half-written file)
    cp "$1" "$2/.$(basename "$1").tmp"
    chmod 0644 "$2/.$(basename "$1").tmp"
    mv "$2/.$(basename "$1").tmp" "$2/$(basename "$1")"
}
put "$work/ca.crt" "$broker_dir"
put "$work/broker.pem" "$broker_dir"
put "$work/ca.crt" "$ca_dir"
echo "certs: made a CA and a broker certificate for $sans, valid $days days"
