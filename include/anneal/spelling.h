// Suggestions for misspelled names, for "did you mean ...?" in error
// messages: one definition of "close enough to suggest", shared by the
// command line (commands), config keys and the engine's names (optimizers,
// losses, schedules, ...).
#pragma once

#include <cstddef>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "anneal/error.h"

namespace anneal {

// Levenshtein distance (insertions, deletions, substitutions, each 1).
// Pure; O(|a| * |b|) time, O(|b|) memory.
std::size_t edit_distance(std::string_view a, std::string_view b);

// The most edits a suggestion may be from what was typed. Further than
// this, the "closest" known name is usually an unrelated word, and naming
// it misleads more than it helps.
inline constexpr std::size_t kMaxSuggestionDistance = 3;

// A known name as it may be typed (`spelling`) and the name to suggest for
// it (`suggests`). Usually the same; an alias, a name other tools use for
// the same thing ("learning_rate"), is matched by its own spelling and
// suggests anneal's name ("lr").
struct Spelling {
  std::string_view spelling;
  std::string_view suggests;
};

// The known name to suggest for `typed`: the one whose spelling is fewest
// edits away (the first of equally close ones), when that is at most
// kMaxSuggestionDistance edits and fewer edits than the spelling has
// characters (so a short name is never "corrected" into an unrelated one);
// nullopt otherwise. Pure.
std::optional<std::string> closest_name(std::string_view typed, std::span<const Spelling> known);
std::optional<std::string> closest_name(std::string_view typed, std::span<const std::string_view> known);

// "; did you mean 'X'?" naming closest_name(typed, known), or "" when no
// known name is close enough: the tail of every "unknown ..." message.
std::string did_you_mean(std::string_view typed, std::span<const Spelling> known);
std::string did_you_mean(std::string_view typed, std::span<const std::string_view> known);

// kUsage "unknown WHAT 'NAME'; did you mean 'X'? (known: a, b, c)" for a
// name that is none of `known` (the suggestion as did_you_mean gives it).
Error unknown_name_error(std::string_view what, std::string_view name,
                         std::initializer_list<const char*> known);

namespace engine {
// The engine's parsers (trainer.cc) name it from namespace engine, where it
// used to live; to go once those files are next edited.
using anneal::unknown_name_error;
}  // namespace engine

}  // namespace anneal
