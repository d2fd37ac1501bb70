// Transaction: BEGIN/COMMIT/ROLLBACK on a client's connection.
#include <libpq-fe.h>

#include "hopper/client.hpp"

namespace hopper {

Transaction::Transaction(Client& client) : client_(client) {
    if (client_.tx_depth_ > 0) throw Error("25001", "a transaction is already open on this client");
    client_.ensure_connected();
    // A BEGIN run through exec: another BEGIN would be only a warning, and this Transaction's
    // commit or rollback would end the caller's transaction as well.
    auto st = PQtransactionStatus(client_.conn_.raw());
    if (st == PQTRANS_INTRANS || st == PQTRANS_INERROR)
        throw Error("25001",
                    "the connection is already in a transaction the client did not open (a "
                    "BEGIN run through exec): end it first");
    client_.conn_.exec("BEGIN");
    client_.tx_depth_ = 1;
}

Transaction::~Transaction() {
    if (!open_) return;
    try {
        rollback();
    } catch (...) {
        // rollback() has ended the transaction however it failed (see there).
    }
}

void Transaction::ended() {
    open_ = false;
    client_.tx_depth_ = 0;
}

void Transaction::commit() {
    if (!open_) throw Error("25000", "the transaction is already finished");
    Connection& conn = client_.conn_;
    if (conn.ok()) {
        switch (PQtransactionStatus(conn.raw())) {
            case PQTRANS_IDLE:
                // A COMMIT or ROLLBACK run through exec ended it, and whatever ran after that
                // committed on its own: a COMMIT now would report that as this transaction.
                ended();
                throw Error("25000", "the transaction was ended by a statement inside it");
            case PQTRANS_INERROR:
                // COMMIT of a failed transaction "succeeds" as a ROLLBACK: report it instead.
                rollback();
                throw Error("25P02",
                            "the transaction was aborted by an earlier error and rolled back");
            default:
                break;
        }
    }
    try {
        conn.exec("COMMIT");
    } catch (...) {
        // A COMMIT refused (a deferred constraint, a serialization failure) or lost with its
        // connection has ended the transaction; one that could not be sent (a pull still in
        // flight) has not, and the transaction stays open for rollback() or the destructor.
        if (!conn.ok() || !conn.in_transaction()) ended();
        throw;
    }
    ended();
}

void Transaction::rollback() {
    if (!open_) return;
    Connection& conn = client_.conn_;
    if (client_.pull_sent_) {
        // A pull begun inside the transaction holds the connection, and a ROLLBACK cannot be
        // sent until it ends. The connection is dropped instead, which the server takes as a
        // rollback (once the pull's backend notices, at the latest when its wait ends): a cancel
        // would wait for the server's answer, for ever from a host that stopped answering, and
        // this runs in a destructor.
        conn.close();
        try {
            client_.finish_pull();
        } catch (const std::exception&) {
            // The pull is over with its connection.
        }
    }
    if (conn.ok()) {
        try {
            conn.exec("ROLLBACK");
        } catch (const ConnectionError&) {
            // The connection went, and the transaction with it.
        } catch (const std::exception&) {
            // Still not sent (a statement sent through connection() is running): the connection
            // is dropped, which makes the server roll back. Left open, the transaction would be
            // committed by the next Transaction's commit, what was to be undone with it.
            conn.close();
        }
    }
    ended();
}

}  // namespace hopper
