#!/usr/bin/env bash
# The controller of the just-in-time GPU runners: runs OFF the GPU machines, holds the
# only token that can make runners, and hands each machine one single-use runner
# configuration at a time (docs/CI.md, "Registering an ephemeral GPU runner").
#
# Usage:
#   runner-controller.sh jit NAME KIND TRUST        print one just-in-time configuration
#   runner-controller.sh feed HOST NAME KIND TRUST  keep HOST's runner NAME supplied:
#                                                   whenever its configuration is
#                                                   consumed (a job started), put a new
#                                                   one there, over ssh; forever
#
# KIND is the GPU label (h100, h200, l4); TRUST is trusted (main's nightly and baseline
# refresh) or untrusted (pull requests): a label, and the runner group the runner joins.
# On HOST, ci/register-runner.sh runs with PERF_GUARD_RUNNER_JIT_DIR and takes the file.
#
# Configuration (environment):
#   PERF_GUARD_ORG             the organization (runner groups are per organization)
#   PERF_GUARD_ADMIN_TOKEN_FILE  a token with organization "Self-hosted runners: write"
#                              (a GitHub App installation token, or a fine-grained PAT),
#                              owned by the controller's user, mode 0600
#   PERF_GUARD_GROUP_ID_TRUSTED, PERF_GUARD_GROUP_ID_UNTRUSTED  the runner groups' ids
#                              (GET /orgs/<org>/actions/runner-groups)
#   PERF_GUARD_JIT_DIR         the folder on HOST (default /run/perf-guard-runner/NAME)
#   PERF_GUARD_SSH             ssh command (default: ssh -o BatchMode=yes); root on HOST
set -euo pipefail

die() {
    echo "runner-controller: $*" >&2
    exit 1
}

check_args() { # name kind trust
    [[ "$1" =~ ^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$ ]] || die "bad runner name: $1"
    [[ "$2" =~ ^[a-z0-9][a-z0-9-]{0,31}$ ]] || die "bad GPU kind: $2"
    [[ "$3" == trusted || "$3" == untrusted ]] || die "TRUST must be trusted or untrusted"
}

jit() { # name kind trust -> the encoded configuration on stdout
    check_args "$@"
    local org=${PERF_GUARD_ORG:?set PERF_GUARD_ORG} token=${PERF_GUARD_ADMIN_TOKEN_FILE:?set PERF_GUARD_ADMIN_TOKEN_FILE}
    local group
    if [[ "$3" == trusted ]]; then group=${PERF_GUARD_GROUP_ID_TRUSTED:?set PERF_GUARD_GROUP_ID_TRUSTED}
    else group=${PERF_GUARD_GROUP_ID_UNTRUSTED:?set PERF_GUARD_GROUP_ID_UNTRUSTED}; fi
    [[ "$org" =~ ^[A-Za-z0-9][A-Za-z0-9-]{0,38}$ ]] || die "bad organization: $org"
    [[ "$group" =~ ^[0-9]+$ ]] || die "bad runner group id: $group"
    [[ -f "$token" ]] || die "$token: no such file"
    (( ($(stat -c '%#a' "$token") & 8#077) == 0 )) || die "$token: readable by others (chmod 600)"
    local body
    body=$(printf '{"name":"%s-%s","runner_group_id":%s,"labels":["self-hosted","linux","gpu","%s","%s"],"work_folder":"_work"}' \
        "$1" "$(date +%s)" "$group" "$3" "$2")
    # The token goes to curl through its config on stdin, never its arguments.
    { printf 'header = "Authorization: Bearer %s"\n' "$(< "$token")"; } \
        | curl -fsS -X POST -K - -H "Accept: application/vnd.github+json" \
            -H "X-GitHub-Api-Version: 2022-11-28" --data "$body" \
            "https://api.github.com/orgs/$org/actions/runners/generate-jitconfig" \
        | python3 -c 'import json, sys; print(json.load(sys.stdin)["encoded_jit_config"])'
}

feed() { # host name kind trust
    local host=$1
    shift
    check_args "$@"
    [[ "$host" =~ ^[A-Za-z0-9][A-Za-z0-9_.@-]{0,252}$ ]] || die "bad host: $host"
    local dir=${PERF_GUARD_JIT_DIR:-/run/perf-guard-runner/$1} ssh_cmd
    [[ "$dir" =~ ^/[A-Za-z0-9_./-]+$ && "$dir" != *..* ]] || die "bad folder: $dir"
    read -r -a ssh_cmd <<< "${PERF_GUARD_SSH:-ssh -o BatchMode=yes}"
    while true; do
        if ! "${ssh_cmd[@]}" "$host" "test -e $dir/jitconfig"; then
            local config
            if config=$(jit "$@"); then
                # Written whole, then renamed: the runner never reads half a file.
                printf '%s\n' "$config" | "${ssh_cmd[@]}" "$host" \
                    "umask 077 && install -d -m 0755 $dir && cat > $dir/.jitconfig.tmp && mv $dir/.jitconfig.tmp $dir/jitconfig" \
                    && echo "runner-controller: $host: a configuration for $1 ($2, $3)"
            else
                echo "runner-controller: could not make a configuration; again in 30 s" >&2
            fi
        fi
        sleep 30
    done
}

case "${1:-}" in
    jit) shift; (( $# == 3 )) || die "usage: jit NAME KIND TRUST"; jit "$@" ;;
    feed) shift; (( $# == 4 )) || die "usage: feed HOST NAME KIND TRUST"; feed "$@" ;;
    *) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2 ;;
esac
