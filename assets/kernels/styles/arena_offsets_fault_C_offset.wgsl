// PLANTED FAULT: the line marked `planted fault` below differs from arena_offsets.wgsl.
// S6 forward (mamba convention) with every tensor inside ONE buffer, the "arena".
// The params struct says where each tensor starts (in f32 elements); the profile reads
// those offsets from the params fields (offset = "params[4]", ...).
//   y_t = sum_n C_t[n] h_t[n] + D u_t,  h_t = exp(dt A) h_{t-1} + dt B_t u_t,
//   dt = softplus(delta), A = -exp(A_log).
// One invocation per (channel d, batch b) walks the sequence; d_state <= 16.
struct Params {
  batch: u32, seq_len: u32, d_inner: u32, d_state: u32,
  off_u: u32, off_delta: u32, off_A_log: u32, off_B: u32, off_C: u32, off_D: u32, off_y: u32,
}
@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> arena: array<f32>;

fn softplus(x: f32) -> f32 {
  if (x > 20.0) { return x; }
  let e = exp(x);
  if (e < 0.25) {  // log(1 + e) by its series: lavapipe's log is coarse near 1
    return e - e * e / 2.0 + e * e * e / 3.0 - e * e * e * e / 4.0 + e * e * e * e * e / 5.0
      - e * e * e * e * e * e / 6.0 + e * e * e * e * e * e * e / 7.0;
  }
  return log(1.0 + e);
}

@compute @workgroup_size(64)
fn scan(@builtin(global_invocation_id) gid: vec3<u32>) {
  let d = gid.x;
  let b = gid.y;
  let L = params.seq_len;
  let DI = params.d_inner;
  let N = params.d_state;
  if (d >= DI || b >= params.batch) { return; }
  var h: array<f32, 16>;
  for (var t = 0u; t < L; t = t + 1u) {
    let i = (b * L + t) * DI + d;
    let dt = softplus(arena[params.off_delta + i]);
    let u = arena[params.off_u + i];
    var acc = 0.0;
    for (var n = 0u; n < N; n = n + 1u) {
      let a = -exp(arena[params.off_A_log + d * N + n]);
      let bn = (b * L + t) * N + n;
      h[n] = exp(dt * a) * h[n] + dt * arena[params.off_B + bn] * u;
      acc = acc + arena[params.off_B + bn] * h[n];  // planted fault: reads C at B's offset
    }
    arena[params.off_y + i] = acc + arena[params.off_D + d] * u;
  }
}
