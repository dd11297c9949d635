// ctr_eval.c — the CTR quality figures: exact ROC AUC and log loss.
//
// AUC is the Mann-Whitney statistic: sort by score, and each positive
// counts the negatives below it plus one half of those tied with it
// (midranks). The sort is an LSD radix sort on the float's bits (an
// order-preserving map to uint32), so a test set of millions takes
// milliseconds and ties are exact (-0 and +0 tie; NaNs sort above every
// number, together).
#include <math.h>
#include <string.h>

#include "tr/ctr.h"
#include "tr_impl.h"

// sort_key maps a float to a uint32 whose unsigned order is the float's
// order: negative numbers have all bits flipped, others the sign bit set.
static uint32_t
sort_key(float v)
{
	uint32_t u;
	if (v == 0.0f) {
		v = 0.0f; // -0 ties with +0
	}
	if (isnan(v)) {
		return UINT32_MAX;
	}
	memcpy(&u, &v, sizeof u);
	return (u & 0x80000000u) ? ~u : u | 0x80000000u;
}

int
tr_auc(const float *score, const float *label, size_t n, double *auc)
{
	uint64_t *a;
	uint64_t *b;
	size_t    cnt[256];
	size_t    i;
	uint64_t  pos       = 0;
	double    num       = 0.0;
	uint64_t  neg_below = 0;
	int       pass;
	if (n == 0) {
		return FB_EINVAL;
	}
	a = fb_alloc(2 * n * sizeof *a);
	if (a == NULL) {
		return FB_ENOMEM;
	}
	b = a + n;
	// item: score key in the high 32 bits, label in bit 0.
	for (i = 0; i < n; i++) {
		uint64_t y = label[i] > 0.5f;
		a[i]       = (uint64_t) sort_key(score[i]) << 32 | y;
		pos += y;
	}
	if (pos == 0 || pos == n) {
		fb_free(a);
		return FB_EINVAL;
	}
	for (pass = 0; pass < 4; pass++) {
		int       shift = 32 + 8 * pass;
		size_t    sum   = 0;
		uint64_t *t;
		memset(cnt, 0, sizeof cnt);
		for (i = 0; i < n; i++) {
			cnt[(a[i] >> shift) & 0xff]++;
		}
		for (i = 0; i < 256; i++) {
			size_t c = cnt[i];
			cnt[i]   = sum;
			sum += c;
		}
		for (i = 0; i < n; i++) {
			b[cnt[(a[i] >> shift) & 0xff]++] = a[i];
		}
		t = a;
		a = b;
		b = t;
	}
	// After an even number of passes a is the original block again.
	for (i = 0; i < n;) {
		uint64_t key = a[i] >> 32;
		uint64_t p = 0, c = 0;
		for (; i < n && a[i] >> 32 == key; i++, c++) {
			p += a[i] & 1;
		}
		num += (double) p *
		    ((double) neg_below + 0.5 * (double) (c - p));
		neg_below += c - p;
	}
	*auc = num / ((double) pos * (double) (n - pos));
	fb_free(a);
	return FB_OK;
}

double
tr_logloss(const float *p, const float *label, size_t n)
{
	double sum = 0.0;
	size_t i;
	if (n == 0) {
		return 0.0;
	}
	for (i = 0; i < n; i++) {
		double q = p[i];
		if (!(q >= 1e-7)) { // also catches NaN
			q = 1e-7;
		} else if (q > 1.0 - 1e-7) {
			q = 1.0 - 1e-7;
		}
		sum -= label[i] > 0.5f ? log(q) : log1p(-q);
	}
	return sum / (double) n;
}
