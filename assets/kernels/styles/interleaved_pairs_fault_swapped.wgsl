// PLANTED FAULT: the line marked `planted fault` below differs from interleaved_pairs.wgsl.
// One stage alone: the scan h_t = a_t h_{t-1} + b_t over (a, b) pairs that an earlier
// kernel computed (a = A-bar = exp(dt A), b = B-bar u), stored INTERLEAVED on the last
// axis: pairs[..., 0] = a, pairs[..., 1] = b, shape (batch, seq_len, d_inner, d_state, 2).
// The profile's stage roles A_bar and Bu fill it from the reference; h is judged.
struct Params { batch: u32, seq_len: u32, d_inner: u32, d_state: u32, }
@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> pairs: array<vec2<f32>>;
@group(0) @binding(2) var<storage, read_write> h: array<f32>;  // (batch, seq_len, d_inner, d_state)

@compute @workgroup_size(64)
fn scan_pairs(@builtin(global_invocation_id) gid: vec3<u32>) {
  let k = gid.x;  // d * d_state + n: one state channel
  let b = gid.y;
  let W = params.d_inner * params.d_state;
  if (k >= W || b >= params.batch) { return; }
  var state = 0.0;
  for (var t = 0u; t < params.seq_len; t = t + 1u) {
    let i = (b * params.seq_len + t) * W + k;
    let p = pairs[i];
    state = p.y * state + p.x;  // planted fault: a and b swapped
    h[i] = state;
  }
}
