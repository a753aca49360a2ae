// anneal::Error as the command line says it. Layers below cli/ name what an
// error is about and what would fix it as concepts (error.h); this is the
// one place that turns them into the flags and commands a user types.
#pragma once

#include <string>

#include "anneal/error.h"

namespace anneal::cli {

// The message to print for `error`: its subject as the flag that gave it,
// its detail, and its remedy as the flag or command that does it
// ("-o out.csv: file exists (pass --force to replace it)"). An error with
// neither prints as what().
std::string error_text(const Error& error);

// The flag or command that does `remedy` (naming `argument`, if it takes
// one), with its separator: " (pass --force to replace it)". "" for kNone.
std::string remedy_command(Remedy remedy, const std::string& argument);

}  // namespace anneal::cli
