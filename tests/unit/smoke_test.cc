#include <gtest/gtest.h>

#include "anneal/version.h"

TEST(Version, IsSet) { EXPECT_FALSE(anneal::version().empty()); }
