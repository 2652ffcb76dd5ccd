#!/usr/bin/env bash
# Run an EPHEMERAL self-hosted GPU runner for the perf-guard check: take one job (a
# just-in-time runner configuration, or `config.sh --ephemeral`), run it (`run.sh`
# exits after it), kill every process the job left, wipe everything it could write, and
# start again with a fresh runner folder, work folder, HOME and temp folder. See
# docs/CI.md.
#
# Usage (as root; the jobs run as PERF_GUARD_RUNNER_USER, never as root):
#   register-runner.sh loop    register, run one job, clean up; forever
#   register-runner.sh once    one registration and one job (to try the setup)
#   register-runner.sh unit    print a systemd unit that runs `loop` (recommended)
#
# Install a root-owned copy (e.g. /usr/local/sbin/perf-guard-runner, mode 0755): the
# copy in a checkout is writable by whoever owns the checkout.
#
# Configuration (environment; with systemd, EnvironmentFile=/etc/perf-guard-runner/
# <name>.env, owned by root, mode 0600):
#   PERF_GUARD_RUNNER_URL      https://github.com/<org> (runner groups are per
#                              organization) or https://github.com/<owner>/<repo>
#   PERF_GUARD_RUNNER_KIND     GPU label: h100, h200, l4 (the workflows' matrix)
#   PERF_GUARD_RUNNER_TRUST    trusted (main's nightly and baseline refresh) or
#                              untrusted (pull requests): a label, and its runner group
#                              (perf-guard-trusted, perf-guard-untrusted by default);
#                              one machine serves one of them, never both
#   PERF_GUARD_RUNNER_USER     dedicated unprivileged user that runs nothing else: no
#                              sudo, no docker group, no cron/at (its processes are all
#                              killed between jobs)
#   PERF_GUARD_RUNNER_TARBALL  root-owned actions-runner-linux-x64-<version>.tar.gz,
#                              unpacked afresh for every job
#   PERF_GUARD_RUNNER_GROUP    runner group (default: perf-guard-<trust>)
#   PERF_GUARD_RUNNER_NAME     runner name (default: <host>-<kind>)
#   PERF_GUARD_RUNNER_ROOT     per-job folder, wiped between jobs
#                              (default: /var/lib/perf-guard-runner/<name>)
#   PERF_GUARD_RUNNER_GPU      CUDA_VISIBLE_DEVICES for the jobs (one runner per GPU)
#   PERF_GUARD_PYTHON          passed to the jobs (ci/setup-runner.sh's interpreter)
# How a runner is made, the first that is set:
#   PERF_GUARD_RUNNER_JIT_DIR  (recommended) a root-owned folder where a controller off
#       this machine (ci/runner-controller.sh) puts `jitconfig`: a just-in-time runner
#       configuration, good for one runner and one job, made with the controller's
#       token. The script waits for it, reads and deletes it, and runs the job with it.
#       No token that can register runners is ever on this machine.
# Else a registration token, never from the repository; the first that is set:
#   PERF_GUARD_RUNNER_ADMIN_TOKEN_FILE  a token allowed to create registration tokens
#       (fine-grained PAT or GitHub App token: organization "Self-hosted runners:
#       write", or repository "Administration: write"); a fresh registration token
#       is requested from the API before every registration (they last one hour)
#   PERF_GUARD_RUNNER_TOKEN_FILE  a registration token (default
#       /etc/perf-guard-runner/token): good for one hour, so for `once`
#   PERF_GUARD_RUNNER_TOKEN       the same, in the environment of this script only
# Token files must be owned by root and readable by nobody else. The token reaches
# config.sh through ACTIONS_RUNNER_INPUT_TOKEN (never on a command line) while no job
# is running, and is not in the environment of run.sh or of any job.
set -euo pipefail

die() {
    echo "register-runner: $*" >&2
    exit 1
}

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
    exit "${1:-0}"
}

config() {
    url=${PERF_GUARD_RUNNER_URL:?set PERF_GUARD_RUNNER_URL (https://github.com/<org>[/<repo>])}
    kind=${PERF_GUARD_RUNNER_KIND:?set PERF_GUARD_RUNNER_KIND (h100, h200, l4)}
    user=${PERF_GUARD_RUNNER_USER:?set PERF_GUARD_RUNNER_USER (a dedicated unprivileged user)}
    tarball=${PERF_GUARD_RUNNER_TARBALL:?set PERF_GUARD_RUNNER_TARBALL (actions-runner-linux-x64-*.tar.gz)}
    trust=${PERF_GUARD_RUNNER_TRUST:?set PERF_GUARD_RUNNER_TRUST (trusted or untrusted)}
    [[ "$trust" == trusted || "$trust" == untrusted ]] || die "PERF_GUARD_RUNNER_TRUST must be trusted or untrusted"
    group=${PERF_GUARD_RUNNER_GROUP:-perf-guard-$trust}
    jit_dir=${PERF_GUARD_RUNNER_JIT_DIR:-}
    [[ -z "$jit_dir" || ( "$jit_dir" == /* && "$jit_dir" != *..* ) ]] || die "PERF_GUARD_RUNNER_JIT_DIR must be an absolute path"
    name=${PERF_GUARD_RUNNER_NAME:-$(hostname -s)-$kind}
    root=${PERF_GUARD_RUNNER_ROOT:-/var/lib/perf-guard-runner/$name}

    [[ "$url" =~ ^https://github\.com/[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)?$ ]] \
        || die "PERF_GUARD_RUNNER_URL must be https://github.com/<org> or .../<owner>/<repo>"
    [[ "$kind" =~ ^[a-z0-9][a-z0-9-]{0,31}$ ]] || die "bad PERF_GUARD_RUNNER_KIND: $kind"
    [[ "$name" =~ ^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$ ]] || die "bad runner name: $name"
    [[ "$root" == /*/* && "$root" != *..* ]] || die "PERF_GUARD_RUNNER_ROOT must be an absolute path"
    (( EUID == 0 )) || die "run as root: it switches to $user for the jobs and kills its processes"
    uid=$(id -u "$user") || die "no user $user"
    gid=$(id -g "$user")
    (( uid != 0 )) || die "PERF_GUARD_RUNNER_USER must not be root"
    [[ -f "$tarball" && "$(stat -c %u "$tarball")" == 0 ]] || die "$tarball: not a root-owned file"
    local home self
    home=$(getent passwd "$user" | cut -d: -f6)
    if [[ -d "$home" && "$(stat -c %u "$home")" == "$uid" ]]; then
        echo "register-runner: warning: $user owns its home $home, which outlives jobs (the jobs use" \
            "a fresh HOME; create the user with --home-dir /nonexistent)" >&2
    fi
    self=$(readlink -f "$0")
    if [[ "$(stat -c %u "$self")" != 0 ]] || (( ($(stat -c '%#a' "$self") & 8#022) != 0 )); then
        echo "register-runner: warning: $self is writable by others than root; install a root-owned copy" >&2
    fi
}

# Every process of the runner's user, killed until none is left. The user is
# dedicated to this runner, so these are the previous job's processes, daemons and
# double-forks included: a process cannot change its user without privilege, and the
# jobs run with no_new_privs (no setuid binaries).
kill_user_processes() {
    local _
    for _ in $(seq 1 100); do
        pkill -KILL -U "$uid" 2> /dev/null || true
        pkill -KILL -u "$uid" 2> /dev/null || true
        pgrep -U "$uid" > /dev/null || pgrep -u "$uid" > /dev/null || return 0
        sleep 0.2
    done
    die "processes of $user survive SIGKILL: $(pgrep -a -U "$uid" | head -n 5 | tr '\n' ' ')"
}

# What a job could leave behind for the next one, outside the per-job folder.
wipe_user_files() {
    local dir
    for dir in /tmp /var/tmp /dev/shm; do
        if [[ -d "$dir" ]]; then find "$dir" -xdev -mindepth 1 -user "$uid" -delete 2> /dev/null || true; fi
    done
    if command -v crontab > /dev/null; then crontab -r -u "$user" 2> /dev/null || true; fi
    if command -v atq > /dev/null; then
        atq 2> /dev/null | awk -v u="$user" '$NF == u {print $1}' | xargs -r atrm 2> /dev/null || true
    fi
}

# A command as the runner's user: no privileges it could gain (no_new_privs, setpriv
# rather than su/runuser, so no PAM session moves it out of this cgroup), and a clean
# environment (nothing of root's) with HOME and TMPDIR inside the per-job folder. The
# registration token, when `runner_token` is set, goes into the environment, never
# into any process's arguments.
as_runner() {
    (
        while IFS= read -r var; do unset "$var" 2> /dev/null || true; done < <(compgen -e)
        export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8
        export HOME="$root/home" TMPDIR="$root/tmp" USER="$user" LOGNAME="$user"
        if [[ -n "${runner_token:-}" ]]; then export ACTIONS_RUNNER_INPUT_TOKEN="$runner_token"; fi
        if [[ -n "${runner_jit:-}" ]]; then export ACTIONS_RUNNER_INPUT_JITCONFIG="$runner_jit"; fi
        exec setpriv --reuid="$uid" --regid="$gid" --init-groups --no-new-privs -- "$@"
    )
}

secret_file() { # $1 must be a regular file owned by root and readable by nobody else
    [[ -f "$1" && ! -L "$1" ]] || return 1
    [[ "$(stat -c %u "$1")" == 0 ]] || die "$1 must be owned by root"
    (( ($(stat -c '%#a' "$1") & 8#077) == 0 )) || die "$1 must not be readable by group or others (chmod 600)"
}

# The controller's just-in-time configuration for the next job: waited for, read once
# and deleted (it registers one runner, once). The folder and file must be root's.
jit_config() {
    local file="$jit_dir/jitconfig"
    [[ -d "$jit_dir" && "$(stat -c %u "$jit_dir")" == 0 ]] || die "$jit_dir: not a root-owned folder"
    (( ($(stat -c '%#a' "$jit_dir") & 8#022) == 0 )) || die "$jit_dir must be writable by root only"
    until secret_file "$file"; do sleep 5; done
    local config
    config=$(head -c 65536 "$file")
    rm -f "$file"
    [[ "$config" =~ ^[A-Za-z0-9+/=]+$ ]] || die "$file: not a base64 runner configuration"
    printf '%s\n' "$config"
}

registration_token() {
    local admin=${PERF_GUARD_RUNNER_ADMIN_TOKEN_FILE:-} file=${PERF_GUARD_RUNNER_TOKEN_FILE:-/etc/perf-guard-runner/token}
    if [[ -n "$admin" ]]; then
        secret_file "$admin" || die "$admin: no such file"
        local path=${url#https://github.com/} api
        if [[ "$path" == */* ]]; then api="repos/$path"; else api="orgs/$path"; fi
        # The admin token goes to curl through its config on stdin, not its arguments.
        { printf 'header = "Authorization: Bearer %s"\n' "$(< "$admin")"; } \
            | curl -fsS -X POST -K - -H "Accept: application/vnd.github+json" \
                "https://api.github.com/$api/actions/runners/registration-token" \
            | python3 -c 'import json, sys; print(json.load(sys.stdin)["token"])'
    elif [[ -n "${PERF_GUARD_RUNNER_TOKEN:-}" ]]; then
        printf '%s\n' "$PERF_GUARD_RUNNER_TOKEN"
    elif secret_file "$file"; then
        head -n 1 "$file"
    else
        die "no registration token: set PERF_GUARD_RUNNER_ADMIN_TOKEN_FILE or PERF_GUARD_RUNNER_TOKEN_FILE"
    fi
}

one_job() {
    kill_user_processes
    wipe_user_files
    # A fresh runner, work folder, HOME and TMPDIR: nothing a job wrote (the runner's
    # binaries included, which its user could modify) reaches the next job.
    rm -rf --one-file-system "$root"
    install -d -o root -g root -m 0755 "$root"
    install -d -o "$uid" -g "$gid" -m 0700 "$root/runner" "$root/work" "$root/home" "$root/tmp"
    tar -xzf "$tarball" -C "$root/runner" --no-same-owner
    chown -R "$uid:$gid" "$root/runner"
    {
        echo "TMPDIR=$root/tmp"
        if [[ -n "${PERF_GUARD_RUNNER_GPU:-}" ]]; then echo "CUDA_VISIBLE_DEVICES=$PERF_GUARD_RUNNER_GPU"; fi
        if [[ -n "${PERF_GUARD_PYTHON:-}" ]]; then echo "PERF_GUARD_PYTHON=$PERF_GUARD_PYTHON"; fi
    } > "$root/runner/.env"

    local status=0
    if [[ -n "$jit_dir" ]]; then
        echo "register-runner: $name waiting for a just-in-time configuration in $jit_dir"
        runner_jit=$(jit_config) || die "no just-in-time configuration"
        echo "register-runner: $name configured just in time; waiting for a job"
        (cd "$root/runner" && as_runner ./run.sh) || status=$?
        runner_jit=""
    else
        runner_token=$(registration_token) || die "could not get a registration token"
        [[ -n "$runner_token" ]] || die "empty registration token"
        (
            cd "$root/runner"
            as_runner ./config.sh --unattended --ephemeral --disableupdate --replace --url "$url" \
                --name "$name" --runnergroup "$group" --labels "self-hosted,linux,gpu,$trust,$kind" \
                --work "$root/work"
        )
        runner_token=""
        echo "register-runner: $name registered (ephemeral, group $group, labels gpu,$trust,$kind); waiting for a job"
        (cd "$root/runner" && as_runner ./run.sh) || status=$?
    fi
    echo "register-runner: $name finished its job (run.sh exit $status); cleaning up"
    kill_user_processes
    wipe_user_files
    rm -rf --one-file-system "$root"
    return "$status"
}

unit() {
    local self
    self=$(readlink -f "$0")
    cat << EOF
# /etc/systemd/system/perf-guard-runner@.service -- one instance per GPU runner:
#   systemctl enable --now perf-guard-runner@h100-0
# with its configuration in /etc/perf-guard-runner/h100-0.env (root, mode 0600).
[Unit]
Description=perf-guard ephemeral GPU runner %i
Wants=network-online.target
After=network-online.target

[Service]
Type=simple
EnvironmentFile=/etc/perf-guard-runner/%i.env
Environment=PERF_GUARD_RUNNER_NAME=%i
ExecStart=$self loop
# Everything in the unit's cgroup dies when it stops, and the loop kills the runner
# user's processes between jobs; a failed registration is retried.
KillMode=control-group
Restart=always
RestartSec=10
PrivateTmp=yes

[Install]
WantedBy=multi-user.target
EOF
}

case "${1:-}" in
    loop)
        config
        while true; do
            # A subshell, so that `set -e` stops a failing iteration (it would be ignored
            # in `one_job || ...`) and the loop goes on with a fresh one.
            set +e
            (one_job)
            status=$?
            set -e
            if (( status != 0 )); then echo "register-runner: iteration failed ($status); again in 10 s" >&2; fi
            sleep 10
        done
        ;;
    once)
        config
        one_job
        ;;
    unit) unit ;;
    -h | --help | help) usage 0 ;;
    *) usage 2 >&2 ;;
esac
