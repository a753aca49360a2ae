// The packaged binary's fault points: nothing happens at them, and nothing
// (no environment variable) can make anything happen. See fault_point.h.
#include "anneal/fault_point.h"

namespace anneal {

void fault_point(std::string_view) {}

}  // namespace anneal
