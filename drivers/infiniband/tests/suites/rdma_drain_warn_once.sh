# Each refusal site WARNs once, as C's WARN_ONCE() (warn_once!(), patch
# 0009), with its text in the splat (0010), and prints its line every time
# (0015). The KUnit suites count WARNs under KUnit's suppression, which (as
# for C) does not use up a site's once, so they cannot see this:
# helpers/rdma_drain_refused.c calls ib_drain_rq() three times outside
# KUnit on a QP in RESET, which rxe will not move to the error state.
# panic_on_warn is off meanwhile; the WARN is expected of this suite
# (scripts/results.py). Mutant 13 (a WARN every time) fails it.
# shellcheck shell=sh
ktap_begin rdma_drain_warn_once
refused_line='failed to drain recv queue: -22: cannot move the QP to the error state'
mark='rust-drain: rdma_drain_warn_once: drains begin'
# since_mark PATTERN: how many console lines after the mark match PATTERN.
since_mark() { dmesg | sed -n "/$mark/,\$p" | grep -c "$1" || true; }
expect_eq() { # expect_eq WHAT SEEN WANTED
	echo "$1: $2, expected $3"
	[ "$2" = "$3" ]
}
# The refusals' rate limiter (10 lines in 5 s) may be spent by the suites
# before: let its interval end.
sleep 6
panic_on_warn=$(cat /proc/sys/kernel/panic_on_warn)
echo 0 >/proc/sys/kernel/panic_on_warn
echo "$mark" >/dev/kmsg
check three_drains_refused insmod "$(mod_path rdma_drain_refused)" drains=3
echo "$panic_on_warn" >/proc/sys/kernel/panic_on_warn
check the_qp_stays_in_reset sh -c "dmesg | grep 'rdma_drain_refused: 3 drains of QP 0x[0-9a-f]* in RESET: 0, state 0 after'"
check one_warn expect_eq WARNs "$(since_mark 'WARNING: .*drain\.rs:')" 1
# The WARN's text, in its splat: the line with nothing before it.
check the_warn_says_why expect_eq "WARN texts" "$(since_mark "^\[ *[0-9.]*\] $refused_line\$")" 1
# The device's lines (ibdev_warn(): "rxe0: QP <n>: ...").
check a_line_each expect_eq lines "$(since_mark ": QP 0x[0-9a-f]*: $refused_line")" 3
check rmmod_rdma_drain_refused rmmod rdma_drain_refused
ktap_end rdma_drain_warn_once
