// Preloaded into a program under test (LD_PRELOAD) to set its wall clock HOPPER_TEST_SKEW_S
// seconds behind the real one, as on a machine whose clock is off from the server's. Monotonic
// clocks are left alone.
#include <dlfcn.h>

#include <cstdlib>
#include <ctime>

extern "C" int clock_gettime(clockid_t id, struct timespec* ts) {
    using Real = int (*)(clockid_t, struct timespec*);
    static Real real = reinterpret_cast<Real>(dlsym(RTLD_NEXT, "clock_gettime"));
    int r = real(id, ts);
    if (r == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) {
        const char* s = std::getenv("HOPPER_TEST_SKEW_S");
        if (s != nullptr) ts->tv_sec -= std::atol(s);
    }
    return r;
}
