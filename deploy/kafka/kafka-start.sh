#!/usr/bin/env bash
# The entrypoint of the compose stack's broker (apache/kafka): starts Kafka through the
# image's own entrypoint (/etc/kafka/docker/run, which turns the KAFKA_* variables into
# server.properties, formats the storage and starts the broker) and, once the broker
# answers, gives the SCRAM-SHA-512 user named in the kvldp client file the password of
# that file. The password is thus written in one place only: the client properties file
# that every kvldp container mounts (deploy/kafka-client.properties, or the file
# $KVLDP_KAFKA_CLIENT_CONFIG names).
#
#   kafka-start.sh           start the broker; set the user's credentials in the background
#   kafka-start.sh --check   the health check: exit 0 once the broker answers and the user
#                            has SCRAM-SHA-512 credentials
#
# The credentials go through kafka-configs.sh (the AlterUserScramCredentials API, which a
# KRaft cluster stores in its metadata log) over the broker's loopback-only PLAINTEXT
# listener, which nothing outside this container can reach. They are set at every start,
# so a changed password in the file takes effect when the broker restarts. The password
# is handed over in a file (--add-config-file), never on a command line.
set -euo pipefail

config=${KVLDP_CLIENT_CONFIG:-/etc/kvldp/kafka-client.properties}
kafka_bin=${KVLDP_KAFKA_BIN:-/opt/kafka/bin}
kafka_run=${KVLDP_KAFKA_RUN:-/etc/kafka/docker/run}
admin=${KVLDP_KAFKA_ADMIN:-localhost:19092}   # listener INTERNAL of docker-compose.yml
mechanism=SCRAM-SHA-512                        # the one KAFKA_SASL_ENABLED_MECHANISMS offers

# property KEY: the value of KEY in $config, read as kvldp reads it (key=value or
# key: value, surrounding blanks dropped, lines starting with # or ! ignored)
property() {
    local key=${1//./\\.}
    sed -n -E "s/^[[:space:]]*${key}[[:space:]]*[=:][[:space:]]*//p" "$config" |
        sed -E 's/[[:space:]]+$//' | tail -n 1
}

fail() {
    echo "kafka-start: $*" >&2
    exit 1
}

[[ -r $config ]] || fail "cannot read the kvldp client file $config"
user=$(property sasl.username)
password=$(property sasl.password)
wanted=$(property sasl.mechanism)
wanted=${wanted:-$(property sasl.mechanisms)}
[[ -n $user && -n $password ]] ||
    fail "$config needs sasl.username and sasl.password: the broker creates that SCRAM user"
[[ ${wanted^^} == "$mechanism" ]] ||
    fail "$config asks for sasl.mechanism=${wanted:-(none)}; this broker offers $mechanism only"

describe() {
    "$kafka_bin/kafka-configs.sh" --bootstrap-server "$admin" \
        --describe --entity-type users --entity-name "$user" 2>/dev/null
}

if [[ ${1:-} == --check ]]; then
    credentials=$(describe) || exit 1
    [[ $credentials == *"$mechanism="* ]]
    exit
fi

set_credentials() {
    local file
    file=$(mktemp)
    chmod 600 "$file"
    # a Java properties line: backslashes are escapes there
    printf '%s=iterations=8192,password=%s\n' "$mechanism" "${password//\\/\\\\}" > "$file"
    until "$kafka_bin/kafka-configs.sh" --bootstrap-server "$admin" --alter \
        --entity-type users --entity-name "$user" --add-config-file "$file" > /dev/null 2>&1; do
        sleep 2
    done
    rm -f "$file"
    echo "kafka-start: $mechanism credentials of user $user are set"
}

# run it detached (its parent exits at once), so that the container's init reaps it
# when it is done rather than leaving a zombie under the broker
(set_credentials &)
exec "$kafka_run" "$@"
