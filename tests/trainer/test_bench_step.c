/*
 * trn_bench_step_run (`yolo-train --bench`) on the CPU reference with yolov5n at 64x64: the step
 * runs, the loss is finite, the phase times add up to the step, the rates follow from them, the
 * model facts are the model's; the resident step reads a bf16 net's batch as the stem's
 * space-to-depth tensor, to the host step's loss; asking for a CUDA device where there is none is
 * a clean error.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "bench_step.h"
#include "net.h"
#include "kern.h"
#include "kern_cuda.h"
#include "tap.h"

int main(void)
{
    struct trn_bench_step_opts o;
    trn_bench_step_opts_default(&o);
    o.cfg = TRN_TEST_MODELS_DIR "/yolov5n.yaml";
    o.img = 64;
    o.batch = 2;
    o.warmup = 1;
    o.steps = 2;
    o.boxes = 3;
    /* the reference ops: the resident step below (the device data path, which oneDNN does not
       run) must give the host step's loss bit for bit */
    o.cpu_engine = TRN_CPU_ENGINE_REF;
    struct trn_bench_step_result r;
    char err[256];
    int rc = trn_bench_step_run(&o, &r, err, sizeof err);
    ok(rc == 0, "CPU bench step runs: %s", rc ? err : "ok");
    ok(isfinite(r.loss) && r.loss > 0, "the loss is finite and positive (%g)", r.loss);
    const double sum = r.ms_forward + r.ms_loss + r.ms_backward + r.ms_optimizer + r.ms_ema;
    ok(r.ms_forward > 0 && r.ms_backward > 0 && r.ms_loss >= 0 && r.ms_optimizer > 0 &&
           r.ms_ema > 0,
       "every phase took time (fwd %.2f loss %.2f bwd %.2f opt %.2f ema %.2f ms)", r.ms_forward,
       r.ms_loss, r.ms_backward, r.ms_optimizer, r.ms_ema);
    ok(fabs(sum - r.ms_step) <= 1e-9 * (1 + r.ms_step), "the phases add up to the step");
    ok(fabs(r.img_per_s - o.batch * 1e3 / r.ms_step) <= 1e-6 * r.img_per_s,
       "img/s = batch / step time (%.1f)", r.img_per_s);
    is_int(r.params, 1872157, "yolov5n's parameter count");
    ok(r.gflops_img > 0.01 && r.gflops_img < 4.5 * 64 * 64 / (640.0 * 640.0) + 0.01,
       "forward GFLOPs per image at 64 scale down from 4.5 at 640 (%.4f)", r.gflops_img);
    ok(fabs(r.tflops - 3 * r.gflops_img * o.batch / r.ms_step) <= 1e-9 + 1e-6 * r.tflops,
       "TFLOP/s = 3 x forward FLOPs x batch / step");
    ok(r.net_bytes > 4 * 1872157, "the net holds at least its gradients (%zu bytes)", r.net_bytes);
    is_int(r.on_device, 0, "CPU run is not on a device");

    is_int(r.resident, 0, "the CPU path runs the host step");
    ok(!strcmp(r.engine, "reference"), "on the reference ops ('%s')", r.engine);

    /* the resident step on the device data path (CPU ops): the same numbers, bit for bit */
    struct trn_bench_step_opts dv = o;
    dv.device_path = 1;
    struct trn_bench_step_result rd;
    rc = trn_bench_step_run(&dv, &rd, err, sizeof err);
    ok(rc == 0, "resident bench step runs on the device data path: %s", rc ? err : "ok");
    is_int(rd.resident, 1, "... and says it ran the resident step");
    ok(rd.loss == r.loss, "... its last loss is the host step's, bit for bit (%.9g, %.9g)", rd.loss,
       r.loss);
    ok(rd.ms_forward > 0 && rd.ms_backward > 0 && rd.ms_optimizer > 0 && rd.ms_ema > 0,
       "... every phase took time (fwd %.2f loss %.2f bwd %.2f opt %.2f ema %.2f ms)",
       rd.ms_forward, rd.ms_loss, rd.ms_backward, rd.ms_optimizer, rd.ms_ema);
    ok(rd.peak_bytes > rd.net_bytes + 2 * 4 * 1872157,
       "... peak memory counts the net, momentum and EMA (%zu > %zu + 2 x params x 4)",
       rd.peak_bytes, rd.net_bytes);
    ok(r.peak_bytes == r.net_bytes, "the host step's peak is the net's memory");
    ok(!strcmp(r.input, "float32") && !strcmp(rd.input, "float32"),
       "float32 activations: float32 batches ('%s', '%s')", r.input, rd.input);

    /* bf16 activations: the resident step reads the batch as the stem's space-to-depth tensor
       (net.h THE STEM'S INPUT), the host step casts float32 images; the same loss bits, graph
       replays too */
    for (int lay = 0; lay < 2; lay++) {
        struct trn_bench_step_opts xo = o;
        xo.amp = KERN_DT_BF16;
        xo.warmup = 2; /* what the graph step needs: the same number of steps in all three */
        xo.act_store = lay ? TRN_ACT_BF16_NCHW : TRN_ACT_BF16_NHWC;
        struct trn_bench_step_result rh, rr, rg;
        int rcs[3] = { trn_bench_step_run(&xo, &rh, err, sizeof err) };
        xo.device_path = 1;
        rcs[1] = trn_bench_step_run(&xo, &rr, err, sizeof err);
        xo.cuda_graph = 1;
        rcs[2] = trn_bench_step_run(&xo, &rg, err, sizeof err);
        const char *want = lay ? "bf16 s2d NCHW" : "bf16 s2d NHWC";
        ok(!rcs[0] && !rcs[1] && !rcs[2] && !strcmp(rh.input, "float32") &&
               !strcmp(rr.input, want) && !strcmp(rg.input, want) && rg.graph &&
               isfinite(rh.loss) && rr.loss == rh.loss && rg.loss == rh.loss,
           "bf16 %s: the resident step reads '%s', the host step '%s'; the same last loss "
           "(%.9g, %.9g, graph %.9g) (%s)",
           lay ? "NCHW" : "NHWC", rr.input, rh.input, rh.loss, rr.loss, rg.loss, err);
    }

    struct trn_bench_step_opts bad = o;
    bad.batch = 0;
    is_int(trn_bench_step_run(&bad, &r, err, sizeof err), -EINVAL, "batch 0 refused");
    bad = o;
    bad.cfg = "/nonexistent/model.yaml";
    rc = trn_bench_step_run(&bad, &r, err, sizeof err);
    ok(rc < 0 && strstr(err, "/nonexistent/model.yaml"), "a missing yaml is named: %s", err);
    if (kern_cuda_device_count() == 0) {
        bad = o;
        bad.device = 0;
        rc = trn_bench_step_run(&bad, &r, err, sizeof err);
        ok(rc == -KERN_EBACKEND && strstr(err, "net"), "device 0 without a GPU: %s", err);
    }
    return tap_done();
}
