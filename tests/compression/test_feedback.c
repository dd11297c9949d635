// test_feedback.c — error feedback and the shared pull reference
// (feedback.c): docs/algorithms.md §2.6 items 3 to 6 — the EF bookkeeping
// identity, the residual bounds, pull lockstep with a naive-delta negative
// control, and convex convergence against fp32 with a no-EF negative control.
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <comp/comp.h>

#include "compression_tests.h"
#include "pt.h"

static struct comp_codec
codec(const char *spec, uint32_t bucket)
{
	struct comp_codec c;
	ck_assert_int_eq(comp_codec_parse(spec, bucket, &c), 0);
	return c;
}

static double
norm2(const double *v, size_t n)
{
	double s = 0;
	for (size_t i = 0; i < n; i++)
		s += v[i] * v[i];
	return sqrt(s);
}

// Sum_t deq(c_t) + e_T == Sum_t g_t to 1e-5 relative, for every codec, at a
// length that is not a multiple of 8 or of the bucket; without the e_T term
// the identity is off by far more (so the check can fail).
START_TEST(test_feedback_ef_identity)
{
	enum { N = 1001, T = 300 };
	const char *sp[] = { "q8", "q4", "q2", "sign", "topk:0.05", "fp16",
		"bf16", "none", "topk:0.05+q8", "topk:0.05+q4", "randk:0.05",
		"randk:0.1+q8", "randk:0.1+q4" };
	float      *g = malloc(N * 4), *e = malloc(N * 4), *y = malloc(N * 4);
	double  *sg = malloc(N * 8), *sd = malloc(N * 8), *r = malloc(N * 8);
	uint8_t *buf = malloc(8 * N);
	for (size_t s = 0; s < sizeof sp / sizeof sp[0]; s++) {
		struct comp_codec c = codec(sp[s], 128);
		memset(e, 0, N * 4);
		memset(sg, 0, N * 8);
		memset(sd, 0, N * 8);
		for (int t = 0; t < T; t++) {
			tr_fill(g, N, 1.0 + (t % 7), 1000 + t);
			size_t len;
			PT_OK(comp_ef_encode(&c, g, e, N, NULL, buf, 8 * N,
			    &len));
			PT_OK(comp_decode(&c, buf, len, N, y));
			for (size_t i = 0; i < N; i++) {
				sg[i] += g[i];
				sd[i] += y[i];
			}
		}
		for (size_t i = 0; i < N; i++)
			r[i] = sd[i] + e[i] - sg[i];
		double rel = norm2(r, N) / norm2(sg, N);
		TR_ASSERT_MSG(rel <= 1e-5, "%s: EF identity off by %g", sp[s],
		    rel);
		if (strcmp(sp[s], "q2") == 0) { // negative control
			for (size_t i = 0; i < N; i++)
				r[i] = sd[i] - sg[i];
			TR_ASSERT(norm2(r, N) / norm2(sg, N) > 1e-3);
		}
	}
	free(g);
	free(e);
	free(y);
	free(sg);
	free(sd);
	free(r);
	free(buf);
}
END_TEST

// Residual bounds over 10^4 steps of bounded gradients: |e_i| <= s_j/(2L)
// (+ fp32 rounding, TR_QSLACK) after every step (s_j read from the message);
// ||e||_inf <= ||g||_inf/(2L-1) for every b; where a worst-case delta exists
// (q8 B<=512, q4 B<=128)
// ||e||_2 <= sqrt(1-d)/(1-sqrt(1-d)) max||g||_2; and the last 1000 steps
// are no worse than 2x steps 1000..2000 (no linear growth).
START_TEST(test_feedback_ef_residual_bound)
{
	enum { N = 300, T = 10000 };
	const char    *sp[] = { "q8", "q4", "q2" };
	const uint32_t bk[] = { 512, 128, 128 };
	const double   Ls[] = { 127, 7, 1 };
	float         *g = malloc(N * 4), *e = calloc(N, 4);
	uint8_t       *buf = malloc(8 * N);
	for (int s = 0; s < 3; s++) {
		struct comp_codec c = codec(sp[s], bk[s]);
		double            L = Ls[s], gmax2 = 0, early = 0, late = 0;
		double            emax2 = 0;
		uint64_t          seed  = 31 + s;
		memset(e, 0, N * 4);
		for (int t = 0; t < T; t++) {
			double g2 = 0;
			for (size_t i = 0; i < N; i++) {
				g[i] = (float) (2 * tr_unif(&seed) - 1);
				g2 += (double) g[i] * g[i];
			}
			gmax2 = g2 > gmax2 ? g2 : gmax2;
			size_t len;
			PT_OK(comp_ef_encode(&c, g, e, N, NULL, buf, 8 * N,
			    &len));
			double e2 = 0;
			for (size_t i = 0; i < N; i++) {
				double sj = fb_get_f32le(
				    buf + 4 * (i / c.bucket));
				TR_ASSERT(
				    fabs(e[i]) <= sj / (2 * L) * (1 + 1e-6) +
				        TR_QSLACK * sj);
				TR_ASSERT(
				    fabs(e[i]) <= 1.0 / (2 * L - 1) + 1e-6);
				e2 += (double) e[i] * e[i];
			}
			emax2 = e2 > emax2 ? e2 : emax2;
			if (t >= 1000 && t < 2000)
				early = e2 > early ? e2 : early;
			if (t >= T - 1000)
				late = e2 > late ? e2 : late;
		}
		TR_ASSERT_MSG(sqrt(late) <= 2 * sqrt(early),
		    "%s: residual grows (%g -> %g)", sp[s], sqrt(early),
		    sqrt(late));
		if (s < 2) { // bucket sizes here: 300 (q8), 128 (q4)
			double m = s == 0 ? 300 : 128;
			double r = sqrt(m / (4 * L * L));
			TR_ASSERT_MSG(sqrt(emax2) <= r / (1 - r) * sqrt(gmax2),
			    "%s: ||e|| %g above the geometric bound %g", sp[s],
			    sqrt(emax2), r / (1 - r) * sqrt(gmax2));
		}
	}
	free(g);
	free(e);
	free(buf);
}
END_TEST

// Pull lockstep: the server's ref (comp_ref_encode) and a trainer's copy
// (comp_decode_add of the same bytes, alternately on the portable and the
// AVX-512 kernels) are memcmp-equal after every pull, for every codec;
// ||x - w||_inf stays within the last delta's s/(2L) (+ the rounding of the
// add). Naive delta accumulation without the reference drifts >= 10x more.
START_TEST(test_feedback_pull_lockstep)
{
	enum { N = 1000, T = 3000 };
	const char *sp[] = { "q8", "q4", "q2", "sign", "topk:0.1", "fp16",
		"bf16", "none", "topk:0.1+q8", "topk:0.1+q4", "randk:0.1",
		"randk:0.1+q8" };
	float *x = malloc(N * 4), *xprev = malloc(N * 4), *ws = malloc(N * 4);
	float *wt = malloc(N * 4), *wn = malloc(N * 4), *sc = malloc(N * 4);
	uint8_t *buf = malloc(8 * N), *nb = malloc(8 * N);
	for (size_t s = 0; s < sizeof sp / sizeof sp[0]; s++) {
		struct comp_codec c = codec(sp[s], 128);
		int q = c.id == COMP_Q8 || c.id == COMP_Q4 || c.id == COMP_Q2;
		double   L = c.id == COMP_Q8 ? 127 : c.id == COMP_Q4 ? 7 : 1;
		uint64_t seed = 7;
		tr_fill(x, N, 1.0, 1);
		memcpy(ws, x, N * 4); // after a FULL sync
		memcpy(wt, x, N * 4);
		memcpy(wn, x, N * 4);
		for (int t = 0; t < T; t++) {
			memcpy(xprev, x, N * 4);
			for (size_t i = 0; i < N; i++)
				x[i] -= (float) (0.01 *
				    (tr_gauss(&seed) + 0.1 * x[i]));
			size_t len;
			PT_OK(comp_ref_encode(&c, x, ws, N, sc, buf, 8 * N,
			    &len));
			comp_simd_set(t & 1);
			PT_OK(comp_decode_add(&c, buf, len, N, wt));
			comp_simd_set(1);
			TR_ASSERT_MSG(memcmp(ws, wt, N * 4) == 0,
			    "%s: lockstep lost at step %d", sp[s], t);
			if (q)
				for (size_t i = 0; i < N; i++) {
					double sj = fb_get_f32le(
					    buf + 4 * (i / c.bucket));
					double ulp = nextafterf(fabsf(ws[i]),
					                 INFINITY) -
					    fabsf(ws[i]);
					TR_ASSERT(
					    fabs((double) x[i] - ws[i]) <=
					    sj / (2 * L) * (1 + 1e-6) +
					        TR_QSLACK * sj + ulp);
				}
			// naive: send Q(x_t - x_{t-1}) and just accumulate
			for (size_t i = 0; i < N; i++)
				sc[i] = x[i] - xprev[i];
			PT_OK(comp_encode(&c, sc, N, NULL, nb, 8 * N, &len));
			PT_OK(comp_decode_add(&c, nb, len, N, wn));
		}
		if (c.id == COMP_Q8 || c.id == COMP_Q4 || c.id == COMP_Q2) {
			double gr = 0, gn = 0;
			for (size_t i = 0; i < N; i++) {
				gr += ((double) x[i] - ws[i]) * (x[i] - ws[i]);
				gn += ((double) x[i] - wn[i]) * (x[i] - wn[i]);
			}
			TR_ASSERT_MSG(sqrt(gn) >= 10 * sqrt(gr),
			    "%s: naive gap %g not 10x the reference gap %g",
			    sp[s], sqrt(gn), sqrt(gr));
		}
	}
	free(x);
	free(xprev);
	free(ws);
	free(wt);
	free(wn);
	free(sc);
	free(buf);
	free(nb);
}
END_TEST

// ---- convex convergence: ridge least squares, 4 workers --------------------

enum { NS = 2048, D = 256, W = 4, BS = 32, T = 3000 };

struct prob {
	float  a[NS][D];
	float  b[NS];
	double lam, fstar, f0, lr0;
};

static double
fval(const struct prob *p, const float *x)
{
	double f = 0, r2 = 0;
	for (size_t i = 0; i < NS; i++) {
		double r = -p->b[i];
		for (size_t j = 0; j < D; j++)
			r += (double) p->a[i][j] * x[j];
		f += r * r;
	}
	for (size_t j = 0; j < D; j++)
		r2 += (double) x[j] * x[j];
	return f / (2.0 * NS) + p->lam / 2 * r2;
}

// prob_init builds A with column scales from e^-1.5 to e^1.5, b = A x0 +
// noise, and solves H x* = A^T b / N by Cholesky for f*.
static struct prob *
prob_init(void)
{
	struct prob *p    = malloc(sizeof *p);
	uint64_t     seed = 2024;
	double      *x0   = malloc(D * 8);
	for (size_t j = 0; j < D; j++)
		x0[j] = tr_gauss(&seed);
	for (size_t i = 0; i < NS; i++) {
		double dot = 0;
		for (size_t j = 0; j < D; j++) {
			double sc  = exp(-1.5 + 3.0 * (double) j / D);
			p->a[i][j] = (float) (sc * tr_gauss(&seed));
			dot += p->a[i][j] * x0[j];
		}
		p->b[i] = (float) (dot + 0.5 * tr_gauss(&seed));
	}
	p->lam    = 1e-2;
	double *h = calloc(D * D, 8), *rhs = calloc(D, 8);
	for (size_t i = 0; i < NS; i++)
		for (size_t j = 0; j < D; j++) {
			double aij = p->a[i][j];
			rhs[j] += aij * p->b[i] / NS;
			for (size_t k = 0; k <= j; k++)
				h[j * D + k] += aij * p->a[i][k] / NS;
		}
	for (size_t j = 0; j < D; j++) {
		h[j * D + j] += p->lam;
		for (size_t k = 0; k < j; k++)
			h[k * D + j] = h[j * D + k];
	}
	// power iteration for lambda_max (step size)
	double *v = malloc(D * 8), *hv = malloc(D * 8), lmax = 0;
	for (size_t j = 0; j < D; j++)
		v[j] = 1.0;
	for (int it = 0; it < 100; it++) {
		double nn = 0;
		for (size_t j = 0; j < D; j++) {
			hv[j] = 0;
			for (size_t k = 0; k < D; k++)
				hv[j] += h[j * D + k] * v[k];
			nn += hv[j] * hv[j];
		}
		lmax = sqrt(nn);
		for (size_t j = 0; j < D; j++)
			v[j] = hv[j] / lmax;
	}
	p->lr0 = 0.5 / lmax;
	// Cholesky in place (lower), then two triangular solves
	for (size_t j = 0; j < D; j++) {
		for (size_t k = 0; k < j; k++)
			h[j * D + j] -= h[j * D + k] * h[j * D + k];
		h[j * D + j] = sqrt(h[j * D + j]);
		for (size_t i = j + 1; i < D; i++) {
			for (size_t k = 0; k < j; k++)
				h[i * D + j] -= h[i * D + k] * h[j * D + k];
			h[i * D + j] /= h[j * D + j];
		}
	}
	for (size_t j = 0; j < D; j++) {
		for (size_t k = 0; k < j; k++)
			rhs[j] -= h[j * D + k] * rhs[k];
		rhs[j] /= h[j * D + j];
	}
	for (size_t j = D; j-- > 0;) {
		for (size_t k = j + 1; k < D; k++)
			rhs[j] -= h[k * D + j] * rhs[k];
		rhs[j] /= h[j * D + j];
	}
	float *xs = malloc(D * 4), *z = calloc(D, 4);
	for (size_t j = 0; j < D; j++)
		xs[j] = (float) rhs[j];
	p->fstar = fval(p, xs);
	p->f0    = fval(p, z);
	free(x0);
	free(h);
	free(rhs);
	free(v);
	free(hv);
	free(xs);
	free(z);
	return p;
}

// run trains for T steps and returns the relative gap (f - f*)/(f0 - f*) at
// the server's x. push/pull NULL mean fp32; the minibatch sequence is the
// same for every variant.
static double
run(const struct prob *p, const struct comp_codec *push, int ef,
    const struct comp_codec *pull)
{
	static float e[W][D];
	float        x[D] = { 0 }, w[D] = { 0 }, ws[D] = { 0 }, g[D], sum[D];
	float        sc[D];
	uint8_t      buf[8 * D + 16];
	uint64_t     seed = 99;
	memset(e, 0, sizeof e);
	for (int t = 0; t < T; t++) {
		float lr = (float) (p->lr0 / (1.0 + t / 200.0));
		memset(sum, 0, sizeof sum);
		for (int k = 0; k < W; k++) {
			for (size_t j = 0; j < D; j++)
				g[j] = (float) p->lam * w[j];
			for (int bi = 0; bi < BS; bi++) {
				size_t       row = tr_next(&seed) % NS;
				const float *a   = p->a[row];
				float        r   = -p->b[row];
				for (size_t j = 0; j < D; j++)
					r += a[j] * w[j];
				for (size_t j = 0; j < D; j++)
					g[j] += a[j] * r / BS;
			}
			size_t len;
			if (push == NULL) {
				for (size_t j = 0; j < D; j++)
					sum[j] += g[j];
				continue;
			}
			if (ef)
				PT_OK(comp_ef_encode(push, g, e[k], D, NULL,
				    buf, sizeof buf, &len));
			else
				PT_OK(comp_encode(push, g, D, NULL, buf,
				    sizeof buf, &len));
			PT_OK(comp_decode_add(push, buf, len, D, sum));
		}
		for (size_t j = 0; j < D; j++)
			x[j] -= lr * (sum[j] / W);
		if (pull == NULL) {
			memcpy(w, x, sizeof w);
			continue;
		}
		size_t len;
		PT_OK(comp_ref_encode(pull, x, ws, D, sc, buf, sizeof buf,
		    &len));
		PT_OK(comp_decode_add(pull, buf, len, D, w));
	}
	return (fval(p, x) - p->fstar) / (p->f0 - p->fstar);
}

// Convex convergence (§2.6 item 6): q8 and q4 with EF on push and the shared
// reference on pull end within 1.05x of the fp32 gap, q2 within 1.5x, and
// 2-bit push without EF at least 2x worse (the negative control).
START_TEST(test_feedback_convex_convergence)
{
	struct prob      *p  = prob_init();
	struct comp_codec q8 = codec("q8", 512), q4 = codec("q4", 128);
	struct comp_codec q2  = codec("q2", 128);
	double            g32 = run(p, NULL, 0, NULL);
	double            g8  = run(p, &q8, 1, &q8);
	double            g4  = run(p, &q4, 1, &q4);
	double            g2  = run(p, &q2, 1, &q2);
	double            g2n = run(p, &q2, 0, NULL);
	fprintf(stderr,
	    "convex gap: fp32 %.4g  q8 %.4g (%.3fx)  q4 %.4g (%.3fx)  "
	    "q2 %.4g (%.3fx)  q2-noEF %.4g (%.2fx)\n",
	    g32, g8, g8 / g32, g4, g4 / g32, g2, g2 / g32, g2n, g2n / g32);
	TR_ASSERT(g32 > 0 && g32 < 0.05);
	TR_ASSERT(g8 <= 1.05 * g32);
	TR_ASSERT(g4 <= 1.05 * g32);
	TR_ASSERT(g2 <= 1.5 * g32);
	TR_ASSERT(g2n >= 2 * g32);
	free(p);
}
END_TEST

// Argument errors of comp_ef_encode and comp_ref_encode; a non-finite
// g + e or x - ref leaves the state untouched.
// comp_ef_encode and comp_ref_encode take a fused route for the bucketed
// quantizers; their bytes and floats must equal the plain sequence built
// from the public calls (p = g + e, encode, e = p - deq; d = x - ref,
// encode, decode_add), for every quantizer, stochastic rounding, buckets
// on both sides of the fused group size, odd lengths, subnormal-scale
// buckets and all-zero buckets. A non-finite value fails and leaves e and
// ref untouched.
START_TEST(test_feedback_fused_matches_plain)
{
	static const char    *specs[]   = { "q8", "q4", "q2", "q8:sr", "q4:sr",
		     "q2:sr", "sign" };
	static const uint32_t buckets[] = { 512, 1, 7, 100, 4096, 4097 };
	static const size_t   lens[]    = { 1, 1000, 10007, 70001 };
	for (size_t a = 0; a < sizeof(specs) / sizeof(specs[0]); a++) {
		for (size_t b = 0; b < sizeof(buckets) / sizeof(buckets[0]);
		     b++) {
			for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]);
			     l++) {
				struct comp_codec c = codec(specs[a],
				    buckets[b]);
				size_t n = lens[l], cap = comp_bound(&c, n),
				       o1, o2;
				float *g = malloc(n * 4), *e1 = malloc(n * 4),
				      *e2 = malloc(n * 4), *p = malloc(n * 4),
				      *q = malloc(n * 4), *scr = malloc(n * 4);
				uint8_t *c1 = malloc(cap), *c2 = malloc(cap);
				uint64_t r1 = 77, r2 = 77;
				uint32_t seed = (uint32_t) (a * 1000 + b * 10 +
				    l);
				for (size_t i = 0; i < n; i++) {
					seed  = seed * 1664525u + 1013904223u;
					g[i]  = ((float) (seed >> 8) /
                                                16777216.0f -
                                            0.5f);
					e1[i] = e2[i] = g[i] * 0.25f - 0.01f;
					if (i >= 200 &&
					    i < 300) // subnormal scale
						g[i] = e1[i] = e2[i] = 1e-40f;
					if (i >= 400 &&
					    i < 500) // zero bucket(s)
						g[i] = e1[i] = e2[i] = 0.0f;
				}
				// EF: the library call against the plain
				// sequence.
				ck_assert_int_eq(comp_ef_encode(&c, g, e1, n,
				                     &r1, c1, cap, &o1),
				    0);
				for (size_t i = 0; i < n; i++)
					p[i] = g[i] + e2[i];
				ck_assert_int_eq(
				    comp_encode(&c, p, n, &r2, c2, cap, &o2),
				    0);
				ck_assert_int_eq(comp_decode(&c, c2, o2, n, q),
				    0);
				for (size_t i = 0; i < n; i++)
					e2[i] = p[i] - q[i];
				ck_assert_msg(o1 == o2 &&
				        memcmp(c1, c2, o1) == 0,
				    "%s@%u n=%zu: EF codes differ", specs[a],
				    buckets[b], n);
				ck_assert_msg(memcmp(e1, e2, n * 4) == 0,
				    "%s@%u n=%zu: residuals differ", specs[a],
				    buckets[b], n);
				ck_assert_uint_eq(r1, r2);
				// Reference: x = g, ref = e (deterministic
				// codecs).
				if (!c.stochastic) {
					memcpy(p, e1, n * 4);
					ck_assert_int_eq(comp_ref_encode(&c, g,
					                     e1, n, scr, c1,
					                     cap, &o1),
					    0);
					for (size_t i = 0; i < n; i++)
						q[i] = g[i] - p[i];
					ck_assert_int_eq(comp_encode(&c, q, n,
					                     NULL, c2, cap,
					                     &o2),
					    0);
					ck_assert_int_eq(
					    comp_decode_add(&c, c2, o2, n, p),
					    0);
					ck_assert_msg(memcmp(c1, c2, o1) ==
					            0 &&
					        memcmp(e1, p, n * 4) == 0,
					    "%s@%u n=%zu: reference differs",
					    specs[a], buckets[b], n);
				}
				// A NaN fails and changes nothing.
				if (n > 600) {
					g[n - 3] = NAN;
					memcpy(p, e1, n * 4);
					ck_assert_int_eq(comp_ef_encode(&c, g,
					                     e1, n, &r1, c1,
					                     cap, &o1),
					    FB_EINVAL);
					ck_assert(memcmp(p, e1, n * 4) == 0);
					if (!c.stochastic) {
						ck_assert_int_ne(
						    comp_ref_encode(&c, g, e1,
						        n, scr, c1, cap, &o1),
						    0);
						ck_assert(
						    memcmp(p, e1, n * 4) == 0);
					}
				}
				free(g), free(e1), free(e2), free(p), free(q);
				free(scr), free(c1), free(c2);
			}
		}
	}
}
END_TEST

// A pull delta beyond what fp16 can carry (x - ref = 1e5 > 65504) was
// encoded as Inf, so the server's reference and every trainer's became
// Inf for good. Now the delta is clamped to the codec's largest finite
// value: both sides stay finite, in lockstep, and the reference reaches
// x within a few deltas. bf16 likewise for a difference over FLT_MAX.
START_TEST(test_feedback_ref_delta_out_of_range)
{
	enum { N = 5 };
	const char *sp[] = { "fp16", "bf16" };
	for (size_t s = 0; s < 2; s++) {
		struct comp_codec c = codec(sp[s], 0);
		float   x[N]   = { 1e5f, -1e5f, 70000.0f, 1.0f, -65505.0f };
		float   ref[N] = { 0 }, peer[N] = { 0 }, sc[N];
		uint8_t buf[8 * N];
		if (c.id == COMP_BF16) {
			x[0]   = FLT_MAX;
			ref[0] = peer[0] = -FLT_MAX; // x - ref overflows float
		}
		for (int t = 0; t < 4; t++) {
			size_t len;
			PT_OK(comp_ref_encode(&c, x, ref, N, sc, buf,
			    sizeof(buf), &len));
			PT_OK(comp_decode_add(&c, buf, len, N, peer));
			ck_assert_mem_eq(ref, peer, sizeof(ref));
			for (int i = 0; i < N; i++) {
				ck_assert_msg(isfinite(ref[i]),
				    "%s: ref[%d] = %g at step %d", sp[s], i,
				    (double) ref[i], t);
			}
		}
		for (int i = 0; i < N; i++) {
			ck_assert_msg(fabs((double) x[i] - ref[i]) <=
			        fabs((double) x[i]) * 1e-2,
			    "%s: ref[%d] = %g, x = %g", sp[s], i,
			    (double) ref[i], (double) x[i]);
		}
	}
}
END_TEST

START_TEST(test_feedback_ef_encode_bogus)
{
	struct comp_codec c     = codec("q4", 8);
	float             g[10] = { 1, 2, 3 }, e[10] = { 0.5f }, keep[10];
	uint8_t           out[64];
	size_t            len;
	memcpy(keep, e, sizeof e);
	PT_FAIL(comp_ef_encode(&c, g, NULL, 10, NULL, out, 64, &len),
	    FB_EINVAL);
	PT_FAIL(comp_ef_encode(&c, NULL, e, 10, NULL, out, 64, &len),
	    FB_EINVAL);
	PT_FAIL(comp_ef_encode(&c, g, e, 10, NULL, out, 3, &len), FB_ENOSPC);
	PT_FAIL(comp_ef_encode(NULL, g, e, 10, NULL, out, 64, &len),
	    FB_EINVAL);
	g[4] = INFINITY;
	PT_FAIL(comp_ef_encode(&c, g, e, 10, NULL, out, 64, &len), FB_EINVAL);
	c = codec("none", 0);
	PT_FAIL(comp_ef_encode(&c, g, e, 10, NULL, out, 64, &len), FB_EINVAL);
	ck_assert_mem_eq(e, keep, sizeof e);
	c    = codec("q4:sr", 8);
	g[4] = 0;
	PT_FAIL(comp_ef_encode(&c, g, e, 10, NULL, out, 64, &len), FB_EINVAL);
	uint64_t rng = 5;
	PT_OK(comp_ef_encode(&c, g, e, 10, &rng, out, 64, &len));
}
END_TEST

START_TEST(test_feedback_ref_encode_bogus)
{
	struct comp_codec c = codec("q8", 8);
	float   x[10] = { 1, 2, 3 }, ref[10] = { 0 }, sc[10], keep[10];
	uint8_t out[64];
	size_t  len;
	memcpy(keep, ref, sizeof ref);
	PT_FAIL(comp_ref_encode(&c, x, ref, 10, NULL, out, 64, &len),
	    FB_EINVAL);
	PT_FAIL(comp_ref_encode(&c, x, NULL, 10, sc, out, 64, &len),
	    FB_EINVAL);
	PT_FAIL(comp_ref_encode(&c, x, ref, 10, sc, out, 5, &len), FB_ENOSPC);
	x[3] = NAN;
	PT_FAIL(comp_ref_encode(&c, x, ref, 10, sc, out, 64, &len), FB_EINVAL);
	x[3] = 0;
	c    = codec("q8:sr", 8);
	PT_FAIL(comp_ref_encode(&c, x, ref, 10, sc, out, 64, &len), FB_EINVAL);
	ck_assert_mem_eq(ref, keep, sizeof ref);
	c = codec("q8", 8);
	PT_OK(comp_ref_encode(&c, x, ref, 10, sc, out, 64, &len));
	// the max element lands within 1 ulp, the others within s/(2L)
	TR_ASSERT(fabsf(ref[2] - 3.0f) <= nextafterf(3.0f, 4.0f) - 3.0f);
	TR_ASSERT(fabsf(ref[0] - 1.0f) <= 3.0f / 254);
	TR_ASSERT(ref[0] != 0.0f);
}
END_TEST

Suite *
suite_feedback(void)
{
	Suite *s  = suite_create("feedback");
	TCase *tc = tcase_create("feedback");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_feedback_ef_identity);
	tcase_add_test(tc, test_feedback_fused_matches_plain);
	tcase_add_test(tc, test_feedback_ef_residual_bound);
	tcase_add_test(tc, test_feedback_pull_lockstep);
	tcase_add_test(tc, test_feedback_convex_convergence);
	tcase_add_test(tc, test_feedback_ef_encode_bogus);
	tcase_add_test(tc, test_feedback_ref_encode_bogus);
	tcase_add_test(tc, test_feedback_ref_delta_out_of_range);
	suite_add_tcase(s, tc);
	return s;
}
