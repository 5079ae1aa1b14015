# Why: startup time. Linked against ~60 shared objects (abseil alone is ~40), every start of `cairn`
# and `cairnd` spent most of its ~9-13 ms in the dynamic loader. With CAIRN_STATIC_DEPS (default ON)
# the libraries Debian ships as static archives are linked from their .a instead, in every binary.
#
# Stays shared: libc/libstdc++/libm/libgcc_s; spdlog and fmt (Debian ships no .a); libcurl (its
# static link needs archives Debian does not ship: nghttp2, krb5, ldap, ...). What libcurl itself
# loads (OpenSSL, zlib, zstd) stays shared too, so that no process holds two copies of one library,
# except in the binaries marked with cairn_static_without_curl(TARGET), which never load libcurl.
# tests/link checks every built binary for both.
#
# Included from the top CMakeLists.txt after its find_package calls. It finds gRPC and SQLite3 here
# too, so that their imported targets exist (and are rewritten) at the top; the later
# find_package calls in subdirectories reuse them.
option(CAIRN_STATIC_DEPS "Link abseil, protobuf, gRPC, re2, c-ares, xxhash, lz4, SQLite statically (faster start)" ON)

# cairn_static_without_curl(TARGET): TARGET (an executable that never links libcurl) takes OpenSSL,
# zlib and zstd from their archives too (a no-op without CAIRN_STATIC_DEPS).
function(cairn_static_without_curl target)
  set_target_properties(${target} PROPERTIES CAIRN_WITHOUT_CURL ON)
endfunction()

if(NOT CAIRN_STATIC_DEPS)
  return()
endif()

find_package(gRPC CONFIG REQUIRED)
find_package(SQLite3 REQUIRED)

# Library names (libNAME.so) taken from their archive. Everything else stays as found.
set(_cairn_static_names "absl_.*|protobuf|grpc|grpc\\+\\+|gpr|upb|address_sorting|re2|cares|xxhash|lz4|sqlite3")

# _cairn_static_item(ITEM OUT): OUT = the archive beside ITEM (a libNAME.so* path or -lNAME) when
# NAME is one of the names above; ITEM otherwise. A listed library without its archive is an error:
# linking it shared beside static parts could put two copies of it in one process.
function(_cairn_static_item item out)
  set(name "")
  if(item MATCHES "^(.*/)lib([^/]+)\\.so(\\.[0-9]+)*$")
    set(dir "${CMAKE_MATCH_1}")
    set(name "${CMAKE_MATCH_2}")
  elseif(item MATCHES "^-l(.+)$")
    set(name "${CMAKE_MATCH_1}")
    set(dir "/usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/")
  endif()
  if(name STREQUAL "" OR NOT name MATCHES "^(${_cairn_static_names})$")
    set(${out} "${item}" PARENT_SCOPE)
    return()
  endif()
  if(NOT EXISTS "${dir}lib${name}.a")
    message(FATAL_ERROR "CAIRN_STATIC_DEPS: ${dir}lib${name}.a is missing (for ${item}). "
                        "Install the -dev package that ships it (scripts/install-deps.sh), "
                        "or configure with -DCAIRN_STATIC_DEPS=OFF.")
  endif()
  set(${out} "${dir}lib${name}.a" PARENT_SCOPE)
endfunction()

# OpenSSL, zlib and zstd: static only in the binaries whose CAIRN_WITHOUT_CURL property is ON.
foreach(name IN ITEMS crypto ssl z zstd)
  set(archive "/usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/lib${name}.a")
  if(NOT EXISTS "${archive}")
    message(FATAL_ERROR "CAIRN_STATIC_DEPS: ${archive} is missing. Install the -dev package that ships it "
                        "(scripts/install-deps.sh), or configure with -DCAIRN_STATIC_DEPS=OFF.")
  endif()
  add_library(cairn_static::${name} STATIC IMPORTED)
  set_target_properties(cairn_static::${name} PROPERTIES IMPORTED_LOCATION "${archive}")
endforeach()
set_target_properties(cairn_static::crypto PROPERTIES INTERFACE_LINK_LIBRARIES "Threads::Threads;${CMAKE_DL_LIBS}")
set_target_properties(cairn_static::ssl PROPERTIES INTERFACE_LINK_LIBRARIES cairn_static::crypto)
set_target_properties(cairn_static::zstd PROPERTIES INTERFACE_LINK_LIBRARIES Threads::Threads)

# _cairn_curl_shared_item(ITEM OUT): OUT = for OpenSSL, zlib or zstd, a choice by the linked
# binary's CAIRN_WITHOUT_CURL between the archive and ITEM; empty for anything else.
function(_cairn_curl_shared_item item out)
  set(static "")
  if(item STREQUAL "OpenSSL::SSL")
    set(static cairn_static::ssl)
  elseif(item STREQUAL "OpenSSL::Crypto")
    set(static cairn_static::crypto)
  elseif(item STREQUAL "ZLIB::ZLIB")
    set(static cairn_static::z)
  elseif(item IN_LIST ZSTD_LINK_LIBRARIES)
    set(static cairn_static::zstd)
  endif()
  if(static)
    set(${out} "$<IF:$<BOOL:$<TARGET_PROPERTY:CAIRN_WITHOUT_CURL>>,${static},${item}>" PARENT_SCOPE)
  else()
    set(${out} "" PARENT_SCOPE)
  endif()
endfunction()

get_property(_cairn_imported DIRECTORY PROPERTY IMPORTED_TARGETS)
list(FILTER _cairn_imported EXCLUDE REGEX "^(OpenSSL|ZLIB|cairn_static)::")
foreach(target IN LISTS _cairn_imported)
  get_target_property(type ${target} TYPE)
  if(NOT type STREQUAL "INTERFACE_LIBRARY")
    get_target_property(configs ${target} IMPORTED_CONFIGURATIONS)
    set(props IMPORTED_LOCATION)
    foreach(config IN LISTS configs)
      list(APPEND props IMPORTED_LOCATION_${config})
    endforeach()
    foreach(prop IN LISTS props)
      get_target_property(location ${target} ${prop})
      if(location)
        _cairn_static_item("${location}" static)
        if(NOT static STREQUAL location)
          set_target_properties(${target} PROPERTIES ${prop} "${static}")
        endif()
      endif()
    endforeach()
  endif()
  # pkg-config targets (xxhash, lz4, re2) name their libraries here, as paths or -lNAME.
  get_target_property(links ${target} INTERFACE_LINK_LIBRARIES)
  if(links)
    set(rewritten "")
    foreach(item IN LISTS links)
      _cairn_curl_shared_item("${item}" choice)
      if(choice)
        list(APPEND rewritten "${choice}")
      else()
        _cairn_static_item("${item}" static)
        list(APPEND rewritten "${static}")
      endif()
    endforeach()
    set_target_properties(${target} PROPERTIES INTERFACE_LINK_LIBRARIES "${rewritten}")
  endif()
endforeach()

# What the archives need that their shared objects carried in their own NEEDED entries.
_cairn_curl_shared_item(ZLIB::ZLIB zlib)
set_property(TARGET protobuf::libprotobuf APPEND PROPERTY INTERFACE_LINK_LIBRARIES "${zlib}" Threads::Threads)
set_property(TARGET re2::re2 APPEND PROPERTY INTERFACE_LINK_LIBRARIES Threads::Threads)
set_property(TARGET SQLite::SQLite3 APPEND PROPERTY INTERFACE_LINK_LIBRARIES Threads::Threads ${CMAKE_DL_LIBS} m)
