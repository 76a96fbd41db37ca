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

fail() {
    echo "kafka-start: $*" >&2
    exit 1
}

# The client file is read here without Java (the image's Java runtime cannot run a
# source file: it lacks the compiler module) and without kvldp, by a plain split of each
# line. That split is right only on a subset of the properties format, on which it and
# java.util.Properties.load (kvldp's and Kafka's tools' reading) provably agree; any
# other line is refused with its number, never read differently:
#   - blank lines (spaces and tabs only);
#   - comments: '#' or '!' after optional blanks, not ending in a backslash (Java never
#     continues a comment line; other readers do);
#   - KEY=VALUE: KEY of letters, digits, '.', '_' and '-', then '=' with no blank around
#     it; VALUE printable ASCII without a backslash (no escapes, no continued lines) and
#     without blanks at either end (Java drops leading blanks and keeps trailing ones);
#   - no carriage return anywhere (Java ends a line there, read does not) and no NUL byte
#     (read drops it; tr turns it into a carriage return first).
# A key given twice is refused, as kvldp refuses it. Each VALUE is Java's value verbatim.
declare -A setting=()
read_client_file() {
    local LC_ALL=C line key value at number=0
    local -A first=()
    while IFS= read -r line || [[ -n $line ]]; do
        number=$((number + 1))
        at="$config: line $number:"
        [[ $line != *$'\r'* ]] ||
            fail "$at a carriage return or NUL byte (use plain newlines as line ends)"
        [[ ! $line =~ ^[[:blank:]]*$ ]] || continue
        if [[ $line =~ ^[[:blank:]]*[#!] ]]; then
            [[ $line != *\\ ]] ||
                fail "$at a comment ending in a backslash (readers disagree on whether it continues)"
            continue
        fi
        [[ $line =~ ^([A-Za-z0-9._-]+)=(.*)$ ]] ||
            fail "$at not KEY=VALUE (a key of letters, digits, '.', '_' or '-', then '=' with no blank before it)"
        key=${BASH_REMATCH[1]} value=${BASH_REMATCH[2]}
        [[ $value != *\\* ]] ||
            fail "$at $key: a backslash (escapes and continued lines are for Java's reader, not this script)"
        [[ ! $value =~ [^[:print:]] ]] || fail "$at $key: a character other than printable ASCII"
        [[ $value != [[:blank:]]* && $value != *[[:blank:]] ]] ||
            fail "$at $key: blanks at the start or end of the value"
        [[ -z ${first[$key]-} ]] || fail "$at $key is set twice (first on line ${first[$key]})"
        first[$key]=$number
        setting[$key]=$value
    done < <(tr '\000' '\r' < "$config")
}

[[ -r $config ]] || fail "cannot read the kvldp client file $config"
read_client_file
user=${setting[sasl.username]-}
password=${setting[sasl.password]-}
wanted=${setting[sasl.mechanism]-${setting[sasl.mechanisms]-}}
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
    # a Java properties line that Java reads back verbatim: the password has no
    # backslash, no blank at either end and nothing but printable ASCII (read_client_file)
    printf '%s=iterations=8192,password=%s\n' "$mechanism" "$password" > "$file"
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
