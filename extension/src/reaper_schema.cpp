// Whether the schema the reaper reaches by the name hopper.* is the extension's own, owned by a
// superuser. The reaper runs with a superuser's rights: were the name to lead elsewhere (the
// extension's schema renamed and another one called hopper, a schema given away), whoever owns
// that schema would have the reaper run what they planted in it.
#include "hopper/reaper.hpp"

extern "C" {
#include "commands/extension.h"
}

namespace hopper::reaper {

Installed installed() {
    if (!pg_guard([] { return OidIsValid(get_extension_oid("hopper", true)); }))
        return Installed::absent;
    spi::Connection conn;
    static spi::Statement st(
        "SELECT n.nspname = 'hopper' AND r.rolsuper "
        "FROM pg_catalog.pg_extension e "
        "JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace "
        "JOIN pg_catalog.pg_authid r ON r.oid = n.nspowner "
        "WHERE e.extname = 'hopper'",
        {});
    spi::Result r = conn.exec(st, {});
    Installed out = r.empty()          ? Installed::absent
                    : r.get_bool(0, 1) ? Installed::in_place
                                       : Installed::misplaced;
    conn.finish();
    return out;
}

}  // namespace hopper::reaper
