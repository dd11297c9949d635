// audit.c — the client's part in spot checks (issue 31,
// docs/security.md): the data step a trainer's pushes claim, which a
// verifier recomputes them from.
#include "client_impl.h"

FERRY_API void
ferry_client_data_step(ferry_client *c, uint64_t step)
{
	if (c != NULL) {
		c->data_step = step + 1;
	}
}
