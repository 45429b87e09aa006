# A QP forgotten by a module that is then unloaded keeps its owner's name.
# shellcheck shell=sh
# A QP forgotten by a module that is then unloaded: restrack keeps a pointer
# to its owner's name, which must not have been in the module's memory.
# The QP is never connected and nothing is posted: no completion and no
# event can call into the module after it is gone.
# A count that fails leaves -1: its case then wants 0 where the forgotten
# object is one.
qps=$(owned qp) || qps=-1
pds=$(owned pd) || pds=-1
cqs=$(owned cq) || cqs=-1
ktap_begin rdma_drain_forgotten_unloaded
check insmod_forget_unload insmod "$(mod_path rdma_drain_forget)" post=0
check rmmod_forget_unload rmmod rdma_drain_forget
check its_qp_is_named count_is qp $((qps + 1))
check its_pd_is_named count_is pd $((pds + 1))
check its_cq_is_named count_is cq $((cqs + 1))
ktap_end rdma_drain_forgotten_unloaded
