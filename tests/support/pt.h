// pt.h — shared helpers for Ferry's Check suites.
#ifndef PT_H
#define PT_H

#include <check.h>
#include <stddef.h>

#include "fb/fb.h"

// PT_OK asserts that expr returned FB_OK and prints fb_strerror otherwise.
#define PT_OK(expr)                                                           \
	do {                                                                  \
		int pt_rv_ = (expr);                                          \
		ck_assert_msg(pt_rv_ == 0, "%s failed: %s (%d)", #expr,       \
		    fb_strerror(pt_rv_), pt_rv_);                             \
	} while (0)

// PT_FAIL asserts that expr returned the error code want.
#define PT_FAIL(expr, want)                                                   \
	do {                                                                  \
		int pt_rv_ = (expr);                                          \
		ck_assert_msg(pt_rv_ == (want),                               \
		    "%s returned %s (%d), "                                   \
		    "wanted %s",                                              \
		    #expr, fb_strerror(pt_rv_), pt_rv_, fb_strerror(want));   \
	} while (0)

// pt_addr writes a unique address for transport "inproc", "ipc" or "tcp"
// into buf (size n) and returns buf. tcp addresses use port 0 (the caller
// reads the bound port back); ipc paths live under /tmp.
char *pt_addr(char *buf, size_t n, const char *transport);

// pt_free_port returns a TCP port on 127.0.0.1 that was free a moment ago.
int pt_free_port(void);

#endif // PT_H
