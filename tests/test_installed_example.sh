#!/usr/bin/env bash
# test_installed_example.sh — packaging: configures, builds and installs
# pipit into a temp prefix (Release, without tests/benches/examples), then
# compiles every examples/*.c against the INSTALLED headers and library
# only, as strict C11 (-std=c11 -Wall -Wextra -Werror), three ways: with
# `pkg-config --cflags --libs pipit`, with `pkg-config --static ...` (the
# README's two lines), and with CMake's find_package(pipit) and the
# imported target pipit::pipit; runs each, and checks the installed CLI
# runs. Twice: a static install and a shared one (-DBUILD_SHARED_LIBS=ON,
# run with LD_LIBRARY_PATH).
# Skipped under sanitizer builds (PIPIT_SANITIZE set): it tests packaging.
# Usage: test_installed_example.sh PIPIT SRCDIR   (env: CMAKE, CC from CMake)
set -u
SRC=${2:?usage: test_installed_example.sh PIPIT_BINARY SOURCE_DIR}
SRC=$(realpath -- "$SRC") || exit 1
CMAKE=${CMAKE:-cmake}
CC=${CC:-cc}
if [ -n "${PIPIT_SANITIZE:-}" ]; then
    echo "SKIP: sanitizer build (PIPIT_SANITIZE=$PIPIT_SANITIZE); packaging is tested in plain builds"
    exit 77
fi
command -v "$CMAKE" >/dev/null || { echo "SKIP: no cmake"; exit 77; }
command -v pkg-config >/dev/null || { echo "SKIP: no pkg-config"; exit 77; }
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)

TMP=$(mktemp -d "${TMPDIR:-/tmp}/pipit_install.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT

failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# run_mode NAME SHARED(ON|OFF)
run_mode() {
    local mode=$1 shared=$2
    local build=$TMP/build-$mode prefix=$TMP/prefix-$mode log=$TMP/$mode.log
    echo "== $mode install"
    if ! { "$CMAKE" -S "$SRC" -B "$build" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release \
               -DCMAKE_C_COMPILER="$CC" -DBUILD_SHARED_LIBS="$shared" \
               -DPIPIT_BUILD_TESTS=OFF -DPIPIT_BUILD_BENCH=OFF -DPIPIT_BUILD_EXAMPLES=OFF &&
           "$CMAKE" --build "$build" -j2 &&
           "$CMAKE" --install "$build" --prefix "$prefix"; } >"$log" 2>&1; then
        cat "$log"
        fail "$mode: configure/build/install failed"
        return
    fi
    local pc
    pc=$(find "$prefix" -name pipit.pc -path '*/pkgconfig/*' | head -n1)
    [ -n "$pc" ] || { fail "$mode: no pipit.pc installed"; return; }
    [ -x "$prefix/bin/pipit" ] || fail "$mode: no bin/pipit installed"
    local h
    for h in "$SRC"/include/*.h; do
        [ -f "$prefix/include/$(basename "$h")" ] || fail "$mode: header $(basename "$h") not installed"
    done
    if [ "$shared" = ON ]; then
        compgen -G "$prefix/lib*/libpipit.so*" >/dev/null || fail "$mode: no libpipit.so installed"
    else
        compgen -G "$prefix/lib*/libpipit.a" >/dev/null || fail "$mode: no libpipit.a installed"
    fi

    export PKG_CONFIG_PATH
    PKG_CONFIG_PATH=$(dirname "$pc")
    local libdir flags
    libdir=$(pkg-config --variable=libdir pipit)
    if [ "$shared" = OFF ]; then
        flags=$(pkg-config --libs pipit) || { fail "$mode: pkg-config pipit failed"; return; }
        local lib
        for lib in -lpipit -lopenblas -lcjson -lpthread -lm; do
            grep -qw -- "$lib" <<<"$flags" || fail "$mode: pkg-config --libs pipit lacks $lib (no libpipit.so brings it)"
        done
    fi

    # The CLI runs from the prefix (shared: found through its RPATH).
    "$prefix/bin/pipit" --help >"$TMP/help.txt" 2>&1 || fail "$mode: installed pipit --help failed: $(cat "$TMP/help.txt")"

    local ex name how
    for how in pkg-config pkg-config-static; do
        local pcflags=()
        [ "$how" = pkg-config-static ] && pcflags=(--static)
        flags=$(pkg-config "${pcflags[@]}" --cflags --libs pipit) || { fail "$mode: pkg-config ${pcflags[*]} failed"; continue; }
        echo "$mode: pkg-config ${pcflags[*]} --cflags --libs pipit: $flags"
        for ex in "$SRC"/examples/*.c; do
            [ -e "$ex" ] || continue
            name=$(basename "$ex" .c)
            # As a user would: only the installed headers (no -I into the
            # source tree); -lm for the example's own sinf & co (pipit's own
            # comes from the .pc or libpipit.so).
            # shellcheck disable=SC2086
            if ! "$CC" -std=c11 -Wall -Wextra -Werror -o "$TMP/$name-$mode" "$ex" $flags -lm >"$log" 2>&1; then
                cat "$log"
                fail "$mode: $name does not compile with $how against the installed pipit"
                continue
            fi
            run_example "$mode" "$how" "$TMP/$name-$mode" "$shared" "$libdir"
        done
    done

    # CMake: find_package(pipit) from the prefix, the imported target
    local cm=$TMP/cmake-$mode
    mkdir -p "$cm"
    {
        echo "cmake_minimum_required(VERSION 3.20)"
        echo "project(uses_pipit C)"
        echo "set(CMAKE_C_STANDARD 11)"
        echo "set(CMAKE_C_EXTENSIONS OFF)"
        echo "find_package(pipit 0.1 REQUIRED)"
        for ex in "$SRC"/examples/*.c; do
            name=$(basename "$ex" .c)
            echo "add_executable($name $ex)"
            echo "target_compile_options($name PRIVATE -Wall -Wextra -Werror)"
            echo "target_link_libraries($name PRIVATE pipit::pipit m)"
        done
    } >"$cm/CMakeLists.txt"
    if ! { "$CMAKE" -S "$cm" -B "$cm/build" "${GEN[@]}" -DCMAKE_C_COMPILER="$CC" -DCMAKE_PREFIX_PATH="$prefix" &&
           "$CMAKE" --build "$cm/build"; } >"$log" 2>&1; then
        cat "$log"
        fail "$mode: the examples do not build with find_package(pipit)"
        return
    fi
    for ex in "$SRC"/examples/*.c; do
        name=$(basename "$ex" .c)
        run_example "$mode" find_package "$cm/build/$name" "$shared" "$libdir"
    done
}

# run_example MODE HOW EXE SHARED LIBDIR: runs it (a shared build must use libpipit.so)
run_example() {
    local mode=$1 how=$2 exe=$3 shared=$4 libdir=$5 log=$TMP/run.log
    if [ "$shared" = ON ]; then
        LD_LIBRARY_PATH="$libdir" ldd "$exe" | grep -q "libpipit.so" || fail "$mode/$how: $exe is not linked with libpipit.so"
    fi
    if ! LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$exe" >"$log" 2>&1; then
        cat "$log"
        fail "$mode/$how: $(basename "$exe") exited non-zero"
    else
        echo "ok: $mode $how $(basename "$exe")"
    fi
}

run_mode static OFF
run_mode shared ON

if [ "$failures" -ne 0 ]; then
    echo "$failures failure(s)"
    exit 1
fi
echo "ok: installed static and shared pipit build (pkg-config, pkg-config --static, find_package) and run every example"
