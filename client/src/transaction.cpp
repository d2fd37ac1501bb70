// Transaction: BEGIN/COMMIT/ROLLBACK on a client's connection.
#include <libpq-fe.h>

#include "hopper/client.hpp"

namespace hopper {

Transaction::Transaction(Client& client) : client_(client) {
    if (client_.tx_depth_ > 0) throw Error("25001", "a transaction is already open on this client");
    client_.ensure_connected();
    client_.conn_.exec("BEGIN");
    client_.tx_depth_ = 1;
}

Transaction::~Transaction() {
    if (!open_) return;
    try {
        rollback();
    } catch (...) {
        // A lost connection has rolled the transaction back already.
    }
}

void Transaction::commit() {
    if (!open_) throw Error("25000", "the transaction is already finished");
    open_ = false;
    client_.tx_depth_ = 0;
    // COMMIT of a failed transaction "succeeds" as a ROLLBACK: report it instead.
    if (PQtransactionStatus(client_.conn_.raw()) == PQTRANS_INERROR) {
        client_.conn_.exec("ROLLBACK");
        throw Error("25P02", "the transaction was aborted by an earlier error and rolled back");
    }
    client_.conn_.exec("COMMIT");
}

void Transaction::rollback() {
    if (!open_) return;
    open_ = false;
    client_.tx_depth_ = 0;
    if (client_.conn_.ok()) client_.conn_.exec("ROLLBACK");
}

}  // namespace hopper
