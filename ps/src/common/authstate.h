// authstate.h — the job run and the senders' counter floors a signing
// process keeps under its --state-dir (authstate.c).
#ifndef PS_AUTHSTATE_H
#define PS_AUTHSTATE_H

#include "psw/psw.h"

struct ps_auth_state;

// ps__auth_state_open gives a (NULL: signing off, a no-op) its job run
// and floors. Without state_dir it draws a new run. With one it reads
// state_dir/auth.run (or draws a run and writes it there), loads every
// sender's floor and logs each counter a accepts from now on
// (psw_auth_on_accept), so a restart on the same state_dir refuses what
// it accepted before. *out (NULL without a state dir) goes to
// ps__auth_state_close. Errors, logged: FB_EINVAL (unreadable,
// unwritable), FB_ECORRUPT (a damaged file), FB_ENOMEM, FB_ESYSERR.
int ps__auth_state_open(struct psw_auth *a, const char *state_dir,
    struct ps_auth_state **out);

// ps__auth_state_close detaches st from a and frees it (NULL: no-op);
// call it before psw_auth_close(a).
void ps__auth_state_close(struct psw_auth *a, struct ps_auth_state *st);

#endif // PS_AUTHSTATE_H
