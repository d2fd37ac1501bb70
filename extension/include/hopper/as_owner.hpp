// Running a few statements with another role's rights, as PostgreSQL's own code does where it acts
// for a table's owner (ri_triggers.c, REFRESH MATERIALIZED VIEW, autovacuum).
#pragma once

extern "C" {
#include "postgres.h"
#include "miscadmin.h"
}

namespace hopper {

// `owner` as the current user while it lives, in a security-restricted operation: code the
// statements run on the owner's behalf (triggers, policies, index functions) cannot change the
// session it runs in. Restored however the scope ends: every PostgreSQL error reaches C++ as an
// exception (pg_guard), which unwinds through the destructor; and should one not, the
// (sub)transaction's abort restores the user it started with.
//
// Where the owner may do more than the caller, what runs under it must not depend on the caller's
// search_path, which the caller chooses: such statements name every table, function, operator and
// type by schema, or a function of the caller's would run with the owner's rights.
class AsOwner {
  public:
    explicit AsOwner(Oid owner) {
        GetUserIdAndSecContext(&user_, &context_);
        SetUserIdAndSecContext(
            owner, context_ | SECURITY_LOCAL_USERID_CHANGE | SECURITY_RESTRICTED_OPERATION);
    }
    ~AsOwner() { SetUserIdAndSecContext(user_, context_); }
    AsOwner(const AsOwner&) = delete;
    AsOwner& operator=(const AsOwner&) = delete;

  private:
    Oid user_ = InvalidOid;
    int context_ = 0;
};

}  // namespace hopper
