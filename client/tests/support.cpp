// Test plumbing; see support.hpp.
#include "support.hpp"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <memory>

#include <fmt/format.h>
#include <gtest/gtest.h>

namespace hopper::test {

namespace {

std::string g_conninfo;

// Created in SetUp (not at listing time: gtest_discover_tests runs the binary without a server).
class DatabaseEnvironment : public ::testing::Environment {
  public:
    explicit DatabaseEnvironment(std::string name) : name_(std::move(name)) {}

    void SetUp() override {
        Client admin("dbname=postgres");
        std::string db = admin.connection().escape_identifier(name_);
        admin.exec("DROP DATABASE IF EXISTS " + db + " WITH (FORCE)");
        admin.exec("CREATE DATABASE " + db);
        g_conninfo = fmt::format("dbname={}", name_);
        Client c(g_conninfo);
        c.exec("CREATE EXTENSION hopper");
    }

    void TearDown() override {
        try {
            Client admin("dbname=postgres");
            admin.exec("DROP DATABASE IF EXISTS " + admin.connection().escape_identifier(name_) +
                       " WITH (FORCE)");
        } catch (const std::exception& e) {
            // A leftover database is harmless: the next run of this suite drops it first.
            fmt::print(stderr, "could not drop test database {}: {}\n", name_, e.what());
        }
    }

  private:
    std::string name_;
};

}  // namespace

const std::string& conninfo() {
    return g_conninfo;
}

std::string unique_queue(const std::string& prefix) {
    static std::atomic<int> n{0};
    return fmt::format("{}_{}", prefix, ++n);
}

std::string named_conninfo(const std::string& application_name) {
    return fmt::format("{} application_name={}", g_conninfo, application_name);
}

int64_t waiting_in(Client& c, const std::string& application_name, const std::string& function) {
    return c
        .exec(
            "SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE application_name = $1"
            " AND state = 'active' AND wait_event_type = 'Extension'"
            " AND query LIKE '%' || $2 || '%'",
            application_name, function)
        .int64(0, 0);
}

bool waits_again_after_cancel(Client& c, const std::string& application_name,
                              const std::string& function) {
    Result cut = c.exec(
        "SELECT pid, query_start::text FROM pg_catalog.pg_stat_activity WHERE application_name = "
        "$1 AND state = 'active' AND query LIKE '%' || $2 || '%'",
        application_name, function);
    if (cut.rows() != 1) return false;
    const int64_t pid = cut.int64(0, 0);
    const std::string started(cut.text(0, 1));
    if (!c.exec("SELECT pg_catalog.pg_cancel_backend($1::int)", pid).boolean(0, 0)) return false;
    return eventually(
        [&] {
            return c.exec(
                        "SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE pid = $1 AND "
                        "state = 'active' AND wait_event_type = 'Extension' AND query_start > "
                        "$2::timestamptz",
                        pid, started)
                       .int64(0, 0) == 1;
        },
        std::chrono::seconds(30));
}

bool eventually(const std::function<bool()>& cond, std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
        if (cond()) return true;
        if (std::chrono::steady_clock::now() >= deadline) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
}

PoolerSetting::PoolerSetting(const char* value) {
    if (const char* v = std::getenv("HOPPER_POOLER")) before_ = v;
    ::setenv("HOPPER_POOLER", value, 1);
}

PoolerSetting::~PoolerSetting() {
    if (before_)
        ::setenv("HOPPER_POOLER", before_->c_str(), 1);
    else
        ::unsetenv("HOPPER_POOLER");
}

void register_database(const std::string& suite) {
    // GoogleTest takes ownership of the environment.
    ::testing::AddGlobalTestEnvironment(
        std::make_unique<DatabaseEnvironment>(fmt::format("hopper_gtest_{}_{}", suite, ::getpid()))
            .release());
}

}  // namespace hopper::test
