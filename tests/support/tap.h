// tap.h — a recording proxy for the replay tests: it listens on a fresh
// address, forwards every request to a target URL and the answer back,
// and keeps a copy of each request's bytes, so that a test can replay
// real signed traffic byte for byte (tap.c).
#ifndef PT_TAP_H
#define PT_TAP_H

#include <stddef.h>
#include <stdint.h>
#include <nng/nng.h>

struct pt_tap;

// pt_tap_open starts a tap in front of target (a tcp URL; it need not
// listen yet: requests wait until it does). Fails the test on error.
struct pt_tap *pt_tap_open(const char *target);

// pt_tap_url is the URL members should dial instead of the target.
const char *pt_tap_url(const struct pt_tap *t);

// pt_tap_count returns how many requests of method (0: any) it recorded.
size_t pt_tap_count(struct pt_tap *t, uint8_t method);

// pt_tap_get returns a copy of the nth recorded request of method (0: any
// method), or NULL when there are not that many (free with nng_msg_free).
nng_msg *pt_tap_get(struct pt_tap *t, uint8_t method, size_t nth);

// pt_tap_close stops t (NULL: no-op) and frees its recordings.
void pt_tap_close(struct pt_tap *t);

// pt_replay sends message m (a recorded request, left untouched) as is to
// url and returns the answer's status, or -1 when none came within 5 s.
int pt_replay(const char *url, const nng_msg *m);

#endif // PT_TAP_H
