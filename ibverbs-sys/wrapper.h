/* The headers ibverbs-sys binds. */
#include <infiniband/verbs.h>

/*
 * verbs.h redirects some exported names through function-like macros to
 * static inline functions:
 *   ibv_reg_mr      -> __ibv_reg_mr      (ibv_reg_mr_iova2 for optional access flags)
 *   ibv_reg_mr_iova -> __ibv_reg_mr_iova
 *   ibv_query_port  -> ___ibv_query_port (the extended port attributes)
 * Binding the exported symbol of such a name gives the legacy behaviour.
 * These wrappers expand each macro as a C caller's code does; the crate
 * re-exports each under the public name, so `ibv_reg_mr` in Rust is the macro.
 */
static inline struct ibv_mr *rdma_sys_macro_ibv_reg_mr(struct ibv_pd *pd, void *addr,
						       size_t length, int access)
{
	return ibv_reg_mr(pd, addr, length, access);
}

static inline struct ibv_mr *rdma_sys_macro_ibv_reg_mr_iova(struct ibv_pd *pd, void *addr,
							    size_t length, uint64_t iova,
							    int access)
{
	return ibv_reg_mr_iova(pd, addr, length, iova, access);
}

static inline int rdma_sys_macro_ibv_query_port(struct ibv_context *context,
						uint8_t port_num,
						struct ibv_port_attr *port_attr)
{
	return ibv_query_port(context, port_num, port_attr);
}
