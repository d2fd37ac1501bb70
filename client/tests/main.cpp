// Entry point of each GoogleTest program: the suite's database first, then the tests.
#include <gtest/gtest.h>

#include "support.hpp"

int main(int argc, char** argv) {
    ::testing::InitGoogleTest(&argc, argv);
    hopper::test::register_database(HOPPER_TEST_SUITE);
    return RUN_ALL_TESTS();
}
