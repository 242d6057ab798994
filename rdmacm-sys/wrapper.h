/* The headers rdmacm-sys binds. */
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
