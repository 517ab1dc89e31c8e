// A naive S6 forward (mamba convention), as one might write it first: one invocation per
// channel (b, d) walks the sequence, with an inner loop over the states that it keeps in
// a private array. Correct, but each step costs 1 + d_state loop iterations of the
// invocation: on lavapipe, which stops an invocation after 65535 loop iterations counted
// over all of its loops, writing stops at the same step in every channel (t = 3641 at
// d_state 16). Its profile, assets/profiles/naive_s6_forward.toml, lays y out as
// (batch, d_inner, seq_len).

struct Params { batch: u32, seq_len: u32, d_inner: u32, d_state: u32, }
@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> u: array<f32>;       // (batch, seq_len, d_inner)
@group(0) @binding(2) var<storage, read> delta: array<f32>;   // (batch, seq_len, d_inner)
@group(0) @binding(3) var<storage, read> A_log: array<f32>;   // (d_inner, d_state)
@group(0) @binding(4) var<storage, read> B: array<f32>;       // (batch, seq_len, d_state)
@group(0) @binding(5) var<storage, read> C: array<f32>;       // (batch, seq_len, d_state)
@group(0) @binding(6) var<storage, read> D: array<f32>;       // (d_inner)
@group(0) @binding(7) var<storage, read_write> y: array<f32>; // (batch, d_inner, seq_len)

const MAX_STATE: u32 = 16u;

fn softplus(x: f32) -> f32 {
  if (x > 20.0) { return x; }
  return log(1.0 + exp(x));
}

@compute @workgroup_size(64)
fn naive_forward(@builtin(global_invocation_id) gid: vec3<u32>) {
  let L = params.seq_len;
  let DI = params.d_inner;
  let N = params.d_state;
  if (gid.x >= params.batch * DI) {
    return;
  }
  let b = gid.x / DI;
  let d = gid.x % DI;
  var h: array<f32, MAX_STATE>;
  for (var t = 0u; t < L; t = t + 1u) {
    let i = (b * L + t) * DI + d;
    let dt = softplus(delta[i]);
    var acc = 0.0;
    for (var n = 0u; n < N; n = n + 1u) {
      let a = -exp(A_log[d * N + n]);
      let bn = (b * L + t) * N + n;
      h[n] = exp(dt * a) * h[n] + dt * B[bn] * u[i];
      acc = acc + C[bn] * h[n];
    }
    y[(b * DI + d) * L + t] = acc + D[d] * u[i];
  }
}
