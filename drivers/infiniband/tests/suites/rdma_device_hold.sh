# A Rust ULP holding rxe0 keeps `rdma link delete` waiting until it lets go.
# shellcheck shell=sh
# A Rust ULP holding rxe0 (DeviceRef, PD, CQ, QP) keeps `rdma link delete`
# waiting, however long, until it lets go at unload; then the delete ends
# and rxe0 comes back for the suites below.
ktap_begin rdma_device_hold
check insmod_rdma_device_hold insmod "$(find /lib/modules/*/updates -name rdma_device_hold.ko)"
rdma link delete rxe0 &
del=$!
sleep 2
check delete_waits_while_held still_running "$del"
check rmmod_rdma_device_hold rmmod rdma_device_hold
# Bounded: a delete still waiting after 120 s fails here, with what holds
# rxe0, rather than stopping the whole run at the boot timeout. (In this
# shell: `check` runs its command in a subshell, which cannot wait for it.)
delete_rc=1
if pid_ends_within 120 "$del"; then
	wait "$del"
	delete_rc=$?
else
	rdma resource show >/dev/console
fi
check delete_ends_after_release test "$delete_rc" = 0
check rxe_link_readd rdma link add rxe0 type rxe netdev dummy0
check rxe_port_active_again rxe_wait_active
# The same with no more than a GID entry held: a GidAttr holds its device.
check insmod_gid_only insmod "$(find /lib/modules/*/updates -name rdma_device_hold.ko)" gid_only=1
rdma link delete rxe0 &
del=$!
sleep 2
check delete_waits_while_a_gid_is_held still_running "$del"
check rmmod_gid_holder rmmod rdma_device_hold
delete_rc=1
pid_ends_within 120 "$del" && { wait "$del"; delete_rc=$?; }
check delete_ends_after_the_gid_release test "$delete_rc" = 0
check rxe_link_readd_after_gid rdma link add rxe0 type rxe netdev dummy0
check rxe_port_active_after_gid rxe_wait_active
ktap_end rdma_device_hold
