# A QP reset while rxe flushes its sends reads RESET afterwards (rxe fix, patch 0002).
# shellcheck shell=sh
# helpers/rdma_rxe_late_err.c: each cycle moves a QP to ERR, posts sends,
# waits for the first to be flushed, resets the QP while rxe's requester
# still walks the flushed sends, and asks its state; it loads only if
# every cycle read RESET. Without the fix the flush's
# rxe_qp_error() sets ERR behind the reset (mutant 28).
ktap_begin rdma_rxe_late_err
check reset_qps_read_reset insmod "$(mod_path rdma_rxe_late_err)"
check said_how_many sh -c "dmesg | grep 'rdma_rxe_late_err: 10000 cycles of 16 sends, 0 read ERR after the reset, result 0'"
check rmmod_rdma_rxe_late_err rmmod rdma_rxe_late_err
ktap_end rdma_rxe_late_err
