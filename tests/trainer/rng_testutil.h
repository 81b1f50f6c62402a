/* The augmentation tests' draws: xorshift64 in [0, 1) from a file's own state, seeded with
 * RNG_TESTUTIL_SEED (defined before the include); a trn_aug_uniform_fn (ctx unused). */
#ifndef RNG_TESTUTIL_H
#define RNG_TESTUTIL_H

#include <stdint.h>

static uint64_t g_rng = RNG_TESTUTIL_SEED;

static double urand(void *ctx)
{
    (void)ctx;
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (double)(g_rng >> 11) * (1.0 / 9007199254740992.0);
}

#endif
