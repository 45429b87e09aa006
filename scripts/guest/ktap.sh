# shellcheck shell=sh
# KTAP for the guest's shell checks: ktap_begin SUITE, then check NAME CMD...
# per test, then ktap_end SUITE prints the suite as its own KTAP stream.
# The start line lets the host tell which suite ran when a report appeared.

ktap_begin() {
	n=0
	results=""
	echo "rust-drain: suite $1 starts"
}

check() { # check NAME CMD...: one KTAP test line per check
	name=$1
	shift
	n=$((n + 1))
	if out=$("$@" 2>&1); then
		results="$results
    # $name: $(echo "$out" | tail -n 1)
    ok $n $name"
	else
		results="$results
    # $name: $(echo "$out" | tail -n 3 | tr '\n' ' ')
    not ok $n $name"
	fi
}

ktap_end() { # ktap_end SUITE
	echo "KTAP version 1"
	echo "1..1"
	echo "    KTAP version 1"
	echo "    # Subtest: $1"
	echo "    1..$n"
	echo "$results" | sed '/^$/d'
	if echo "$results" | grep -q 'not ok'; then echo "not ok 1 $1"; else echo "ok 1 $1"; fi
}

# The kernel prints to the console from its own thread, after insmod has
# returned: a line this shell writes at once can land inside a KTAP line of
# the module's suite and break it. Give the console time to catch up.
console_settle() {
	sleep 1
}
