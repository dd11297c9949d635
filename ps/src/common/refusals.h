// refusals.h — requests refused before any handler, counted per reason
// and per peer, and logged so that a peer cannot flood the log
// (refusals.c).
#ifndef PS_REFUSALS_H
#define PS_REFUSALS_H

#include <stdint.h>
#include <nng/nng.h>

#include "obs/obs.h"
#include "psw/psw.h"

struct ps_refusals;

// ps__refusals_open registers ferry_rpc_refused_total{reason} and the
// per-peer family in reg and returns the table. Start-up only. Errors:
// FB_ENOMEM, FB_EINVAL.
int ps__refusals_open(struct obs_registry *reg, struct ps_refusals **out);

// ps__refusals_close frees r (NULL: no-op) once no call can note.
void ps__refusals_close(struct ps_refusals *r);

// ps__refusals_note counts one refusal of a request of method from the
// host behind pipe, signed as claim (PSW_ROLE_NONE: unknown), for why
// (named by psw_auth_reason), and logs it when neither this peer nor the
// process has logged a refusal within the last PS_REFUSAL_LOG_MS (the
// line then says how many it did not log). Any thread.
void ps__refusals_note(struct ps_refusals *r, nng_pipe pipe, int method,
    struct psw_ident claim, const char *why);

// At most one refusal line per peer, and PS_REFUSAL_LOG_MAX lines in
// all, per this many milliseconds.
#define PS_REFUSAL_LOG_MS 1000u
#define PS_REFUSAL_LOG_MAX 8u

#endif // PS_REFUSALS_H
