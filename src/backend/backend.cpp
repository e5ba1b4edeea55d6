// Backend ops with a default in terms of the others (a backend overrides them to fuse).
#include "backend/backend.h"

namespace sy {

void Backend::qk_norm_rope_kv_write(const QkRopeKvArgs& a) {
  if (a.q_norm) {
    rms_norm(a.q, a.q_norm, a.q, a.tokens * a.n_heads, a.head_dim, a.norm_eps);
    rms_norm(a.k, a.k_norm, a.k, a.tokens * a.kv_heads, a.head_dim, a.norm_eps);
  }
  RopeArgs ra{.x = a.q,
              .positions = a.positions,
              .inv_freq = a.inv_freq,
              .tokens = a.tokens,
              .heads = a.n_heads,
              .head_dim = a.head_dim,
              .rotary_dim = a.rotary_dim,
              .attention_scale = a.attention_scale,
              .interleaved = a.interleaved};
  rope(ra);
  ra.x = a.k;
  ra.heads = a.kv_heads;
  rope(ra);
  kv_write({.k = a.k,
            .v = a.v,
            .slots = a.slots,
            .k_cache = a.k_cache,
            .v_cache = a.v_cache,
            .tokens = a.tokens,
            .kv_heads = a.kv_heads,
            .head_dim = a.head_dim,
            .v_head_dim = a.head_dim});
}

}  // namespace sy
