#!/usr/bin/env bash
# test-cli-numbers.sh HPS_WORKER [HPS_PUSH] -- numeric options of hps-worker
# and hps-push: a bad number is a usage error (exit 2) that names the option,
# the text and the allowed range; nothing is read as a prefix ("1abc"),
# wrapped (4294967297) or octal.  Neither program gets as far as a config
# or a broker.  Also hps-push --version ("hps-push VERSION", as the other
# tools print it).  Output is TAP.
set -u
WORKER=$1
PUSH=${2:-}
ERR=$(mktemp "${TMPDIR:-/tmp}/hps-cli.XXXXXX") || exit 1
trap 'rm -f "$ERR"' EXIT
count=0
failures=0

# expect DESC WANT_RC REGEX CMD...: exit status WANT_RC and stderr matching REGEX
expect() {
    local desc=$1 want=$2 re=$3
    shift 3
    "$@" >/dev/null 2>"$ERR"
    local rc=$?
    count=$((count + 1))
    if [ "$rc" -eq "$want" ] && { [ -z "$re" ] || grep -Eq -- "$re" "$ERR"; }; then
        echo "ok $count - $desc"
    else
        failures=$((failures + 1))
        echo "not ok $count - $desc (exit $rc, want $want; stderr:)"
        sed -e 's/^/#   /' "$ERR" | head -n 5
    fi
}

# expect_out DESC WANT_RC REGEX CMD...: exit status WANT_RC and stdout matching REGEX
expect_out() {
    local desc=$1 want=$2 re=$3
    shift 3
    "$@" >"$ERR" 2>/dev/null
    local rc=$?
    count=$((count + 1))
    if [ "$rc" -eq "$want" ] && grep -Eq -- "$re" "$ERR"; then
        echo "ok $count - $desc"
    else
        failures=$((failures + 1))
        echo "not ok $count - $desc (exit $rc, want $want; stdout:)"
        sed -e 's/^/#   /' "$ERR" | head -n 5
    fi
}

W=(-c /nonexistent.ini)
expect "worker --device abc" 2 "--device 'abc': must be an integer in \[0, 1023\]" \
    "$WORKER" "${W[@]}" --device abc
expect "worker --device -1" 2 "--device '-1': must be an integer in \[0, 1023\]" \
    "$WORKER" "${W[@]}" --device -1
expect "worker --device 99999999999" 2 "--device '99999999999': must be" \
    "$WORKER" "${W[@]}" --device 99999999999
expect "worker --device 1abc" 2 "--device '1abc': must be" "$WORKER" "${W[@]}" --device 1abc
expect "worker --instance x" 2 "--instance 'x': must be an integer in \[0, 1023\]" \
    "$WORKER" "${W[@]}" --device 0 --instance x
expect "worker --http-port 65536" 2 "--http-port '65536': must be an integer in \[0, 65535\]" \
    "$WORKER" "${W[@]}" --device 0 --http-port 65536
expect "worker without --device" 2 "--device N is required" "$WORKER" "${W[@]}"
expect "worker without -c" 2 "-c FILE is required" "$WORKER" --device 0
expect "worker --help" 0 "" "$WORKER" --help

if [ -n "$PUSH" ] && [ -x "$PUSH" ]; then
    P=(-b 127.0.0.1:1 -m m -t t --stdin)
    expect "push -d abc" 2 "--dim 'abc': must be an integer in \[1, 65536\]" "$PUSH" "${P[@]}" -d abc
    expect "push -d 1abc" 2 "--dim '1abc': must be" "$PUSH" "${P[@]}" -d 1abc
    expect "push -d 4294967297 (was sent as dim 1)" 2 "--dim '4294967297': must be" \
        "$PUSH" "${P[@]}" -d 4294967297
    expect "push --num-partitions 4294967297" 2 \
        "--num-partitions '4294967297': must be an integer in \[1, 65536\]" \
        "$PUSH" "${P[@]}" -d 4 --num-partitions 4294967297
    expect "push --timeout-ms abc (was 0: 'no metadata')" 2 "--timeout-ms 'abc': must be" \
        "$PUSH" "${P[@]}" -d 4 --timeout-ms abc
    expect "push --key-bytes 12" 2 "--key-bytes '12': must be an integer in \[4, 8\]" \
        "$PUSH" "${P[@]}" -d 4 --key-bytes 12
    expect "push --key-bytes 5" 2 "--key-bytes must be 4 or 8" "$PUSH" "${P[@]}" -d 4 --key-bytes 5
    expect "push without --dir or --stdin" 2 "give one of --dir and --stdin" \
        "$PUSH" -b 127.0.0.1:1 -m m -t t -d 4
    expect "push without -m" 2 "-m MODEL, -t TABLE and -d DIM are required" \
        "$PUSH" -b 127.0.0.1:1 -t t -d 4 --stdin
    expect_out "push --version" 0 '^hps-push [^ ]+$' "$PUSH" --version
    expect_out "push --help lists --version" 0 '^  --version ' "$PUSH" --help
else
    count=$((count + 1))
    echo "ok $count - hps-push # SKIP not built (no librdkafka)"
fi
echo "1..$count"
[ "$failures" -eq 0 ]
