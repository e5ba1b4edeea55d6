// The FP8 KV cache's per-tensor scales (--kv-dtype fp8), read from the checkpoint where it has them.
#pragma once

#include <cstdint>
#include <vector>

#include "arch/model_desc.h"
#include "kernels/ops.h"
#include "model/weights.h"

namespace sy {

// Every layer's KvQuant, for layers 0..n_layers-1 of the checkpoint (all of them, whichever this rank builds, so that
// every rank checks the same): with fp8, e4m3 and the scales the checkpoint gives, under the names FP8 exporters use
// (vLLM's maybe_remap_kv_scale_name reads the same): ModelOpt's `self_attn.k_proj.k_scale` /
// `self_attn.v_proj.v_scale`, compressed-tensors' `self_attn.k_scale` / `self_attn.v_scale`, or the older single
// `self_attn.kv_scale` for both. MLA's cache row takes the k scale (its v scale, if any, scales no cache and is left
// unread, as vLLM does). With no scales in the checkpoint every scale is 1.0; scales for some layers but not others,
// two names for one scale, or a value that is not a positive finite scalar is an error saying what to do. Without fp8
// the values are plain (e4m3 false) and the scale tensors are left unread. Either way the scale tensors count as used.
std::vector<KvQuant> read_kv_scales(WeightLoader& loader, int64_t n_layers, AttentionKind kind, bool fp8);

}  // namespace sy
