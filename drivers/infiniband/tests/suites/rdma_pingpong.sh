# The first user of kernel::infiniband: the Rust sample rust_rdma_pingpong (samples/rust/) and its C verbs reference rdma_pingpong_c (helpers/) each bounce messages between two RC QPs on rxe0 and check every byte, at 64 B and 4 KiB; a bad size is refused with a line.
# shellcheck shell=sh
# Each module prints "send SIZE B x N: BYTES bytes verified, WRONG wrong"
# (and a line with its timing) and fails to load if a byte or a
# completion was wrong. The checks ask for every byte of every round trip
# verified (2 x SIZE x N) and none wrong, that the module then unloads,
# and that the Rust sample leaves no QP of kernel::infiniband behind.
rounds=200
c_ko=$(mod_path rdma_pingpong_c)
qps_before=$(owned qp)
ktap_begin rdma_pingpong
for size in 64 4096; do
	line="send $size B x $rounds: $((2 * size * rounds)) bytes verified, 0 wrong"
	check "rust_${size}_bytes_each_byte_verified" sh -c "modprobe rust_rdma_pingpong size=$size iterations=$rounds && dmesg | grep -F 'rust_rdma_pingpong: $line' && rmmod rust_rdma_pingpong"
	check "c_${size}_bytes_each_byte_verified" sh -c "insmod $c_ko size=$size iterations=$rounds && dmesg | grep -F 'rdma_pingpong_c: $line' && rmmod rdma_pingpong_c"
done
check rust_bad_size_refused sh -c "! modprobe rust_rdma_pingpong size=0 && dmesg | grep -F 'rust_rdma_pingpong: size must be 1 to 65536 bytes, not 0'"
check rust_qps_destroyed count_is qp "$qps_before"
ktap_end rdma_pingpong
