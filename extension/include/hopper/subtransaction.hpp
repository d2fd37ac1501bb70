// One step in a subtransaction of its own, so that its failure undoes only that step: what
// PL/pgSQL's BEGIN ... EXCEPTION does, for a C++ caller.
#pragma once

#include <optional>

#include "hopper/boundary.hpp"

extern "C" {
#include "access/xact.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
}

namespace hopper {

// Runs f in a subtransaction. If f raises a PostgreSQL error, the subtransaction is rolled back
// and the error returned; a cancel or shutdown (SQLSTATE class 57) and any other exception are
// raised again after the rollback. Otherwise the subtransaction is kept and nullopt returned.
template <typename F>
std::optional<PgError> in_subtransaction(F&& f) {
    MemoryContext context = CurrentMemoryContext;
    ResourceOwner owner = CurrentResourceOwner;
    auto end = [&](bool commit) {
        pg_guard([&] {
            if (commit)
                ReleaseCurrentSubTransaction();
            else
                RollbackAndReleaseCurrentSubTransaction();
            MemoryContextSwitchTo(context);
            CurrentResourceOwner = owner;
        });
    };
    pg_guard([] { BeginInternalSubTransaction(nullptr); });
    std::optional<PgError> failed;
    try {
        f();
    } catch (const PgError& e) {
        failed = e;
    } catch (...) {
        end(false);
        throw;
    }
    end(!failed);
    if (failed && ERRCODE_TO_CATEGORY(failed->sqlstate()) == ERRCODE_OPERATOR_INTERVENTION)
        throw *failed;
    return failed;
}

}  // namespace hopper
