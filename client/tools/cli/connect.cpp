// The tool's connection: --db or the PG* environment, and the client_encoding its arguments and
// output are in.
#include <cctype>
#include <cstdlib>
#include <memory>
#include <string_view>

#include <fmt/format.h>
#include <libpq-fe.h>

#include "args.hpp"
#include "commands.hpp"
#include "hopper/client.hpp"
#include "hopper/utf8.hpp"

namespace hopper::cli {

namespace {

// Whether the terminal's text is UTF-8, by the locale the environment names (as setlocale would
// read it: LC_ALL, then LC_CTYPE, then LANG).
bool locale_is_utf8() {
    for (const char* var : {"LC_ALL", "LC_CTYPE", "LANG"}) {
        const char* v = std::getenv(var);
        if (v == nullptr || *v == '\0') continue;
        std::string name(v);
        for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        return name.find("utf-8") != std::string::npos || name.find("utf8") != std::string::npos;
    }
    return false;
}

// Whether the connection string itself names a client_encoding.
bool conninfo_names_encoding(const std::string& conninfo) {
    char* err = nullptr;
    std::unique_ptr<PQconninfoOption, decltype(&PQconninfoFree)> opts(
        PQconninfoParse(conninfo.c_str(), &err), &PQconninfoFree);
    if (err != nullptr) PQfreemem(err);
    if (!opts) return false;  // the connection reports what is wrong with it
    for (const PQconninfoOption* o = opts.get(); o->keyword != nullptr; ++o)
        if (std::string_view(o->keyword) == "client_encoding" && o->val != nullptr && *o->val)
            return true;
    return false;
}

}  // namespace

Client connect(const Args& a) {
    Client c(a.option("db").value_or(""));
    // JSON is UTF-8 (RFC 8259): the server converts what it returns from the database's encoding,
    // where a session of another (PGCLIENTENCODING=LATIN1) printed Latin-1 bytes as JSON.
    const bool json = a.flag("json");
    // A session that names no encoding takes the database's, and the server stored a UTF-8
    // terminal's arguments to a LATIN1 database unconverted ("café" as "cafÃ©"), and printed its
    // text as Latin-1. As psql does at a terminal (client_encoding=auto), ask for the locale's
    // when it is UTF-8 and neither PGCLIENTENCODING nor the connection string names one; in
    // pipes too, since a script's arguments come in the locale's encoding as well.
    const char* env_encoding = std::getenv("PGCLIENTENCODING");  // libpq ignores it empty
    const bool utf8_terminal = locale_is_utf8() &&
                               (env_encoding == nullptr || *env_encoding == '\0') &&
                               !conninfo_names_encoding(a.option("db").value_or(""));
    if (json || utf8_terminal) c.connection().on_connect("SET client_encoding = 'UTF8'");
    // The server would refuse such text naming no argument: this names it.
    if (utf8_session(c)) {
        auto check = [json](const std::string& what, const std::string& value) {
            if (valid_utf8(value) != value)
                throw UsageError(
                    fmt::format("{} \"{}\" is not valid UTF-8, as the database's text "
                                "must be (client_encoding UTF8{})",
                                what, escaped_utf8(value), json ? ", which --json sets" : ""));
        };
        for (const auto& p : a.positional) check("argument", p);
        for (const auto& [name, value] : a.options)
            if (name != "db") check("--" + name, value);
    }
    return c;
}

}  // namespace hopper::cli
