// kern.c — kernel dispatch: which kernel tables the codecs run on, the
// AVX-512 quantizer kernels and the F16C fp16 ones where the CPU has them
// and comp_simd_set allows, else the portable ones (quant_kern.c,
// float16_kern.c).
//
// DESIGN. The codecs (quant.c, sparse.c, topk.c, float16.c) ask here for
// the table in use on every call; this file reads the kernel files'
// tables and calls nothing else of theirs, and they call nothing here.
#include "comp_impl.h"

static int simd_enabled = 1;

void
comp_simd_set(int enable)
{
	simd_enabled = enable != 0;
}

const struct comp__kern *
comp__kern(void)
{
	const struct comp__kern *k = simd_enabled ? comp__kern_avx512() : NULL;
	return k != NULL ? k : &comp__kern_portable;
}

const struct comp__f16 *
comp__f16(void)
{
	const struct comp__f16 *k = simd_enabled ? comp__f16_f16c() : NULL;
	return k != NULL ? k : &comp__f16_portable;
}

const char *
comp_simd_name(void)
{
	return comp__kern()->name;
}
