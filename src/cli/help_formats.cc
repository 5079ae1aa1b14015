#include "cli/help_formats.h"

#include <cstdlib>
#include <ctime>
#include <map>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"

namespace cairn::cli {
namespace {

// Text for roff: backslashes and hyphens escaped, a line starting with a control character made
// plain, and characters beyond ASCII (UTF-8: "…", "—") as roff's \[uXXXX], which groff reads
// whatever its input encoding.
std::string Roff(const std::string& text) {
  std::string out = absl::StrReplaceAll(text, {{"\\", "\\e"}, {"-", "\\-"}});
  std::string fixed;
  bool line_start = true;
  for (size_t i = 0; i < out.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(out[i]);
    if (line_start && (c == '.' || c == '\'')) fixed += "\\&";
    line_start = c == '\n';
    if (c < 0x80) {
      fixed += static_cast<char>(c);
      continue;
    }
    int extra = c >= 0xf0 ? 3 : c >= 0xe0 ? 2 : c >= 0xc0 ? 1 : 0;
    uint32_t cp = c & (0x3f >> extra);
    for (int k = 0; k < extra && i + 1 < out.size(); ++k) cp = cp << 6 | (static_cast<unsigned char>(out[++i]) & 0x3f);
    fixed += absl::StrFormat("\\[u%04X]", cp);
  }
  return fixed;
}

// Every subcommand (get_subcommands() without a filter gives only those parsed).
std::vector<const CLI::App*> Subcommands(const CLI::App& app) {
  return app.get_subcommands([](const CLI::App*) { return true; });
}

std::vector<const CLI::Option*> Options(const CLI::App& app) { return app.get_options(); }

// "-v, --verbose", "--dir DIR", or for a positional "JOB".
std::string OptionName(const CLI::Option& o) {
  if (o.get_positional() && o.get_lnames().empty() && o.get_snames().empty()) {
    return absl::AsciiStrToUpper(o.get_name());
  }
  std::vector<std::string> names;
  for (const std::string& s : o.get_snames()) names.push_back("-" + s);
  for (const std::string& l : o.get_lnames()) names.push_back("--" + l);
  std::string out = absl::StrJoin(names, ", ");
  if (o.get_type_size() != 0 && !o.get_type_name().empty()) out += " " + o.get_type_name();
  return out;
}

void ManCommand(const CLI::App& app, const std::string& path, std::string* out) {
  if (!path.empty()) {
    absl::StrAppend(out, ".SS \"", Roff(path), "\"\n", Roff(app.get_description()), "\n");
  }
  for (const CLI::Option* o : Options(app)) {
    if (o->get_lnames().size() == 1 && o->get_lnames()[0] == "help") continue;
    absl::StrAppend(out, ".TP\n.B ", Roff(OptionName(*o)), "\n", Roff(o->get_description()), "\n");
  }
  for (const CLI::App* s : Subcommands(app)) {
    ManCommand(*s, path.empty() ? absl::StrCat(app.get_name(), " ", s->get_name()) : path + " " + s->get_name(), out);
  }
}

// The words that may follow each command path ("@" is the program itself, "@ job run" its `job
// run`: bash's arrays take no empty key): its subcommands, and (separately) its options.
void Words(const CLI::App& app, const std::string& path, std::map<std::string, std::string>* subs,
           std::map<std::string, std::string>* opts) {
  std::vector<std::string> s, o;
  for (const CLI::App* sub : Subcommands(app)) s.push_back(sub->get_name());
  for (const CLI::Option* opt : Options(app)) {
    for (const std::string& l : opt->get_lnames()) o.push_back("--" + l);
    for (const std::string& n : opt->get_snames()) o.push_back("-" + n);
  }
  (*subs)[path] = absl::StrJoin(s, " ");
  (*opts)[path] = absl::StrJoin(o, " ");
  for (const CLI::App* sub : Subcommands(app)) Words(*sub, path + " " + sub->get_name(), subs, opts);
}

}  // namespace

std::string ManPage(const CLI::App& app, const std::string& section, const std::string& extra) {
  std::string date;
  if (const char* epoch = std::getenv("SOURCE_DATE_EPOCH")) {
    std::time_t t = static_cast<std::time_t>(std::atoll(epoch));
    char buf[32];
    std::tm tm{};
    if (::gmtime_r(&t, &tm) != nullptr && std::strftime(buf, sizeof buf, "%Y-%m-%d", &tm) > 0) date = buf;
  }
  std::string name = app.get_name();
  std::string out = absl::StrCat(".TH ", absl::AsciiStrToUpper(Roff(name)), " ", section, " \"", date, "\" \"cairn\" \"",
                                 section == "8" ? "System Administration" : "User Commands", "\"\n");
  std::string what = app.get_description();
  if (what.rfind(name + ": ", 0) == 0) what = what.substr(name.size() + 2);  // "cairn: ..." says its name already
  absl::StrAppend(&out, ".SH NAME\n", Roff(name), " \\- ", Roff(what), "\n");
  absl::StrAppend(&out, ".SH SYNOPSIS\n.B ", Roff(name), "\n[\\fIOPTIONS\\fR]",
                  Subcommands(app).empty() ? "" : " \\fICOMMAND\\fR [\\fIOPTIONS\\fR] [\\fIARGS\\fR]", "\n");
  absl::StrAppend(&out, ".SH OPTIONS\n");
  for (const CLI::Option* o : Options(app)) {
    if (o->get_lnames().size() == 1 && o->get_lnames()[0] == "help") continue;
    absl::StrAppend(&out, ".TP\n.B ", Roff(OptionName(*o)), "\n", Roff(o->get_description()), "\n");
  }
  if (!Subcommands(app).empty()) {
    absl::StrAppend(&out, ".SH COMMANDS\n");
    for (const CLI::App* s : Subcommands(app)) ManCommand(*s, absl::StrCat(name, " ", s->get_name()), &out);
  }
  absl::StrAppend(&out, extra);
  absl::StrAppend(&out, ".SH SEE ALSO\nThe documentation installed in /usr/local/share/doc/cairn (README.md, docs/).\n");
  return out;
}

std::string Completion(const CLI::App& app, const std::string& shell) {
  std::map<std::string, std::string> subs, opts;
  Words(app, "@", &subs, &opts);
  std::string fn = "_" + absl::StrReplaceAll(app.get_name(), {{"-", "_"}});
  std::string out;
  if (shell == "zsh") out += "#compdef " + app.get_name() + "\nautoload -U +X bashcompinit && bashcompinit\n";
  absl::StrAppend(&out, "# ", app.get_name(), " completion, generated from its own command line (", app.get_name(),
                  " completion ", shell, ")\n");
  // -g: bash-completion (and zsh's autoload) source this file inside a function, where a plain
  // declare would make the tables local to it.
  absl::StrAppend(&out, "declare -gA ", fn, "_subs=(\n");
  for (const auto& [path, words] : subs) absl::StrAppend(&out, "  [\"", path, "\"]=\"", words, "\"\n");
  absl::StrAppend(&out, ")\ndeclare -gA ", fn, "_opts=(\n");
  for (const auto& [path, words] : opts) absl::StrAppend(&out, "  [\"", path, "\"]=\"", words, "\"\n");
  absl::StrAppend(&out, ")\n", fn, "() {\n",
                  "  local cur=\"${COMP_WORDS[COMP_CWORD]}\" at=@ w i\n",  // (not `path`: zsh ties it to PATH)
                  "  for ((i = 1; i < COMP_CWORD; i++)); do\n",
                  "    w=\"${COMP_WORDS[i]}\"\n",
                  "    if [[ \" ${", fn, "_subs[$at]} \" == *\" $w \"* ]]; then at=\"$at $w\"; fi\n",
                  "  done\n",
                  "  if [[ \"$cur\" == -* ]]; then\n",
                  "    COMPREPLY=($(compgen -W \"${", fn, "_opts[$at]}\" -- \"$cur\"))\n",
                  "  else\n",
                  "    COMPREPLY=($(compgen -W \"${", fn, "_subs[$at]}\" -- \"$cur\"))\n",
                  "  fi\n",
                  "}\n",
                  "complete -o default -F ", fn, " ", app.get_name(), "\n");
  return out;
}

}  // namespace cairn::cli
