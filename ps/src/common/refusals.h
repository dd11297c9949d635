// refusals.h — requests refused before any handler, counted per reason
// and per peer, and logged so that a peer cannot flood the log; and the
// trainer ranks whose identity is refused (quarantined, issue 31)
// (refusals.c).
#ifndef PS_REFUSALS_H
#define PS_REFUSALS_H

#include <stddef.h>
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

struct ps_call;

// The trainer ranks a quarantine can name: every rank a map may hold
// (mapinstall.c bounds trainers to 65536).
#define PS_QUARANTINE_RANKS 65536u

// ps__refusals_quarantine marks the n trainer ranks of ranks quarantined
// (idempotent; ranks >= PS_QUARANTINE_RANKS are ignored): from then on
// ps__refusals_quarantined refuses their requests. Any thread.
void ps__refusals_quarantine(struct ps_refusals *r, const uint32_t *ranks,
    size_t n);

// ps__refusals_is_quarantined tells whether trainer rank is quarantined.
int ps__refusals_is_quarantined(const struct ps_refusals *r, uint32_t rank);

// ps__refusals_quarantined tells whether c comes from a quarantined
// trainer: by its identity (c->peer: signed as, or the certificate of,
// trainer R) when it has one; without one (no secret, no member
// certificate), by the rank it claims on the requests only trainers send
// (a trainer's Register, Heartbeat or Leave body; Header.rank of Pull,
// Push, PushPull, Rows, Lease, ReportLinks): claims, not identities. When
// so it counts and logs the refusal (reason "quarantined"), writes the
// answer's text into why (n bytes) and returns 1. Costs one atomic load
// while nobody is quarantined. Any thread; c's header is unpacked.
int ps__refusals_quarantined(struct ps_refusals *r, struct ps_call *c,
    char *why, size_t n);

// At most one refusal line per peer, and PS_REFUSAL_LOG_MAX lines in
// all, per this many milliseconds.
#define PS_REFUSAL_LOG_MS 1000u
#define PS_REFUSAL_LOG_MAX 8u

#endif // PS_REFUSALS_H
