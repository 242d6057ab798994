/* The headers umad-sys binds. */
#include <infiniband/umad.h>
#include <infiniband/umad_types.h>
