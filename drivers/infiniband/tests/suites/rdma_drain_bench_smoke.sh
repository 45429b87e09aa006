# One-sample smoke of the benchmark, so that it keeps building and running.
# shellcheck shell=sh
ktap_begin rdma_drain_bench_smoke
check bench_smoke_runs sh -c "insmod \$(find /lib/modules/*/updates -name rdma_drain_bench.ko) samples=1 && rmmod rdma_drain_bench && dmesg | grep -q 'rdma_drain_bench: end,ok'"
ktap_end rdma_drain_bench_smoke
