/*
 * The compiler extensions the CPU reference ops use, each behind one macro (style guide rule 1),
 * with a plain-C fallback so any C11 compiler builds the same code.
 */
#ifndef KERN_COMPILER_H
#define KERN_COMPILER_H

#ifdef __has_attribute
#define KERN_HAS_ATTRIBUTE(x) __has_attribute(x)
#else
#define KERN_HAS_ATTRIBUTE(x) 0
#endif

/*
 * KERN_VEC_CLONES on a function with vectorisable loops: on x86-64 the compiler emits it three
 * times, for x86-64-v4 (AVX-512), x86-64-v3 (AVX2 + FMA: 8 lanes and fused multiply-adds) and
 * the baseline (SSE2), and the loader picks one at startup (an ifunc), so binaries stay portable
 * to any x86-64 while getting the wide loops where the CPU has them. Measured on the BN+SiLU
 * forward: v3 3x faster than the SSE2 loop; v4 made the whole yolov5n training step 7% faster
 * than v3 on an AMD EPYC (Zen 4). Results may differ between clones in the last bits (FMA
 * contraction, vector width), never between runs or thread counts on one machine. Elsewhere it
 * is empty, and so under ASan and TSan: their runtimes are not set up yet when the loader runs
 * the ifunc resolvers (a TSan build crashed in kern_bn_dx_channel's). Clang too (the fuzz
 * build): clang 14 names a C function's clones and ifunc apart from the plain symbol, so a call
 * from another file (kern_bn_sync.c to kern_bn.c's kern_bn_apply_channel) does not link; and
 * clang does not define __SANITIZE_ADDRESS__.
 */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) &&     \
    KERN_HAS_ATTRIBUTE(target_clones) && !defined(__SANITIZE_ADDRESS__) && \
    !defined(__SANITIZE_THREAD__) && !defined(__COVERITY__)
#define KERN_VEC_CLONES \
    __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define KERN_VEC_CLONES
#endif

/*
 * KERN_PREFETCH(p, bytes): asks for the cache line `bytes` past p ahead of its use (a hint:
 * never faults, so it may point past the data; the address is formed as an integer, not as
 * pointer arithmetic that would leave the object). The streaming passes whose loops do much
 * arithmetic per line (the BN backward's sigmoid and divide) kept too few loads in flight for the
 * hardware prefetcher: the blocked BN backward's first pass read its cold operands at 12.7 GB/s,
 * a third of the 2 cores' bandwidth, and ran 2.4x faster with lines asked for KERN_AHEAD ahead
 * (yolov5n 320 b16, 2 threads, Xeon; 1 to 4 KiB did alike, 8 KiB worse). Not where the data is
 * already in cache (the forward's moments, right after the conv wrote them): there it cost 30%.
 */
#define KERN_AHEAD 4096
#if defined(__GNUC__)
#define KERN_PREFETCH(p, bytes) __builtin_prefetch((const void *)((__UINTPTR_TYPE__)(p) + (bytes)))
#else
#define KERN_PREFETCH(p, bytes) ((void)(p))
#endif

#endif
