// la_stages: times one request through the ggml port of LocateAnything
// (locate-anything.cpp) stage by stage, the way `worker bench` times ours.
//
// The port's own CLI prints no timings and stops at the end-of-text token, so the
// side-by-side benchmark (bench/ggml/compare.sh) builds this small driver against the
// port's library instead. It calls the same public entry points the port's Engine uses,
// in the same order, and times:
//
//   vision   the vision tower on the preprocessed image, the 2x2 patch merge and the
//            projector (image file reading and resizing are not timed, as in ours)
//   prefill  the whole prompt into the port's resident KV cache, the LM head for the
//            last position and the greedy pick of the first token
//   decode   --tokens greedy steps after that, each one token through every layer with
//            the cache, the LM head and the pick; it never stops early on end-of-text,
//            so every engine generates the same number of tokens
//
// Output: one "key value" line per figure, read by compare.sh.
//
// One step of the port's decode loop (a chunk of one token at the next position) is a
// private member of its LMForward class. It is reached through the standard explicit-
// instantiation rule (access is not checked in the template arguments of an explicit
// instantiation), so the driver needs no change to the port's source.
#include "lm.hpp"
#include "image_io.hpp"
#include "model_loader.hpp"
#include "backend.hpp"
#include "projector.hpp"
#include "prompt.hpp"
#include "qwen2.hpp"
#include "tokenizer.hpp"
#include "vit_encoder.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

// The private decode step: run_resident_causal(x, n_new, pos0, kv, logits).
using StepFn = bool (la::LMForward::*)(const std::vector<float>&, int, int, la::ResidentKV&,
                                       std::vector<float>&);
struct StepTag {};
StepFn step_fn(StepTag);
template <StepFn F> struct StepAccess {
    friend StepFn step_fn(StepTag) { return F; }
};
template struct StepAccess<&la::LMForward::run_resident_causal>;

struct Args {
    std::string model, image, prompt;
    int threads = 2, tokens = 64;
};

double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Greedy pick as the port does it: the first maximum (lowest id on ties).
int32_t argmax(const std::vector<float>& l) {
    size_t best = 0;
    for (size_t i = 1; i < l.size(); ++i)
        if (l[i] > l[best]) best = i;
    return (int32_t)best;
}

bool parse(int argc, char** argv, Args& a) {
    for (int i = 1; i < argc; ++i) {
        const char* f = argv[i];
        if (i + 1 >= argc) return false;
        const char* v = argv[++i];
        if (!std::strcmp(f, "--model")) a.model = v;
        else if (!std::strcmp(f, "--image")) a.image = v;
        else if (!std::strcmp(f, "--prompt")) a.prompt = v;
        else if (!std::strcmp(f, "--threads")) a.threads = std::atoi(v);
        else if (!std::strcmp(f, "--tokens")) a.tokens = std::atoi(v);
        else return false;
    }
    return !a.model.empty() && !a.image.empty() && !a.prompt.empty() && a.threads > 0 &&
           a.tokens > 0;
}

int fail(const char* what) {
    std::fprintf(stderr, "la_stages: %s failed\n", what);
    return 1;
}

}  // namespace

int main(int argc, char** argv) {
    Args a;
    if (!parse(argc, argv, a)) {
        std::fprintf(stderr,
                     "usage: la_stages --model GGUF --image FILE --prompt TEXT [--threads 2] [--tokens 64]\n");
        return 2;
    }

    // Load as the port's Engine::load does: the GGUF (read whole into memory), its
    // tokenizer, the thread count, the (no-op on CPU) weight offload.
    auto t_load = std::chrono::steady_clock::now();
    la::ModelLoader ml;
    la::Tokenizer tok;
    la::Backend be;
    if (!ml.load(a.model)) return fail("loading the model");
    if (!tok.load(ml)) return fail("loading the tokenizer");
    be.set_n_threads(a.threads);
    if (!ml.offload_weights(be)) return fail("placing the weights");
    std::printf("load_ms %.1f\n", ms_since(t_load));

    la::Image img;
    la::Preprocessed pre;
    if (!la::load_image_rgb(a.image, img) || !la::preprocess(img, pre)) return fail("reading the image");
    std::vector<int32_t> ids = la::build_prompt(tok, pre.gh, pre.gw, a.prompt);
    if (ids.empty()) return fail("building the prompt");
    std::printf("grid %dx%d\n", pre.gh, pre.gw);
    std::printf("prompt_tokens %zu\n", ids.size());

    // Vision: tower, merge, projector.
    auto t0 = std::chrono::steady_clock::now();
    la::VitEncoder vit(ml, be);
    std::vector<float> vfinal;
    std::vector<std::vector<float>> captured;
    if (!vit.forward(pre.pixel_values, pre.gh, pre.gw, vfinal, {}, captured)) return fail("vision");
    std::vector<float> merged = la::merge_patches(vfinal, pre.gh, pre.gw, (int)ml.config().vit_hidden);
    la::Projector proj(ml, be);
    std::vector<float> projected;
    if (!proj.project(merged, projected)) return fail("projector");
    std::printf("vision_ms %.1f\n", ms_since(t0));

    // Prefill into a cache sized like the port's own greedy loop sizes it.
    const auto& c = ml.config();
    la::LMForward lm(ml, be);
    la::ResidentKV kv;
    if (!kv.init(be, (int)c.lm_n_layers, (int)c.lm_head_dim, (int)c.lm_n_kv_heads,
                 (int)ids.size() + a.tokens + 32))
        return fail("allocating the KV cache");
    auto t1 = std::chrono::steady_clock::now();
    std::vector<float> logits;
    if (!lm.prefill_resident(ids, projected, kv, &logits)) return fail("prefill");
    int32_t next = argmax(logits);
    std::printf("prefill_ms %.1f\n", ms_since(t1));

    // Decode: --tokens steps, one token each.
    StepFn step = step_fn(StepTag{});
    auto t2 = std::chrono::steady_clock::now();
    std::vector<float> emb;
    for (int i = 0; i < a.tokens; ++i) {
        lm.embed_tokens_host(std::vector<int32_t>{next}, emb);
        if (!(lm.*step)(emb, 1, kv.past_len, kv, logits)) return fail("decode step");
        next = argmax(logits);
    }
    double dec = ms_since(t2);
    std::printf("decode_ms %.1f\n", dec);
    std::printf("decode_tokens %d\n", a.tokens);
    kv.free();
    return 0;
}
