// ghash.h — GCM's GHASH with VPCLMULQDQ on AVX-512 (ghash.c), private to
// psw: auth.c computes the GMAC tag of signed frames with it.
#ifndef PSW_GHASH_H
#define PSW_GHASH_H

#include <stddef.h>
#include <stdint.h>

// PSW_GHASH_BLOCKS: blocks hashed per step of the wide loop (the powers
// of H kept).
#define PSW_GHASH_BLOCKS 32

// A hash key H = E_K(0^128) prepared for psw__ghash_*: H^1..H^32 in the
// byte-reflected form the multiplications use.
struct psw__ghash_key {
	uint8_t pow[PSW_GHASH_BLOCKS][16]; // pow[i]: H^(i+1)
};

// psw__ghash_available reports whether this CPU (and OS) has what the
// fast GHASH needs: AVX-512 F/BW/VL and VPCLMULQDQ. When not, the caller
// uses libgcrypt's GMAC (the same tags, slower).
int psw__ghash_available(void);

// psw__ghash_init prepares k from h, the 16 bytes E_K(0^128). Only when
// psw__ghash_available().
void psw__ghash_init(struct psw__ghash_key *k, const uint8_t h[16]);

// psw__ghash_j0 writes GCM's pre-counter block J0 for an IV of iv_len
// bytes (any length but 12: GHASH of the IV, zero-padded, and its bit
// length). Only when psw__ghash_available().
void psw__ghash_j0(const struct psw__ghash_key *k, const uint8_t *iv,
    size_t iv_len, uint8_t j0[16]);

// psw__ghash_aad writes S = GHASH_H(A || 0-pad || [len(A)]_64 || [0]_64)
// for the len bytes at a: GMAC's tag is S xor E_K(J0). Only when
// psw__ghash_available().
void psw__ghash_aad(const struct psw__ghash_key *k, const uint8_t *a,
    size_t len, uint8_t s[16]);

#endif // PSW_GHASH_H
