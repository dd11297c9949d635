// errors.c — how the server role refuses a request: the one error reply
// every handler uses, which also counts the error in the stats. It lives
// apart from the front door (server.c) so that the handlers (pull.c,
// push.c, transfer.c, replicate.c, snapshot.c) do not call back into the
// file that dispatches to them.
#include <stdarg.h>
#include <stdio.h>

#include "server_impl.h"

void
ps__server_reply_err(struct ps_server *s, struct ps_call *c, int status,
    const char *fmt, ...)
{
	char    msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	atomic_fetch_add_explicit(&s->n_err, 1, memory_order_relaxed);
	ps__call_reply_err(c, status, "%s", msg);
}
