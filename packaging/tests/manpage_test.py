#!/usr/bin/env python3
"""anneal(1) says everything --help says: every command, its usage line,
summary, details and options, the global options and the exit codes.

usage: manpage_test.py ANNEAL MANPAGE

The page is generated from the same strings (cli/manpage.cc); this test
catches a generator that drops or mangles any of them, and an installed page
(MANPAGE, build/anneal.1) that is not the binary's current one.
"""
import re
import subprocess
import sys

anneal, manpage = sys.argv[1], sys.argv[2]
failures = []
checks = 0


def check(ok, message):
    global checks
    checks += 1
    if not ok:
        failures.append(message)


def run(*args):
    return subprocess.run([anneal, *args], check=True, capture_output=True, text=True).stdout


def words(text):
    return " ".join(text.split())


def deroff(roff):
    """The text a reader sees, whitespace collapsed: requests dropped, their
    arguments kept, font and character escapes resolved."""
    out = []
    for line in roff.splitlines():
        if line.startswith('.\\"'):
            continue
        m = re.match(r"^\.(\w+)\s*(.*)$", line)
        if m:
            line = m.group(2).strip('"') if m.group(1) in ("SS", "SH", "B", "TH") else ""
        line = re.sub(r"\\f[BIRP]", "", line)
        line = line.replace("\\-", "-").replace("\\&", "").replace("\\e", "\\")
        out.append(line)
    return words("\n".join(out))


page = run("--help-man")
with open(manpage) as f:
    check(f.read() == page, f"{manpage} differs from `anneal --help-man`: rebuild (it is generated at build time)")
body = "\n".join(line for line in page.splitlines() if not line.startswith('.\\"'))
unknown = re.findall(r"\\.", re.sub(r"\\f[BIRP]|\\-|\\&|\\e", "", body))
check(not unknown, f"escapes the generator does not mean to write: {set(unknown)}")

# Split the page into sections by .SS (commands) and .SH headings.
sections = {}
current = None
for line in page.splitlines():
    m = re.match(r'^\.S[SH] "?(.*?)"?$', line)
    if m:
        current = deroff(m.group(1))
        sections[current] = []
    elif current is not None:
        sections[current].append(line)
sections = {name: deroff("\n".join(lines)) for name, lines in sections.items()}


def options_in(help_text):
    """Each option boost lists, as one line: "--split FRACTION (=0.2) fraction
    held out ...", with "-h [ --help ]" written as the page writes it, "-h, --help"."""
    options = []
    for line in help_text.splitlines():
        if line.startswith("  -"):
            options.append(line)
        elif options and line.startswith("    ") and line.strip():
            options[-1] += " " + line  # a wrapped description
    return [words(re.sub(r"^\s*(-\w) \[ (--[\w-]+) \]", r"\1, \2", o)) for o in options]


def check_options(section_name, help_text):
    text = sections.get(section_name, "")
    options = options_in(help_text)
    check(options, f"{section_name}: no options parsed from --help")
    for option in options:
        check(option in text, f"{section_name}: option missing or reworded: {option}")


# Top level: the description, global options and exit codes.
top = run("--help")
description = top.split("\n\n")[1]
check(words(description) in sections.get("DESCRIPTION", ""), "description missing")
check_options("OPTIONS", top.split("Global options:")[1].split("Exit codes:")[0])
exit_codes = sections.get("EXIT STATUS", "")
for line in top.split("Exit codes:")[1].splitlines():
    if line.strip():
        check(words(line) in exit_codes, f"exit code missing: {line.strip()}")

# Every command --help lists, with everything COMMAND --help prints.
commands = [re.split(r"\s{2,}", line.strip())[0]
            for line in top.split("Commands:")[1].split("\n\n")[0].splitlines() if line.strip()]
check(len(commands) >= 10, f"too few commands parsed from --help: {commands}")
page_commands = [name for name in sections if name == name.lower()]
check(page_commands == commands, f"commands differ: --help {commands}, page {page_commands}")
for command in commands:
    text = sections.get(command)
    if text is None:
        check(False, f"command {command} has no section")
        continue
    help_text = run(*command.split(), "--help")
    head, options = help_text.split("\nOptions:\n")
    usage, summary = head.splitlines()[0], head.splitlines()[2]
    check(words(usage.removeprefix("usage: ")) in text, f"{command}: usage line missing: {usage}")
    check(words(summary) in text, f"{command}: summary missing")
    details = "\n".join(head.splitlines()[3:])
    check(words(details) in text, f"{command}: details missing or reworded")
    check_options(command, options.split("Exit codes:")[0])

for failure in failures:
    print("FAIL:", failure, file=sys.stderr)
if failures:
    print(f"{len(failures)} of {checks} checks failed", file=sys.stderr)
    sys.exit(1)
print(f"all {checks} checks passed ({len(commands)} commands)")
