# The test modules unload and leave no RDMA object behind.
# shellcheck shell=sh
ktap_begin rdma_drain_teardown
for m in $(test_modules); do
	check "rmmod_$(basename "$m" .ko)" rmmod "$(basename "$m" .ko)"
done
check rxe1_deleted rxe1_delete
check siw0_deleted siw0_delete
for r in qp cq pd srq; do
	check "no_${r}_left" count_is $r 0
done
ktap_end rdma_drain_teardown
