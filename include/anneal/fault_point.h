// Fault points: named places where a test build can stop, kill or fail the
// process, so a test reaches "the moment after the objects are written and
// before the catalog commit" exactly, whatever the machine's speed.
//
// The code calls fault_point("import.objects-written") at each such place.
// What that does is decided at link time, not by a flag:
//   - the packaged `anneal` links store/fault/off.cc: fault_point does
//     nothing and reads no environment, so no variable can make a user's
//     binary crash on purpose;
//   - `anneal-faults` (tests only, never installed) and the unit tests link
//     store/fault/armed.cc, which obeys ANNEAL_FAULT (below).
//
// ANNEAL_FAULT (read when the first point is reached) is a ';'-separated list of POINT[@N]=ACTION. The action fires
// on the Nth time this process reaches POINT (default 1) and only then:
//   crash    SIGKILL to itself: the process dies as on `kill -9` or a power
//            cut of the process (no destructors, no flush, locks released by
//            the kernel).
//   segv, abort  that signal with its default action (a crash the way a bug
//            crashes: a core dump, a parent sees the signal).
//   fail     throws anneal::Error (kFailure) "fault point POINT: injected
//            failure", as an I/O error there would.
//   enospc   throws anneal::Error (kFailure) ending in "No space left on
//            device", as a write on a full disk would.
//   pause    a handshake with the test through two FIFOs the test made in
//            $ANNEAL_FAULT_DIR: the process opens `reached` for writing and
//            writes "POINT PID\n" (blocking until the test reads), then
//            opens `resume` for reading and blocks until the test writes it
//            and closes. No sleeps and no polling on either side. When
//            $ANNEAL_FAULT_DIR/POINT/ is a directory, its two FIFOs serve
//            that point instead: two threads of one process paused at once
//            are then released one at a time.
// POINT may end in '*' to match every point with that prefix. A malformed
// ANNEAL_FAULT is reported on stderr and aborts the process, so a test never
// runs believing a fault is armed when it is not.
//
// Thread-safe. Point names are fixed strings (or a fixed prefix and the
// name of what is being worked on); tests/e2e/crash_matrix_test.sh lists
// every point in the sources and fails when one has no crash case.
#pragma once

#include <string_view>

namespace anneal {

void fault_point(std::string_view name);

}  // namespace anneal
