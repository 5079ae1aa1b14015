#!/usr/bin/env python3
"""Checks how the built binaries are linked (cmake/StaticDeps.cmake).

usage: static_deps_test.py BUILD_DIR STATIC(0|1)

For every dynamic ELF executable under BUILD_DIR:
- with STATIC=1, it loads none of the libraries taken from their archives (abseil, protobuf, gRPC...);
- it never holds two copies of a library: a shared object it loads (directly or through another
  one, e.g. OpenSSL through libcurl) must not also be linked into the executable itself;
- with STATIC=1, `cairn` loads nothing but the C/C++ runtime, spdlog and fmt (its start time).
Prints one line per problem and exits 1 if there is any.
"""
import os
import re
import subprocess
import sys

# Shared objects that must not be loaded when the dependencies are static.
STATIC_SONAMES = re.compile(r"^lib(absl_|protobuf|grpc|gpr|upb|address_sorting|re2|cares|sqlite3|xxhash|lz4)")
# The C/C++ runtime (and a sanitizer build's runtimes): always shared, never compared.
RUNTIME = re.compile(r"^(linux-vdso\.so|ld-linux|lib(c|m|stdc\+\+|gcc_s|asan|ubsan|lsan|tsan)\.so)")
CAIRN_ALLOWED = re.compile(r"^(linux-vdso\.so|ld-linux|lib(c|m|stdc\+\+|gcc_s|spdlog|fmt|asan|ubsan|lsan|tsan)\.so)")


def executables(build_dir):
    for root, dirs, files in os.walk(build_dir):
        dirs[:] = [d for d in dirs if d != "CMakeFiles"]
        for name in files:
            path = os.path.join(root, name)
            if not os.access(path, os.X_OK) or os.path.islink(path):
                continue
            with open(path, "rb") as f:
                if f.read(4) != b"\x7fELF":
                    continue
            yield path


def loaded(path):
    """(soname, file) of each shared object the loader maps for PATH; None for a static executable."""
    out = subprocess.run(["ldd", path], capture_output=True, text=True)
    if "not a dynamic executable" in out.stdout + out.stderr or "statically linked" in out.stdout:
        return None
    if out.returncode != 0:
        raise RuntimeError(f"ldd {path} failed: {out.stderr.strip()}")
    libs = []
    for line in out.stdout.splitlines():
        words = line.split()
        if not words:
            continue
        file = words[2] if len(words) > 2 and words[1] == "=>" else words[0]
        libs.append((os.path.basename(words[0]), file))
    return libs


def defined_functions(path, dynamic=False):
    """The strong global functions PATH defines (of its dynamic symbol table with DYNAMIC)."""
    flags = ["-D"] if dynamic else []
    out = subprocess.run(["nm", *flags, "--defined-only", "--format=posix", path], capture_output=True, text=True)
    if not dynamic and (out.returncode != 0 or not out.stdout):  # stripped: its dynamic symbols at least
        return defined_functions(path, dynamic=True)
    syms = set()
    for line in out.stdout.splitlines():
        parts = line.split()
        # Strong global functions only: weak ones (W) are inline code from headers, which every
        # user of a library carries whichever way it links, and data (B, D, R) may be a copy
        # relocation of a shared object's variable.
        if len(parts) >= 2 and parts[1] == "T":
            syms.add(parts[0].split("@")[0])  # SSL_new@@OPENSSL_3.0.0 -> SSL_new
    return syms


def main():
    build_dir, static = sys.argv[1], sys.argv[2] in ("1", "ON", "TRUE", "true", "on")
    problems = []
    checked = 0
    exported = {}  # shared object file -> the functions it exports
    saw_cairn = False
    for path in sorted(executables(build_dir)):
        libs = loaded(path)
        if libs is None:
            continue
        checked += 1
        rel = os.path.relpath(path, build_dir)
        names = [name for name, _ in libs]
        if static:
            for name in names:
                if STATIC_SONAMES.match(name):
                    problems.append(f"{rel}: loads {name}, which CAIRN_STATIC_DEPS links from its archive")
        own = None
        for name, file in libs:
            if RUNTIME.match(name) or not os.path.isfile(file):
                continue
            if own is None:
                own = defined_functions(path)
            if file not in exported:
                exported[file] = defined_functions(file, dynamic=True)
            both = sorted(own & exported[file])
            if both:
                problems.append(f"{rel}: loads {name} and also contains {len(both)} of its functions "
                                f"({both[0]}, ...): two copies of one library in one process")
        if rel == "cairn":
            saw_cairn = True
            if static:
                extra = [name for name in names if not CAIRN_ALLOWED.match(name)]
                if extra:
                    problems.append(f"cairn: loads {', '.join(extra)}; with CAIRN_STATIC_DEPS it should load "
                                    "only the C/C++ runtime, spdlog and fmt (its start time)")
    if not saw_cairn:
        problems.append(f"{build_dir}/cairn: not found (build it first)")
    for p in problems:
        print(p)
    print(f"static_deps_test: {checked} dynamic executables checked, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
