// anneal::Error: the one way errors travel in anneal.
//
// Every layer below cli/ reports failure by throwing anneal::Error (or letting
// a std::exception escape for programming errors). The kind decides the exit
// code; the message is one line that says where (file:line:column, flag, key,
// object) and what was expected. cli/ catches it once, prints the message and
// exits with exit_code(kind). Nothing catches an Error to drop it silently.
#pragma once

#include <stdexcept>
#include <string>

namespace anneal {

enum class ErrorKind {
  kFailure,   // anything else: I/O, corruption, internal            -> exit 1
  kUsage,     // a bad flag, option value or config key             -> exit 2
  kBadData,   // malformed input data (CSV, IDX, LIBSVM, ...)        -> exit 65
  kNotFound,  // a named dataset, version, model or run does not exist -> exit 1
  kCorrupt,   // an object or catalog row failed verification       -> exit 1
  kBusy,      // a lock is held by another process                  -> exit 75
};

// Process exit codes: the one place they are defined. README.md documents
// them; cli/main.cc's help text (and the man page made from it) is checked
// at compile time to describe exactly the codes in kExitCodes.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitGateRefused = 4;  // trained, but a gate refused the promotion
inline constexpr int kExitBadData = 65;     // sysexits.h EX_DATAERR
inline constexpr int kExitBusy = 75;        // sysexits.h EX_TEMPFAIL
inline constexpr int kExitInterrupted = 130;  // 128 + SIGINT, as a shell reports it: stopped by a signal
                                              // after writing a checkpoint

// Every exit code anneal uses, in ascending order.
inline constexpr int kExitCodes[] = {kExitOk,      kExitFailure, kExitUsage,      kExitGateRefused,
                                     kExitBadData, kExitBusy,    kExitInterrupted};

inline int exit_code(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kUsage: return kExitUsage;
    case ErrorKind::kBadData: return kExitBadData;
    case ErrorKind::kBusy: return kExitBusy;
    case ErrorKind::kFailure:
    case ErrorKind::kNotFound:
    case ErrorKind::kCorrupt: return kExitFailure;
  }
  return kExitFailure;
}

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message)
      : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

// Shorthands for the common kinds, so call sites read as what went wrong.
inline Error usage_error(const std::string& m) { return Error(ErrorKind::kUsage, m); }
inline Error data_error(const std::string& m) { return Error(ErrorKind::kBadData, m); }
inline Error not_found(const std::string& m) { return Error(ErrorKind::kNotFound, m); }
inline Error corrupt(const std::string& m) { return Error(ErrorKind::kCorrupt, m); }
inline Error failure(const std::string& m) { return Error(ErrorKind::kFailure, m); }
inline Error busy(const std::string& m) { return Error(ErrorKind::kBusy, m); }

}  // namespace anneal
