// mac_bench.c — what one MAC over a 1 MiB message costs, per MAC that
// signing (proto/src/auth.c) could use: libgcrypt's GMAC-AES256 (the tag
// signing sends), the same tag with ghash.c's VPCLMULQDQ GHASH (what
// signing runs where the CPU has it), Poly1305-AES and HMAC-SHA256
// (libgcrypt). Thread CPU time, so that other load on the
// machine does not count; best of 5 rounds of 100.
//
//   build/bench/mac/mac_bench [MiB]
#include <gcrypt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ghash.h"

static double
cpu_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return (double) t.tv_sec + (double) t.tv_nsec * 1e-9;
}

static const uint8_t key[32] = { 1, 2, 3, 4, 5, 6, 7, 8, 9 };
static uint8_t       iv[24]  = { 7 };
static uint8_t      *buf;
static size_t        len;

// gcry runs libgcrypt's MAC algo (IV of ivlen bytes, 0: none) over buf.
static void
gcry(gcry_mac_hd_t h, size_t ivlen)
{
	uint8_t out[64];
	size_t  n = sizeof(out);
	gcry_mac_reset(h);
	if (ivlen > 0) {
		gcry_mac_setiv(h, iv, ivlen);
	}
	gcry_mac_write(h, buf, len);
	gcry_mac_read(h, out, &n);
}

static void
report(const char *name, double best)
{
	printf("%-28s %8.3f ms/MiB %7.2f GB/s\n", name,
	    best * 1e3 / ((double) len / (1 << 20)),
	    (double) len / best / 1e9);
}

static void
bench_gcry(const char *name, int algo, size_t keylen, size_t ivlen)
{
	gcry_mac_hd_t h;
	double        best = 1e9;
	if (gcry_mac_open(&h, algo, 0, NULL) != 0 ||
	    gcry_mac_setkey(h, key, keylen) != 0) {
		printf("%-28s unavailable\n", name);
		return;
	}
	for (int r = 0; r < 5; r++) {
		double t0 = cpu_s();
		for (int i = 0; i < 100; i++) {
			gcry(h, ivlen);
		}
		double t = (cpu_s() - t0) / 100;
		best     = t < best ? t : best;
	}
	gcry_mac_close(h);
	report(name, best);
}

static void
bench_fast(void)
{
	static struct psw__ghash_key k;
	gcry_cipher_hd_t             aes;
	uint8_t                      h[16] = { 0 }, j0[16], s[16];
	double                       best  = 1e9;
	if (!psw__ghash_available()) {
		printf("%-28s unavailable (no VPCLMULQDQ/AVX-512)\n",
		    "GMAC-AES256 (ghash.c)");
		return;
	}
	gcry_cipher_open(&aes, GCRY_CIPHER_AES256, GCRY_CIPHER_MODE_ECB, 0);
	gcry_cipher_setkey(aes, key, sizeof(key));
	gcry_cipher_encrypt(aes, h, sizeof(h), NULL, 0);
	psw__ghash_init(&k, h);
	for (int r = 0; r < 5; r++) {
		double t0 = cpu_s();
		for (int i = 0; i < 100; i++) {
			psw__ghash_j0(&k, iv, sizeof(iv), j0);
			gcry_cipher_encrypt(aes, j0, sizeof(j0), NULL, 0);
			psw__ghash_aad(&k, buf, len, s);
		}
		double t = (cpu_s() - t0) / 100;
		best     = t < best ? t : best;
	}
	gcry_cipher_close(aes);
	report("GMAC-AES256 (ghash.c)", best);
}

int
main(int argc, char **argv)
{
	size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 1;
	if (mib == 0 || mib > 1024) {
		fprintf(stderr, "usage: mac_bench [MiB, 1..1024]\n");
		return 2;
	}
	gcry_check_version(NULL);
	gcry_control(GCRYCTL_DISABLE_SECMEM, 0);
	gcry_control(GCRYCTL_INITIALIZATION_FINISHED, 0);
	len = mib << 20;
	if ((buf = malloc(len)) == NULL) {
		return 1;
	}
	for (size_t i = 0; i < len; i++) {
		buf[i] = (uint8_t) (i * 131);
	}
	printf("%zu MiB message, thread CPU time, best of 5 x 100\n", mib);
	bench_gcry("GMAC-AES256 (libgcrypt)", GCRY_MAC_GMAC_AES, 32, 24);
	bench_fast();
	bench_gcry("Poly1305-AES (libgcrypt)", GCRY_MAC_POLY1305_AES, 32, 16);
	bench_gcry("HMAC-SHA256 (libgcrypt)", GCRY_MAC_HMAC_SHA256, 32, 0);
	free(buf);
	return 0;
}
