/*
 * Fuzz target: the .pt reader (trainer/weights/ptload.h): zip directory, CRC, DEFLATE, the pickle
 * machine and the state-dict walk. Whatever the bytes, opening either fails with a message
 * naming the file or yields a tree whose state dicts can be built and read without a crash: a
 * read gives the tensor's elements or one of the storage errors a first read may meet (a bad
 * CRC, a bad deflate stream, the inflate budget), nothing else.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ptload.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512];
    struct trn_pt *pt = NULL;
    const int rc = trn_pt_open_mem(data, size, "fuzz.pt", &pt, err, sizeof err);
    if (rc != 0) {
        if (strncmp(err, "fuzz.pt: ", 9) != 0) abort();
        return 0;
    }
    const char *keys[] = { NULL, "", "model", "ema" };
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        const struct trn_pt_tensor *sd;
        const int n = trn_pt_state_dict(pt, keys[k], &sd, err, sizeof err);
        if (n < 0 && strncmp(err, "fuzz.pt: ", 9) != 0) abort();
        for (int i = 0; i < n; i++) {
            if (sd[i].numel > 4096) continue;
            float f[4096];
            const int64_t got = trn_pt_tensor_read_f32(pt, &sd[i], f, 4096);
            if (got != sd[i].numel && got != -TRN_PT_ECRC && got != -TRN_PT_EZIP &&
                got != -TRN_PT_ELIMIT && got != -ENOMEM)
                abort();
        }
    }
    char y[1024];
    (void)trn_pt_model_yaml(pt, NULL, y, sizeof y);
    const char *key, *desc;
    const int nk = trn_pt_top_key(pt, 0, &key, &desc);
    for (int i = 0; i < nk && i < 64; i++)
        trn_pt_top_key(pt, i, &key, &desc);
    trn_pt_close(pt);
    return 0;
}
