# Sourced by bench/run.sh and bench/peers.sh: fresh_cluster DB throws away the cluster that
# HOPPER_CLUSTER names, starts a new one with the project's settings (test/cluster.sh), points
# libpq's environment at database DB and creates it with bench/setup.sql loaded. Every bench run
# starts from an empty cluster so that no earlier run's tables, bloat or statistics weigh on it.
fresh_cluster() {
    local db=$1
    test/cluster.sh destroy >/dev/null 2>&1 || true
    test/cluster.sh start
    eval "$(test/cluster.sh env)"
    export PGHOST PGPORT PGUSER
    export PGDATABASE=$db
    psql -XAtq -d postgres -v ON_ERROR_STOP=1 -c "CREATE DATABASE $db" >/dev/null
    psql -XAtq -v ON_ERROR_STOP=1 -f bench/setup.sql >/dev/null
}
