#!/usr/bin/env bash
# tests/deps.sh -- install (apt-get, Debian 12) every package the build and
# the unit, mproc and integration suites need.  Does nothing, without calling
# apt-get, when all of them are installed already.  Needs root or sudo only
# when something is missing.  Used by the README's test command, .ci/run and
# demo.sh.  Exits non-zero when the install fails.
set -euo pipefail

pkgs=(
    build-essential meson ninja-build pkg-config python3 python3-dev python3-numpy
    libdlpack-dev python3-torch
    libinih-dev libcmocka-dev librocksdb-dev libhiredis-dev librdkafka-dev
    libmicrohttpd-dev libjson-c-dev libxxhash-dev zlib1g-dev
    redis-server redis-tools curl
    help2man # the man pages of the programs (dist/meson.build)
    locales # unit conf-parse compiles a ',' decimal-point locale (de_DE) with localedef
    clang libclang-rt-14-dev # tests/fuzz/run.sh: clang-14 and its libFuzzer runtime
)

if ! command -v dpkg-query >/dev/null || ! command -v apt-get >/dev/null; then
    echo "deps.sh: no dpkg-query/apt-get (not Debian?): install these yourself: ${pkgs[*]}" >&2
    exit 0
fi

missing=()
for p in "${pkgs[@]}"; do
    [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" = "install ok installed" ] ||
        missing+=("$p")
done
[ "${#missing[@]}" -eq 0 ] && exit 0

echo "== installing: ${missing[*]}"
sudo=()
[ "$(id -u)" -eq 0 ] || sudo=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq || echo "deps.sh: apt-get update failed; installing anyway" >&2
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
