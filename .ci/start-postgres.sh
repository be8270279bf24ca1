# Start a throwaway PostgreSQL server for the tests that share one Optuna study
# between workers (tests marked `postgres`). Meant to be *sourced* by .ci/run:
#
#     source .ci/start-postgres.sh || exit 1
#
# It installs PostgreSQL if missing (Debian's package), initialises a cluster in
# a temp folder (as an unprivileged user when run as root: postgres refuses to
# run as root), starts it on 127.0.0.1 on a free port, creates a database, and
# exports:
#
#     PURLIN_TEST_POSTGRES_URL=postgresql://purlin@127.0.0.1:PORT/purlin_test
#     PURLIN_REQUIRE_POSTGRES=1   # postgres tests FAIL, not skip, without a server
#
# `purlin_stop_postgres` stops the server and removes its folder; it runs at the
# caller's exit unless the caller already has an EXIT trap (then call it).
# Being sourced, it never calls `exit` and leaves the caller's shell options alone.

purlin_start_postgres() {
    # Tests must not skip silently in CI: require the server whatever happens next.
    export PURLIN_REQUIRE_POSTGRES=1

    local bin
    bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
    if [ -z "$bin" ] || [ ! -x "$bin/initdb" ]; then
        echo "start-postgres: installing PostgreSQL (apt-get install postgresql)" >&2
        DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null &&
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null || {
            echo "start-postgres: cannot install PostgreSQL" >&2
            return 1
        }
        bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
    fi
    if [ -z "$bin" ] || [ ! -x "$bin/initdb" ]; then
        echo "start-postgres: no initdb under /usr/lib/postgresql/*/bin" >&2
        return 1
    fi

    # Who runs the server: ourselves, or (as root) an unprivileged user.
    local run_as=()
    local owner
    owner=$(id -un)
    if [ "$(id -u)" = 0 ]; then
        owner=postgres
        if ! id -u "$owner" >/dev/null 2>&1; then
            owner=purlin-pg
            id -u "$owner" >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin "$owner" || {
                echo "start-postgres: cannot create user $owner" >&2
                return 1
            }
        fi
        if command -v runuser >/dev/null 2>&1; then
            run_as=(runuser -u "$owner" --)
        else
            run_as=(su -s /bin/sh "$owner" -c)
        fi
    fi

    PURLIN_PG_DIR=$(mktemp -d /tmp/purlin-pg.XXXXXX) || return 1
    export PURLIN_PG_DIR
    chmod 755 "$PURLIN_PG_DIR"
    [ "$(id -u)" = 0 ] && chown "$owner" "$PURLIN_PG_DIR"

    local port
    port=$(_purlin_free_port) || {
        echo "start-postgres: no free port found" >&2
        return 1
    }
    export PURLIN_PG_BIN=$bin PURLIN_PG_RUN_AS="${run_as[*]}"

    # Trust auth on the loopback only; fsync off: a test database need not survive a crash.
    _purlin_pg "$bin/initdb" -D "$PURLIN_PG_DIR/data" -U purlin -A trust --no-sync -E UTF8 >"$PURLIN_PG_DIR/initdb.log" 2>&1 || {
        echo "start-postgres: initdb failed:" >&2
        tail -n 20 "$PURLIN_PG_DIR/initdb.log" >&2
        return 1
    }
    _purlin_pg "$bin/pg_ctl" -D "$PURLIN_PG_DIR/data" -l "$PURLIN_PG_DIR/server.log" -w -t 60 \
        -o "-c listen_addresses=127.0.0.1 -p $port -k $PURLIN_PG_DIR -c fsync=off -c max_connections=50" start >/dev/null || {
        echo "start-postgres: the server did not start:" >&2
        tail -n 20 "$PURLIN_PG_DIR/server.log" >&2
        return 1
    }
    "$bin/createdb" -h 127.0.0.1 -p "$port" -U purlin purlin_test || {
        echo "start-postgres: createdb failed" >&2
        return 1
    }
    export PURLIN_TEST_POSTGRES_URL="postgresql://purlin@127.0.0.1:$port/purlin_test"
    echo "start-postgres: PostgreSQL $("$bin/postgres" --version | awk '{print $3}') at $PURLIN_TEST_POSTGRES_URL" >&2
    if [ -z "$(trap -p EXIT)" ]; then
        trap purlin_stop_postgres EXIT
    fi
}

# A free TCP port on the loopback: the kernel's pick if Python is here, else a
# random high port that nothing answers on.
_purlin_free_port() {
    local py port
    for py in python3 python; do
        if command -v "$py" >/dev/null 2>&1; then
            "$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null && return 0
        fi
    done
    for _ in 1 2 3 4 5 6 7 8 9 10; do
        port=$((20000 + RANDOM % 40000))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            echo "$port"
            return 0
        fi
    done
    return 1
}

# Run a server binary as the owner chosen above (root cannot run postgres).
_purlin_pg() {
    if [ -z "${PURLIN_PG_RUN_AS:-}" ]; then
        "$@"
    elif [ "${PURLIN_PG_RUN_AS#su }" != "$PURLIN_PG_RUN_AS" ]; then
        # su takes one command string: quote each argument.
        local quoted
        quoted=$(printf '%q ' "$@")
        $PURLIN_PG_RUN_AS "$quoted"
    else
        $PURLIN_PG_RUN_AS "$@"
    fi
}

purlin_stop_postgres() {
    if [ -n "${PURLIN_PG_DIR:-}" ] && [ -d "$PURLIN_PG_DIR/data" ]; then
        _purlin_pg "$PURLIN_PG_BIN/pg_ctl" -D "$PURLIN_PG_DIR/data" -m fast -w stop >/dev/null 2>&1
        rm -rf "$PURLIN_PG_DIR"
    fi
}

purlin_start_postgres
