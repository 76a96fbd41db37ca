#!/usr/bin/env bash
# The entrypoint of the compose stack's broker (apache/kafka): starts Kafka through the
# image's own entrypoint (/etc/kafka/docker/run, which turns the KAFKA_* variables into
# server.properties, formats the storage and starts the broker) and, once the broker
# answers, creates one SCRAM-SHA-512 user per role and grants each principal its ACLs.
# The roles are the client files of the directory $KVLDP_CLIENT_DIR (the stack's
# deploy/kafka-clients, or the directory $KVLDP_KAFKA_CLIENTS names), the very files the
# kvldp containers mount:
#   ingest.properties      the ingestion principal (the gateway, the simulated fleets):
#                          Write and Describe on each collection's reports topic
#   aggregator.properties  the aggregators' principal: Read, Describe and Create on the
#                          reports topics; Read, Write, Describe and Create on the
#                          collections' own topics (dlq, state, control); Read on their
#                          consumer groups
# Each user gets the password of its file, which is thus written in one place only. The
# collections are the names in $KVLDP_COLLECTIONS (the topics kvldp.<name>.*, the group
# kvldp.<name>.aggregator); every ACL is ALLOW, from any host, on a literal name. The
# broker authorizes every request (StandardAuthorizer, no ACL: no access); the principal
# of its loopback listeners, User:ANONYMOUS, is the super user this script works as.
#
#   kafka-start.sh           start the broker; create the users and grant the ACLs in the
#                            background
#   kafka-start.sh --check   the health check: exit 0 once the broker answers, both users
#                            have SCRAM-SHA-512 credentials and every ACL is in place;
#                            otherwise exit 1, saying in one line what is missing
#
# The credentials go through kafka-configs.sh (the AlterUserScramCredentials API, which a
# KRaft cluster stores in its metadata log), the ACLs through kafka-acls.sh, both over
# the broker's loopback-only PLAINTEXT listener, which nothing outside this container can
# reach. Both are set at every start (adding an ACL that exists changes nothing), so a
# changed password or a new collection takes effect when the broker restarts; an ACL of
# a collection taken out of $KVLDP_COLLECTIONS stays until removed (kafka-acls.sh
# --remove). The password is handed over in a file (--add-config-file), never on a
# command line.
set -euo pipefail

clients=${KVLDP_CLIENT_DIR:-/etc/kvldp/kafka-clients}
collections=${KVLDP_COLLECTIONS-}
kafka_bin=${KVLDP_KAFKA_BIN:-/opt/kafka/bin}
kafka_run=${KVLDP_KAFKA_RUN:-/etc/kafka/docker/run}
admin=${KVLDP_KAFKA_ADMIN:-localhost:19092}   # listener INTERNAL of docker-compose.yml
mechanism=SCRAM-SHA-512                        # the one KAFKA_SASL_ENABLED_MECHANISMS offers
roles=(ingest aggregator)                      # the client files <role>.properties

fail() {
    echo "kafka-start: $*" >&2
    exit 1
}

# The client files are read here without Java (the image's Java runtime cannot run a
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
read_client_file() {
    local config=$1 LC_ALL=C line key value at number=0
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

declare -A setting=() user=() password=()
for role in "${roles[@]}"; do
    config=$clients/$role.properties
    [[ -r $config ]] || fail "cannot read the $role client file $config"
    setting=()
    read_client_file "$config"
    name=${setting[sasl.username]-}
    wanted=${setting[sasl.mechanism]-${setting[sasl.mechanisms]-}}
    [[ -n $name && -n ${setting[sasl.password]-} ]] ||
        fail "$config needs sasl.username and sasl.password: the broker creates that SCRAM user"
    [[ ${wanted^^} == "$mechanism" ]] ||
        fail "$config asks for sasl.mechanism=${wanted:-(none)}; this broker offers $mechanism only"
    [[ $name =~ ^[A-Za-z0-9._-]+$ ]] ||
        fail "$config: sasl.username takes letters, digits, '.', '_' and '-' only (the ACLs name User:<sasl.username>)"
    [[ $name != ANONYMOUS ]] ||
        fail "$config: sasl.username ANONYMOUS is the principal of the broker's loopback listeners, a super user"
    user[$role]=$name
    password[$role]=${setting[sasl.password]}
done
[[ ${user[ingest]} != "${user[aggregator]}" ]] ||
    fail "the ingest and aggregator client files both log in as ${user[ingest]}: each role needs its own user"
[[ $collections =~ ^[A-Za-z0-9_-]+( [A-Za-z0-9_-]+)*$ ]] ||
    fail "KVLDP_COLLECTIONS must name the stack's collections, separated by single spaces (now: '$collections')"

# The ACLs, one kafka-acls.sh run per line: PRINCIPAL OPERATIONS RESOURCES, the lists
# comma-separated, each resource written topic:NAME or group:NAME.
acls() {
    local name reports=() own=() groups=()
    for name in $collections; do
        reports+=("topic:kvldp.$name.reports")
        own+=("topic:kvldp.$name.dlq" "topic:kvldp.$name.state" "topic:kvldp.$name.control")
        groups+=("group:kvldp.$name.aggregator")
    done
    local IFS=,
    echo "User:${user[ingest]} Write,Describe ${reports[*]}"
    echo "User:${user[aggregator]} Read,Describe,Create ${reports[*]}"
    echo "User:${user[aggregator]} Read,Write,Describe,Create ${own[*]}"
    echo "User:${user[aggregator]} Read ${groups[*]}"
}

# Runs one of Kafka's admin tools against the loopback listener and prints its output;
# when it fails, says so in one line with the first line the tool printed.
admin_tool() {
    local what=$1 tool=$2 output
    shift 2
    if ! output=$("$kafka_bin/$tool" --bootstrap-server "$admin" "$@" 2>&1); then
        echo "kafka-start: $what failed: ${output%%$'\n'*}" >&2
        return 1
    fi
    printf '%s\n' "$output"
}

# The health check: every user has its credentials and every ACL of acls() is listed.
check() {
    local credentials listing line role kind resource principal operations resources operation entry
    local -A granted=()
    credentials=$(admin_tool "describing the SCRAM users" kafka-configs.sh --describe --entity-type users) ||
        exit 1
    for role in "${roles[@]}"; do
        # "SCRAM credential configs for user-principal 'NAME' are SCRAM-SHA-512=iterations=8192"
        [[ $credentials =~ "user-principal '${user[$role]}' are "([^$'\n']*) ]] &&
            [[ ,${BASH_REMATCH[1]} == *",$mechanism="* ]] ||
            fail "user ${user[$role]} ($role) has no $mechanism credentials"
    done
    listing=$(admin_tool "listing the ACLs" kafka-acls.sh --list) || exit 1
    # kafka-acls.sh --list: a line per resource pattern, then a line per ACL on it
    local pattern='^Current ACLs for resource `ResourcePattern\(resourceType=([A-Z_]+), name=(.+), patternType=([A-Z_]+)\)`:'
    local acl='^[[:blank:]]*\(principal=(.+), host=\*, operation=([A-Z_]+), permissionType=ALLOW\)$'
    while IFS= read -r line; do
        if [[ $line =~ $pattern ]]; then
            kind=${BASH_REMATCH[1]} resource=${BASH_REMATCH[2]}
            [[ ${BASH_REMATCH[3]} == LITERAL ]] || kind=
        elif [[ -n ${kind-} && $line =~ $acl ]]; then
            granted["$kind $resource ${BASH_REMATCH[1]} ${BASH_REMATCH[2]}"]=1
        fi
    done <<< "$listing"
    while read -r principal operations resources; do
        for operation in ${operations//,/ }; do
            for entry in ${resources//,/ }; do
                kind=${entry%%:*} resource=${entry#*:}
                [[ -n ${granted["${kind^^} $resource $principal ${operation^^}"]-} ]] ||
                    fail "ACL missing: $principal may not $operation $kind $resource"
            done
        done
    done < <(acls)
}

if [[ ${1:-} == --check ]]; then
    check
    exit
fi

# Sets the SCRAM credentials of a role's user: the password goes in a file only this
# process can read, as a Java properties line that Java reads back verbatim (the password
# has no backslash, no blank at either end and nothing but printable ASCII:
# read_client_file).
set_credentials() {
    local role=$1 file status=0
    file=$(mktemp)
    chmod 600 "$file"
    printf '%s=iterations=8192,password=%s\n' "$mechanism" "${password[$role]}" > "$file"
    admin_tool "setting the credentials of user ${user[$role]}" kafka-configs.sh --alter \
        --entity-type users --entity-name "${user[$role]}" --add-config-file "$file" > /dev/null || status=$?
    rm -f "$file"
    return "$status"
}

grant() {
    local principal=$1 operations=$2 resources=$3 operation entry arguments=()
    for operation in ${operations//,/ }; do
        arguments+=(--operation "$operation")
    done
    for entry in ${resources//,/ }; do
        arguments+=("--${entry%%:*}" "${entry#*:}")
    done
    admin_tool "granting $principal $operations" kafka-acls.sh --add --allow-principal "$principal" \
        "${arguments[@]}" > /dev/null
}

setup() {
    local principal operations resources
    # the broker answers once the first user's credentials can be set
    until set_credentials "${roles[0]}" 2> /dev/null; do
        sleep 2
    done
    set_credentials "${roles[1]}"
    while read -r principal operations resources; do
        grant "$principal" "$operations" "$resources"
    done < <(acls)
    echo "kafka-start: $mechanism users ${user[ingest]} and ${user[aggregator]} are set; ACLs granted on collections $collections"
}

# run it detached (its parent exits at once), so that the container's init reaps it
# when it is done rather than leaving a zombie under the broker
(setup &)
exec "$kafka_run" "$@"
