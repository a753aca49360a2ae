// Helpers for naming things in errors: "unknown optimizer 'adma'; did you
// mean 'adam'? (known: sgd, adam, adamw)".
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>

#include "anneal/error.h"

namespace anneal::engine {

Error unknown_name_error(std::string_view what, std::string_view name,
                         std::initializer_list<const char*> known);

}  // namespace anneal::engine
