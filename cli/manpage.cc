// anneal(1) and the bash completion script, generated from the command table
// and main.cc's help text. Everything here reads the same strings --help
// prints; nothing is written twice, so the page cannot say something the
// binary does not.
#include "manpage.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <ostream>
#include <set>
#include <sstream>

#include "anneal/version.h"

namespace anneal::cli {
namespace {

// One option as the man page and the completion need it, taken from
// boost's description of it.
struct OptionInfo {
  std::string long_name;   // "--output"
  std::string short_name;  // "-o", or empty
  std::string parameter;   // "FILE", "FRACTION (=0.2)", or empty for a switch
  std::string description;
};

std::vector<OptionInfo> option_infos(const po::options_description& options) {
  std::vector<OptionInfo> out;
  for (const auto& o : options.options()) {
    OptionInfo info;
    info.long_name = "--" + o->long_name();
    // canonical_display_name gives "-x" only when the option has a short name.
    std::string short_name = o->canonical_display_name(po::command_line_style::allow_dash_for_short);
    if (short_name.size() == 2 && short_name[0] == '-') info.short_name = short_name;
    info.parameter = o->format_parameter();
    info.description = o->description();
    out.push_back(std::move(info));
  }
  return out;
}

// The value name of a parameter: "FRACTION (=0.2)" -> "FRACTION".
std::string value_name(const std::string& parameter) { return parameter.substr(0, parameter.find(' ')); }

// Escapes text for a roff text line. A '-' that starts a word (an option) is
// written \- so it renders and copies as the ASCII minus an option needs; a
// hyphen inside a word ("owner-only") stays a hyphen.
std::string roff(const std::string& text) {
  std::string out;
  char previous = ' ';
  for (char c : text) {
    if (c == '\\') out += "\\e";
    else if (c == '-' && !std::isalnum(static_cast<unsigned char>(previous))) out += "\\-";
    else out += c;
    previous = c;
  }
  // A line starting with . or ' would be read as a request.
  if (!out.empty() && (out[0] == '.' || out[0] == '\'')) out.insert(0, "\\&");
  return out;
}

std::string trim(const std::string& s) {
  std::size_t b = s.find_first_not_of(' ');
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(' ') - b + 1);
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

void write_option(std::ostream& out, const OptionInfo& o) {
  out << ".TP\n";
  if (!o.short_name.empty()) out << "\\fB" << roff(o.short_name) << "\\fR, ";
  out << "\\fB" << roff(o.long_name) << "\\fR";
  if (!o.parameter.empty()) {
    std::string name = value_name(o.parameter);
    out << " \\fI" << roff(name) << "\\fR" << roff(o.parameter.substr(name.size()));
  }
  out << "\n" << roff(o.description) << "\n";
}

// Help text paragraphs as roff. --help indents tables by two spaces: a row
// "  key   text" becomes a tagged paragraph, any other indented line is kept
// as is in a no-fill block; plain lines are filled text.
void write_paragraphs(std::ostream& out, const std::string& text) {
  bool in_block = false;
  bool need_paragraph = true;
  auto end_block = [&] {
    if (in_block) out << ".fi\n.RE\n";
    in_block = false;
  };
  for (const auto& line : lines_of(text)) {
    if (trim(line).empty()) {
      end_block();
      need_paragraph = true;
      continue;
    }
    if (line.starts_with("  ")) {
      std::string row = trim(line);
      std::size_t gap = row.find("  ");
      if (gap != std::string::npos) {
        end_block();
        out << ".TP\n.B " << roff(row.substr(0, gap)) << "\n" << roff(trim(row.substr(gap))) << "\n";
        need_paragraph = true;
      } else {
        if (!in_block) out << ".RS\n.nf\n";
        in_block = true;
        out << roff(row) << "\n";
      }
      continue;
    }
    end_block();
    if (need_paragraph) out << ".PP\n";
    need_paragraph = false;
    out << roff(trim(line)) << "\n";
  }
  end_block();
}

// "Exit codes:\n  0   success...\n" -> (code, meaning) rows.
std::vector<std::pair<std::string, std::string>> exit_code_rows(const std::string& text) {
  std::vector<std::pair<std::string, std::string>> rows;
  for (const auto& line : lines_of(text)) {
    if (!line.starts_with("  ")) continue;
    std::string row = trim(line);
    std::size_t space = row.find(' ');
    rows.emplace_back(row.substr(0, space), trim(row.substr(space)));
  }
  return rows;
}

}  // namespace

void write_manpage(std::ostream& out, const HelpText& help) {
  std::string what = help.description;
  if (!what.empty() && what.back() == '.') what.pop_back();
  if (!what.empty()) what[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(what[0])));

  // No date in .TH: the page is a function of the binary's text and version,
  // so builds of one version give byte-identical pages.
  out << ".\\\" Generated by `anneal --help-man` from the text of anneal --help; do not edit.\n"
      << ".TH ANNEAL 1 \"\" \"anneal " << version() << "\" \"User Commands\"\n"
      << ".SH NAME\nanneal \\- " << roff(what) << "\n"
      << ".SH SYNOPSIS\n" << roff(help.usage) << "\n.br\n"
      << "anneal COMMAND \\-\\-help\n"
      << ".SH DESCRIPTION\n" << roff(help.description) << "\n"
      << ".SH OPTIONS\n";
  for (const auto& o : option_infos(help.global)) write_option(out, o);

  out << ".SH COMMANDS\n";
  for (const auto& c : commands()) {
    if (c.hidden) continue;
    out << ".SS \"" << roff(c.name) << "\"\n"
        << "\\fBanneal " << roff(c.name) << "\\fR" << (c.synopsis.empty() ? "" : " ") << roff(c.synopsis)
        << "\n"
        << ".PP\n" << roff(c.summary) << "\n";
    write_paragraphs(out, c.details);
    out << ".PP\nOptions:\n.RS\n";
    for (const auto& o : option_infos(help.command_options(c))) write_option(out, o);
    out << ".RE\n";
  }

  out << ".SH \"EXIT STATUS\"\n";
  for (const auto& [code, meaning] : exit_code_rows(help.exit_codes))
    out << ".TP\n.B " << roff(code) << "\n" << roff(meaning) << "\n";
}

namespace {

// How completion treats a value: a file name, a directory, some other value
// (offer nothing), or no value at all (a switch).
std::string value_kind(const std::string& name) {
  if (name.empty()) return "";
  if (name == "DIR") return "dir";
  if (name.find("FILE") != std::string::npos || name == "CONFIG" || name.ends_with(".csv"))
    return "file";
  return "value";
}

// Quotes a word for a bash case pattern or echo.
std::string quoted(const std::string& word) { return "\"" + word + "\""; }

}  // namespace

void write_bash_completion(std::ostream& out, const HelpText& help) {
  // Command words: every command name and each of its leading parts ("data"
  // of "data import"), mapped to the words that may follow them.
  std::map<std::string, std::vector<std::string>> next_words;
  std::set<std::string> command_words;
  for (const auto& c : commands()) {
    if (c.hidden) continue;
    std::istringstream parts(c.name);
    std::string prefix, part;
    while (parts >> part) {
      auto& next = next_words[prefix];
      if (std::find(next.begin(), next.end(), part) == next.end()) next.push_back(part);
      prefix = prefix.empty() ? part : prefix + " " + part;
      command_words.insert(prefix);
    }
  }

  out << "# bash completion for anneal(1). Generated by `anneal --completion bash` from\n"
         "# the command table that --help prints; do not edit.\n\n";

  out << "# _anneal_is_command WORDS: whether WORDS (\"data\", \"data import\") name a command or start one.\n"
         "_anneal_is_command() {\n  case \"$1\" in\n";
  for (const auto& w : command_words) out << "    " << quoted(w) << ") return 0 ;;\n";
  out << "  esac\n  return 1\n}\n\n";

  out << "# _anneal_next_words WORDS: the command words that may follow WORDS.\n"
         "_anneal_next_words() {\n  case \"$1\" in\n";
  for (const auto& [prefix, next] : next_words) {
    std::string words;
    for (const auto& w : next) words += (words.empty() ? "" : " ") + w;
    out << "    " << quoted(prefix) << ") echo " << quoted(words) << " ;;\n";
  }
  out << "  esac\n}\n\n";

  // Options per command; the global options before any command word, and
  // under a group word such as "data".
  std::vector<std::pair<std::string, std::vector<OptionInfo>>> option_sets;
  for (const auto& c : commands())
    if (!c.hidden) option_sets.emplace_back(c.name, option_infos(help.command_options(c)));
  std::vector<OptionInfo> global = option_infos(help.global);

  auto names = [](const std::vector<OptionInfo>& options) {
    std::string all;
    for (const auto& o : options) {
      all += (all.empty() ? "" : " ") + o.long_name;
      if (!o.short_name.empty()) all += " " + o.short_name;
    }
    return all;
  };
  out << "# _anneal_options CMD: the options CMD accepts.\n"
         "_anneal_options() {\n  case \"$1\" in\n";
  for (const auto& [name, options] : option_sets)
    out << "    " << quoted(name) << ") echo " << quoted(names(options)) << " ;;\n";
  out << "    *) echo " << quoted(names(global)) << " ;;\n  esac\n}\n\n";

  auto kinds = [&](const std::string& pattern_command, const std::vector<OptionInfo>& options) {
    for (const auto& o : options) {
      std::string kind = value_kind(value_name(o.parameter));
      if (kind.empty()) continue;
      out << "    " << pattern_command << ":" << o.long_name;
      if (!o.short_name.empty()) out << "|" << pattern_command << ":" << o.short_name;
      out << ") echo " << kind << " ;;\n";
    }
  };
  out << "# _anneal_option_kind CMD OPTION: file, dir or value when OPTION takes a value.\n"
         "_anneal_option_kind() {\n  case \"$1:$2\" in\n";
  for (const auto& [name, options] : option_sets) kinds(quoted(name), options);
  kinds("*", global);
  out << "  esac\n}\n\n";

  out << "# _anneal_positional_kind CMD N: file or dir when CMD's Nth (from 0) argument is one.\n"
         "_anneal_positional_kind() {\n  case \"$1:$2\" in\n";
  for (const auto& c : commands()) {
    if (c.hidden) continue;
    for (std::size_t i = 0; i < c.positional.size(); ++i) {
      std::string name = c.positional[i];
      bool many = name.ends_with("...");
      if (many) name.resize(name.size() - 3);
      std::string kind = value_kind(name);
      if (kind != "file" && kind != "dir") continue;
      out << "    " << quoted(c.name + ":" + (many ? "" : std::to_string(i))) << (many ? "*" : "")
          << ") echo " << kind << " ;;\n";
    }
  }
  out << "  esac\n}\n\n";

  out << R"BASH(_anneal() {
  local cur prev words cword
  _init_completion || return

  # Walk the words before the cursor: command words, options (skipping the
  # values of those that take one) and positional arguments.
  local cmd="" npos=0 i w
  for ((i = 1; i < cword; i++)); do
    w=${words[i]}
    if [[ $w == -* ]]; then
      [[ $w != *=* && -n $(_anneal_option_kind "$cmd" "$w") ]] && ((i++))
      continue
    fi
    if ((npos == 0)) && _anneal_is_command "${cmd:+$cmd }$w"; then
      cmd=${cmd:+$cmd }$w
    else
      ((npos++))
    fi
  done

  case $(_anneal_option_kind "$cmd" "$prev") in
    file) _filedir; return ;;
    dir) _filedir -d; return ;;
    value) return ;;
  esac
  if [[ $cur == -* ]]; then
    mapfile -t COMPREPLY < <(compgen -W "$(_anneal_options "$cmd")" -- "$cur")
    return
  fi
  if ((npos == 0)); then
    local next
    next=$(_anneal_next_words "$cmd")
    if [[ -n $next ]]; then
      mapfile -t COMPREPLY < <(compgen -W "$next" -- "$cur")
      return
    fi
  fi
  case $(_anneal_positional_kind "$cmd" "$npos") in
    file) _filedir ;;
    dir) _filedir -d ;;
  esac
} &&
  complete -F _anneal anneal
)BASH";
}

}  // namespace anneal::cli
