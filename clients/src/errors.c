// errors.c — libferry's error toolbox: the texts of the ferry_err codes
// (ferry_strerror), the message ferry_client_last_error returns
// (ferry__fail), and the one translation from fb_ error codes to ferry
// ones (ferry__map_err). Every file of clients/src reports through here;
// this file calls none of them.
#include <stdarg.h>
#include <stdio.h>

#include "client_impl.h"

static const char *const ferry_err_text[FERRY_ERR_COUNT] = {
	[FERRY_OK]        = "ok",
	[FERRY_EINVAL]    = "invalid argument",
	[FERRY_ENOMEM]    = "out of memory",
	[FERRY_ECONNECT]  = "cannot connect",
	[FERRY_ETIMEDOUT] = "timed out",
	[FERRY_EREMOTE]   = "the peer returned an error",
	[FERRY_EPROTO]    = "malformed reply",
	[FERRY_EMISMATCH] = "tensor table does not match the job",
	[FERRY_ESTATE]    = "call out of order",
	[FERRY_ECORRUPT]  = "checksum mismatch",
	[FERRY_ECLOSED]   = "closed",
	[FERRY_EUNSUPP]   = "not supported",
	[FERRY_EBEHIND]   = "behind the job's version: pull and recompute",
	[FERRY_ESINK]     = "the pull sink failed",
	[FERRY_EROLLBACK] = "the job rolled back to a snapshot: pull and go "
	                    "on from its version",
};

FERRY_API const char *
ferry_strerror(int err)
{
	if (err >= 0 && err < FERRY_ERR_COUNT && ferry_err_text[err]) {
		return ferry_err_text[err];
	}
	return "unknown error";
}

int
ferry__fail(ferry_client *c, int err, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(c->err, sizeof(c->err), fmt, ap);
	va_end(ap);
	return err;
}

int
ferry__map_err(int rv)
{
	switch (rv) {
	case FB_OK:
		return FERRY_OK;
	case FB_ETIMEDOUT:
		return FERRY_ETIMEDOUT;
	case FB_EREMOTE:
		return FERRY_EREMOTE;
	case FB_EPROTO:
		return FERRY_EPROTO;
	case FB_ENOMEM:
		return FERRY_ENOMEM;
	default:
		return FERRY_ECONNECT;
	}
}
