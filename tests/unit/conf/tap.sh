# tests/unit/conf/tap.sh -- TAP helpers of the hps-conf command-line tests
# (test-hps-conf.sh, test-hps-conf-import.sh), sourced after the test sets
# TMP (a scratch folder it removes at exit).  Each check prints
# "ok N - DESC" or "not ok N - DESC" with the command's output as "# "
# lines; the test ends with `[ "$failed" -eq 0 ]`.
n=0
failed=0
ok() { # ok DESCRIPTION COMMAND...: the command must succeed
    local desc=$1
    shift
    n=$((n + 1))
    if "$@" >"$TMP/out" 2>"$TMP/err"; then
        echo "ok $n - $desc"
    else
        echo "not ok $n - $desc"
        sed 's/^/# /' "$TMP/out" "$TMP/err"
        failed=$((failed + 1))
    fi
}
