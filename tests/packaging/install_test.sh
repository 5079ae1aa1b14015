#!/bin/bash
# `cmake --install` into a fresh prefix (packaging/CMakeLists.txt): every program, the unit file,
# the example config, the manual pages (rendered by groff with every warning on: none), the bash
# completion (it completes), and the docs are where the unit file and README say.
# Usage: install_test.sh BUILD_DIR
set -euo pipefail
build=$1
prefix=$(mktemp -d /tmp/cairn-install-XXXXXX)
trap 'rm -rf "$prefix"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$prefix" >/dev/null
for f in bin/cairn bin/cairnd bin/cairn-controller bin/cairn-init lib/systemd/system/cairnd.service \
         share/doc/cairn/examples/cairnd.toml share/doc/cairn/README.md share/doc/cairn/daemon.md \
         share/man/man1/cairn.1 share/man/man8/cairnd.8 share/man/man8/cairn-controller.8 \
         share/bash-completion/completions/cairn share/zsh/vendor-completions/_cairn; do
  [ -f "$prefix/$f" ] || fail "$f was not installed"
done
[ -x "$prefix/bin/cairn" ] || fail "bin/cairn is not executable"
grep -q '^ExecStart=/usr/local/bin/cairnd ' "$prefix/lib/systemd/system/cairnd.service" ||
  fail "the unit's ExecStart is not where the default prefix puts cairnd"

# The pages render without a warning, and name what the programs have.
for page in "$prefix"/share/man/man*/*; do
  warnings=$(groff -man -Tutf8 -ww -z "$page" 2>&1) || fail "groff failed on $page"
  [ -z "$warnings" ] || fail "groff warns on $page: $warnings"
done
rendered=$(groff -man -Tascii "$prefix/share/man/man1/cairn.1" 2>/dev/null | col -b)
for words in "cairn job checkpoint" "cairn gc" "EXIT STATUS" "--tcp-established"; do
  grep -qF -- "$words" <<<"$rendered" || fail "cairn(1) does not say '$words'"
done
rendered=$(groff -man -Tascii "$prefix/share/man/man8/cairnd.8" 2>/dev/null | col -b)
grep -qF -- "--gc-every" <<<"$rendered" || fail "cairnd(8) does not list --gc-every"

# The completion completes subcommands and each one's options.
# (Sourced from inside a function, as bash-completion loads it.)
got=$(bash -c 'load() { source "$1"; }; load "$1"; COMP_WORDS=(cairn job ch); COMP_CWORD=2; _cairn; echo "${COMPREPLY[*]}"' _ \
  "$prefix/share/bash-completion/completions/cairn")
[ "$got" = checkpoint ] || fail "cairn job ch<TAB> gave '$got'"
got=$(bash -c 'source "$1"; COMP_WORDS=(cairn gc --dr); COMP_CWORD=2; _cairn; echo "${COMPREPLY[*]}"' _ \
  "$prefix/share/bash-completion/completions/cairn")
[ "$got" = --dry-run ] || fail "cairn gc --dr<TAB> gave '$got'"
echo "PASS: installed into $prefix and checked"
