#pragma once
// A command line's own help (its CLI11 definition) in the forms a system installs: a manual page
// (roff) and shell completion for bash and zsh. Generated from the same definition the commands
// parse with, so the manual and the completion never disagree with the program: `cairn manpage`,
// `cairn completion bash|zsh`, `cairnd --manpage`, `cairn-controller --manpage`; CMake makes the
// pages and the completion at build time and installs them (README, "Installing").

#include <string>

namespace CLI {
class App;
}

namespace cairn::cli {

// The manual page of `app` (its name, description, options, and every subcommand's, depth
// first) in roff, section `section` ("1", "8"); `extra` is roff appended before SEE ALSO (e.g. an
// EXIT STATUS section). The date comes from SOURCE_DATE_EPOCH when set, for reproducible builds.
std::string ManPage(const CLI::App& app, const std::string& section, const std::string& extra = "");

// A bash completion script for `app`'s subcommands and options (`complete -F`); for zsh, the same
// through zsh's bashcompinit. `shell`: "bash" or "zsh".
std::string Completion(const CLI::App& app, const std::string& shell);

}  // namespace cairn::cli
