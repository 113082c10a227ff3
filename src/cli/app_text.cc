#include "cli/app_text.h"

#include <sys/stat.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "cli/build_info.h"

namespace tessera::cli {

namespace {

using Options = std::vector<const CLI::Option*>;

bool Visible(const CLI::App* cmd) { return !cmd->get_group().empty(); }
bool Visible(const CLI::Option* opt) { return !opt->get_group().empty(); }
bool IsFlag(const CLI::Option* opt) { return opt->get_expected_max() == 0; }

std::vector<const CLI::App*> Commands(const CLI::App& app) {
  std::vector<const CLI::App*> out;
  for (const CLI::App* c : app.get_subcommands([](const CLI::App* c) { return Visible(c); })) out.push_back(c);
  return out;
}
Options NamedOptions(const CLI::App& cmd) {
  return cmd.get_options([](const CLI::Option* o) { return o->nonpositional() && Visible(o); });
}
Options Positionals(const CLI::App& cmd) {
  return cmd.get_options([](const CLI::Option* o) { return !o->nonpositional(); });
}
// "-d", "--background": every name of an option, dashes included.
std::vector<std::string> Names(const CLI::Option* o) {
  std::vector<std::string> out;
  for (const auto& s : o->get_snames()) out.push_back("-" + s);
  for (const auto& l : o->get_lnames()) out.push_back("--" + l);
  return out;
}

// ---------------------------------------------------------------- roff

// Text for roff: backslashes and minus signs escaped (a '-' must stay an
// ASCII minus to be copied into a shell), no line starting with a control
// character.
std::string Roff(const std::string& s) {
  std::string out;
  bool line_start = true;
  for (char c : s) {
    if (line_start && (c == '.' || c == '\'')) out += "\\&";
    if (c == '\\') out += "\\e";
    else if (c == '-') out += "\\-";
    else out += c;
    line_start = c == '\n';
  }
  return out;
}

std::string Upper(std::string s) {
  for (char& c : s) c = char(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

std::string Header(const std::string& name, int section) {
  // .nh/.ad l: no hyphenation, ragged right (option names stay whole).
  return fmt::format(".TH {} {} \"\" \"tessera {}\" \"Tessera manual\"\n.nh\n.ad l\n", Roff(Upper(name)), section,
                     kVersion);
}

// The footer ("Examples:\n  ...") as a literal block under its own heading.
std::string Footer(const CLI::App& cmd) {
  std::string footer = cmd.get_footer();
  if (footer.empty()) return "";
  std::string heading = "NOTES";
  if (footer.starts_with("Examples:\n") || footer.starts_with("Example:\n")) {
    heading = "EXAMPLES";
    footer = footer.substr(footer.find('\n') + 1);
  }
  return fmt::format(".SH {}\n.nf\n{}\n.fi\n", heading, Roff(footer));
}

std::string OptionsSection(const CLI::App& cmd) {
  std::string out;
  for (const CLI::Option* o : Positionals(cmd)) {
    if (out.empty()) out += ".SH ARGUMENTS\n";
    out += fmt::format(".TP\n.I {}\n{}\n", Roff(o->get_name()), Roff(o->get_description()));
  }
  std::string opts;
  for (const CLI::Option* o : NamedOptions(cmd)) {
    std::string names;
    for (const auto& n : Names(o)) names += (names.empty() ? "" : ", ") + std::string("\\fB") + Roff(n) + "\\fR";
    if (!IsFlag(o)) {
      std::string type = o->get_type_name();  // "UINT:INT in [16 - 1048576]": the first word
      type = type.substr(0, type.find_first_of(": "));
      names += " \\fI" + Roff(type.empty() ? "VALUE" : type) + "\\fR";
    }
    std::string text = o->get_description();
    if (!o->get_default_str().empty()) text += " (default: " + o->get_default_str() + ")";
    if (o->get_group() != "Options") text += " [" + o->get_group() + "]";
    opts += fmt::format(".TP\n{}\n{}\n", names, Roff(text));
  }
  if (!opts.empty()) out += ".SH OPTIONS\n" + opts;
  return out;
}

std::string Synopsis(const CLI::App& cmd) {
  std::string args;
  for (const CLI::Option* o : Positionals(cmd)) {
    const bool many = o->get_expected_max() > 1;
    std::string a = "\\fI" + Roff(o->get_name()) + "\\fR" + (many ? "..." : "");
    args += " " + (o->get_required() ? a : "[" + a + "]");
  }
  return fmt::format(".SH SYNOPSIS\n.B tessera {}\n[\\fIOPTIONS\\fR]{}\n", Roff(cmd.get_name()), args);
}

constexpr const char* kMountSystemText = R"roff(.SH MOUNTING WITH mount(8) AND /etc/fstab
.B mount \-t tessera
runs
.BR mount.tessera ,
which takes every option above in the
.B \-o
form without its dashes:
.IP
.nf
mount \-t tessera sqlite3:///var/lib/tessera/vol.db /mnt/vol \-o cache\-size=1024,writeback
.fi
.PP
and so does a line of
.IR /etc/fstab :
.IP
.nf
sqlite3:///var/lib/tessera/vol.db /mnt/vol tessera _netdev,cache\-size=1024 0 0
.fi
.PP
A switch is given alone (\fBwriteback\fR) or as \fBwriteback=true\fR/\fBfalse\fR; options that are not
Tessera's go to FUSE and the kernel (\fBro\fR, \fBnoatime\fR, ...), and mount(8)'s own
(\fB_netdev\fR, \fBnofail\fR, \fBnoauto\fR, \fBx\-systemd.*\fR) are kept for mount(8) and systemd.
Secrets never go on the line (every user can read /etc/fstab): \fBenv\-file=\fR\fIPATH\fR names a file of
\fINAME=VALUE\fR lines, readable by root only, loaded into the environment before mounting
(META_PASSWORD, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY).
.B tessera mount \-\-update\-fstab
writes the line of a mount for you.
A plain
.B umount
of a Tessera mount runs
.BR umount.tessera ,
which is
.BR "tessera umount" :
it waits for the client to exit.
)roff";

std::string ManPage(const CLI::App& cmd) {
  const std::string name = "tessera-" + cmd.get_name();
  std::string page = Header(name, 1);
  page += fmt::format(".SH NAME\n{} \\- {}\n", Roff(name), Roff(cmd.get_description()));
  page += Synopsis(cmd);
  page += fmt::format(".SH DESCRIPTION\n{}.\n", Roff(cmd.get_description()));
  page += OptionsSection(cmd);
  page += Footer(cmd);
  if (cmd.get_name() == "mount") page += kMountSystemText;
  page += fmt::format(".SH SEE ALSO\n\\fBtessera\\fR(1){}\n",
                      cmd.get_name() == "mount" ? ", \\fBmount.tessera\\fR(8), \\fBfstab\\fR(5)" : "");
  return page;
}

std::string MainPage(const CLI::App& app) {
  std::string page = Header("tessera", 1);
  page += ".SH NAME\ntessera \\- a distributed POSIX file system on object storage\n";
  page += ".SH SYNOPSIS\n.B tessera\n\\fICOMMAND\\fR [\\fIOPTIONS\\fR] [\\fIARGUMENTS\\fR]\n";
  page += fmt::format(".SH DESCRIPTION\n{}\n", Roff(app.get_description()));
  page += ".PP\nEach command has its own page: \\fBman tessera\\-mount\\fR, or \\fBtessera mount \\-\\-help\\fR.\n";
  page += ".SH COMMANDS\n";
  for (const CLI::App* c : Commands(app))
    page += fmt::format(".TP\n\\fBtessera\\-{}\\fR(1)\n{}\n", Roff(c->get_name()), Roff(c->get_description()));
  page += OptionsSection(app);
  page += R"roff(.SH ENVIRONMENT
.TP
.B META_PASSWORD
the password of the metadata engine, instead of in META\-URL (also REDIS_PASSWORD; PostgreSQL reads PGPASSWORD and ~/.pgpass)
.TP
.BR AWS_ACCESS_KEY_ID ", " AWS_SECRET_ACCESS_KEY ", " AWS_REGION
credentials and signing region of an s3 bucket; they are never stored in the volume
.SH FILES
.TP
.I /var/lib/tessera
default place of local buckets (file storage)
.TP
.I /var/cache/tessera
default disk cache and \-\-writeback staging directory
.TP
.I /var/log/tessera.log
log of background mounts run by root
.TP
.I /run/tessera
state of this host's mounts (tessera umount reads it)
.SH SEE ALSO
\fBmount.tessera\fR(8), \fBfstab\fR(5); the documents in /usr/share/doc/tessera
)roff";
  return page;
}

Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::trunc);
  f << text;
  f.flush();
  if (!f) return Status::Err(errno ? errno : EIO, fmt::format("cannot write {}: {}", path, strerror(errno)));
  return Status::OK();
}

// ---------------------------------------------------------------- completion

std::string ShellWords(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : " ") + w;
  return out;
}

std::string BashScript(const CLI::App& app) {
  std::vector<std::string> commands;
  std::string cases;
  for (const CLI::App* c : Commands(app)) {
    commands.push_back(c->get_name());
    std::vector<std::string> opts;
    for (const CLI::Option* o : NamedOptions(*c))
      for (const auto& n : Names(o)) opts.push_back(n);
    cases += fmt::format("    {}) opts=\"{}\" ;;\n", c->get_name(), ShellWords(opts));
  }
  std::vector<std::string> top = commands;
  for (const CLI::Option* o : NamedOptions(app))
    for (const auto& n : Names(o)) top.push_back(n);
  return fmt::format(R"sh(# bash completion for tessera {version} (generated by `tessera completion bash`)
_tessera_mounts() {{
  awk '$3 == "fuse.tessera" {{ print $2 }}' /proc/mounts 2>/dev/null
}}
_tessera() {{
  local cur=${{COMP_WORDS[COMP_CWORD]}} cmd="" opts="" i
  for ((i = 1; i < COMP_CWORD; i++)); do
    case ${{COMP_WORDS[i]}} in -*) ;; *) cmd=${{COMP_WORDS[i]}}; break ;; esac
  done
  if [ -z "$cmd" ]; then
    COMPREPLY=($(compgen -W "{top}" -- "$cur"))
    return
  fi
  case $cmd in
{cases}  esac
  if [[ $cur == -* ]]; then
    COMPREPLY=($(compgen -W "$opts" -- "$cur"))
  elif [ "$cmd" = umount ]; then
    COMPREPLY=($(compgen -W "$(_tessera_mounts)" -- "$cur"))
  else
    COMPREPLY=($(compgen -f -- "$cur"))
  fi
}}
complete -o filenames -o bashdefault -F _tessera tessera
)sh",
                     fmt::arg("version", kVersion), fmt::arg("top", ShellWords(top)), fmt::arg("cases", cases));
}

// A description inside a zsh _arguments spec: '[...]' and single quotes.
std::string ZshText(const std::string& s, bool in_brackets = true) {
  std::string out;
  for (char c : s) {
    if (c == '\n') { out += ' '; continue; }
    if (c == '\'') { out += "'\\''"; continue; }
    if (in_brackets && (c == '[' || c == ']' || c == ':' || c == '\\')) out += '\\';
    out += c;
  }
  return out;
}

std::string ZshScript(const CLI::App& app) {
  std::string commands, cases;
  for (const CLI::App* c : Commands(app)) {
    commands += fmt::format("    '{}:{}'\n", c->get_name(), ZshText(c->get_description(), false));
    std::string specs;
    for (const CLI::Option* o : NamedOptions(*c)) {
      const std::string value = IsFlag(o) ? "" : ":value:_files";
      for (const auto& n : Names(o)) specs += fmt::format(" \\\n        '{}[{}]{}'", n, ZshText(o->get_description()), value);
    }
    const std::string rest = c->get_name() == "umount" ? "'*:mount point:_tessera_mounts'" : "'*:file:_files'";
    cases += fmt::format("    {})\n      _arguments -s{} \\\n        {} ;;\n", c->get_name(), specs, rest);
  }
  return fmt::format(R"sh(#compdef tessera
# zsh completion for tessera {version} (generated by `tessera completion zsh`)
_tessera_mounts() {{
  local -a mounts
  mounts=(${{(f)"$(awk '$3 == "fuse.tessera" {{ print $2 }}' /proc/mounts 2>/dev/null)"}})
  _describe -t mounts 'Tessera mount point' mounts
}}
_tessera() {{
  local -a commands
  commands=(
{commands}  )
  if (( CURRENT == 2 )); then
    _describe -t commands 'tessera command' commands
    return
  fi
  local cmd=${{words[2]}}
  shift words
  (( CURRENT-- ))
  case $cmd in
{cases}  esac
}}
_tessera "$@"
)sh",
                     fmt::arg("version", kVersion), fmt::arg("commands", commands), fmt::arg("cases", cases));
}

}  // namespace

Status WriteManPages(const CLI::App& app, const std::string& dir) {
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
    return Status::Err(errno, fmt::format("cannot create {}: {}", dir, strerror(errno)));
  RETURN_IF_ERROR(WriteFile(dir + "/tessera.1", MainPage(app)));
  for (const CLI::App* c : Commands(app))
    RETURN_IF_ERROR(WriteFile(fmt::format("{}/tessera-{}.1", dir, c->get_name()), ManPage(*c)));
  return WriteFile(dir + "/mount.tessera.8", ".so man1/tessera-mount.1\n");
}

Result<std::string> CompletionScript(const CLI::App& app, const std::string& shell) {
  if (shell == "bash") return BashScript(app);
  if (shell == "zsh") return ZshScript(app);
  return Status::Err(EINVAL, fmt::format("no completion for shell '{}': bash or zsh", shell));
}

OptionKind MountOptionKind(const CLI::App& mount, const std::string& name) {
  const CLI::Option* o = mount.get_option_no_throw("--" + name);
  if (!o || !Visible(o) || name == "help" || name == "background" || name == "update-fstab") return OptionKind::kUnknown;
  return IsFlag(o) ? OptionKind::kFlag : OptionKind::kValue;
}

std::string FstabOptions(const CLI::App& mount) {
  auto escape = [](const std::string& v) {
    std::string out;
    for (char c : v) {
      if (c == ',') out += "\\,";
      else if (c == ' ') out += "\\040";
      else out += c;
    }
    return out;
  };
  std::string out;
  auto add = [&](const std::string& s) { out += (out.empty() ? "" : ",") + s; };
  for (const CLI::Option* o : NamedOptions(mount)) {
    if (o->count() == 0) continue;
    if (o->get_lnames().empty()) {  // -o: FUSE's options, as given
      for (const auto& v : o->results()) add(escape(v));
      continue;
    }
    const std::string name = o->get_lnames()[0];
    if (name == "background" || name == "update-fstab") continue;
    if (IsFlag(o)) add(name);
    else add(name + "=" + escape(o->results().empty() ? "" : o->results().back()));
  }
  return out;
}

}  // namespace tessera::cli
