# Pass/fail bookkeeping for the shell tests of the programs, sourced by each *_test.sh:
#   ok NAME           count a passed check
#   bad NAME [OUTPUT] count a failed one, with the end of what the program printed
#   finish            print "N passed, M failed" (what CTest matches) and return failure if any failed
passed=0 failed=0
ok() { echo "ok: $1"; passed=$((passed + 1)); }
bad() { echo "FAIL: $1"; [[ -z ${2:-} ]] || echo "$2" | tail -20 | sed 's/^/    /'; failed=$((failed + 1)); }
finish() { echo "$passed passed, $failed failed"; ((failed == 0)); }
