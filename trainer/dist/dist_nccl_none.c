/* Builds without NCCL (no CUDA toolkit with nccl.h and libnccl): no NCCL backend;
 * trn_dist_backend_available(TRN_DIST_NCCL) says so before anyone asks for it. */
#include "priv/dist_internal.h"

const struct dist_backend *dist_nccl_backend(void)
{
    return NULL;
}
